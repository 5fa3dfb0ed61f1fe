package lab

import (
	"fmt"
	"os"
	"path/filepath"

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
