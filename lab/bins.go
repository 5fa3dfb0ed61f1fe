package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// KubeBinDirEnv names the directory holding VERSION/kube-apiserver
// (`make test` and `make rehearse` set it to .cache/kube-apiserver).
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
	return fmt.Sprintf("no kube-apiserver binary for %v under %s", e.Missing, e.Dir)
}

func (e *MissingBinaryError) Unwrap() error { return ErrNoKubeBinary }

// Hints names the command that builds them.
func (e *MissingBinaryError) Hints() []string {
	return []string{
		"build them (about 3 minutes each, cached): make kube-apiserver",
		"or point " + KubeBinDirEnv + " at a directory holding VERSION/kube-apiserver",
	}
}

// FindKubeBinDir returns $BREAKGLASS_KUBE_BIN_DIR, or the .cache/kube-apiserver
// of the nearest enclosing checkout (the Makefile's build target).
func FindKubeBinDir() (string, error) {
	if d := os.Getenv(KubeBinDirEnv); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "lab", "kubeapiserver")); err == nil {
			return filepath.Join(dir, ".cache", "kube-apiserver"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", &MissingBinaryError{Dir: "(no " + KubeBinDirEnv + " and not inside a breakglass checkout)", Missing: []string{OldVersion, NewVersion}}
		}
		dir = parent
	}
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
