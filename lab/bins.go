package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Versions are the kube-apiserver versions the lab builds, one module each
// under lab/kubeapiserver, oldest first.
var Versions = []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"}

// KubeBinDirEnv names the directory holding VERSION/kube-apiserver; without
// it the lab looks in the user's cache (KubeCacheDir), where
// lab/scripts/build-kube-apiserver.sh puts them, once per machine.
const KubeBinDirEnv = "BREAKGLASS_KUBE_BIN_DIR"

// ErrNoKubeBinary: a kube-apiserver binary the lab needs is not built
// (exit code failure.LabNoBinaries).
var ErrNoKubeBinary = failure.New(failure.LabNoBinaries, "kube-apiserver binary missing")

// MissingBinaryError names the binaries to build.
type MissingBinaryError struct {
	Dir     string
	Missing []string // versions
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("no kube-apiserver binary for %s under %s", strings.Join(e.Missing, ", "), e.Dir)
}

func (e *MissingBinaryError) Unwrap() error { return ErrNoKubeBinary }

// Hints name the command that builds exactly the missing ones.
func (e *MissingBinaryError) Hints() []string {
	build := "make kube-apiserver KUBE_VERSIONS=\"" + strings.Join(e.Missing, " ") + "\""
	if slices.Equal(e.Missing, []string{OldVersion, NewVersion}) {
		build = "make kube-apiserver-rehearse"
	}
	return []string{
		"build them from a breakglass checkout (3 to 10 minutes each on 2 cores, once per machine): " + build,
		"or: lab/scripts/build-kube-apiserver.sh " + strings.Join(e.Missing, " "),
		"or point " + KubeBinDirEnv + " at a directory holding VERSION/kube-apiserver",
	}
}

// KubeCacheDir is where the binaries are cached for this user:
// $XDG_CACHE_HOME/breakglass/kube-apiserver, else ~/.cache/breakglass/kube-apiserver
// (as lab/scripts/build-kube-apiserver.sh writes them).
func KubeCacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no %s, no XDG_CACHE_HOME and no home directory: %w", KubeBinDirEnv, err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "breakglass", "kube-apiserver"), nil
}

// FindKubeBinDir returns $BREAKGLASS_KUBE_BIN_DIR, else KubeCacheDir.
func FindKubeBinDir() (string, error) {
	if d := os.Getenv(KubeBinDirEnv); d != "" {
		return d, nil
	}
	return KubeCacheDir()
}

// CheckBinaries fails with a MissingBinaryError unless every version has
// an executable under dir.
func CheckBinaries(dir string, versions ...string) error {
	var missing []string
	for _, v := range versions {
		fi, err := os.Stat(filepath.Join(dir, v, "kube-apiserver"))
		if err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		return &MissingBinaryError{Dir: dir, Missing: missing}
	}
	return nil
}

// ErrWrongBinaryVersion: a kube-apiserver binary reports another version
// than the directory it is in names (exit code failure.LabNoBinaries).
var ErrWrongBinaryVersion = failure.New(failure.LabNoBinaries, "kube-apiserver binary of the wrong version")

// CheckBinaryVersion runs `BIN --version` and refuses a binary that is not
// kube-apiserver version: a replay must never run another version than the
// one asked for.
func CheckBinaryVersion(bin, version string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	got := strings.TrimSpace(string(out))
	if err != nil || got != "Kubernetes "+version {
		if err != nil {
			got = err.Error()
		}
		return failure.Hinted(fmt.Errorf("%w: %s says %q, want %q", ErrWrongBinaryVersion, bin, got, "Kubernetes "+version),
			"rebuild it: lab/scripts/build-kube-apiserver.sh "+version,
			"or put the official release binary of "+version+" there (dl.k8s.io/release/"+version+"/bin/linux/amd64/kube-apiserver)")
	}
	return nil
}
