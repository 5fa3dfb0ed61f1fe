package lab

import (
	"context"
	"fmt"
	"io"
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
	Waited  string   // what ended the wait for builds beside this process, if it waited
}

func (e *MissingBinaryError) Error() string {
	msg := fmt.Sprintf("no kube-apiserver binary for %s under %s", strings.Join(e.Missing, ", "), e.Dir)
	if e.Waited != "" {
		msg += " (" + e.Waited + ")"
	}
	return msg
}

func (e *MissingBinaryError) Unwrap() error { return ErrNoKubeBinary }

// Hints name the command that builds exactly the missing ones.
func (e *MissingBinaryError) Hints() []string {
	build := "make kube-apiserver KUBE_VERSIONS=\"" + strings.Join(e.Missing, " ") + "\""
	if slices.Equal(e.Missing, []string{OldVersion, NewVersion}) {
		build = "make kube-apiserver-rehearse"
	}
	return []string{
		"get them from a breakglass checkout, once per machine (the official release where dl.k8s.io answers, ~100 MB each; else built, 7 to 15 minutes each on 2 cores): " + build,
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

// findKubeBinDir returns $BREAKGLASS_KUBE_BIN_DIR, else KubeCacheDir.
func findKubeBinDir() (string, error) {
	if d := os.Getenv(KubeBinDirEnv); d != "" {
		return d, nil
	}
	return KubeCacheDir()
}

// KubeBuildsDoneEnv names a file that appears, holding the builds' exit
// code, once the kube-apiserver builds running beside this process end:
// make test starts the tests while the binaries the rehearsal does not need
// still build (scripts/test.sh). The builds write into the directory that
// holds the file, so a lookup in another directory (a test's own, a
// person's --kube-apiserver-dir) never waits for them.
const KubeBuildsDoneEnv = "BREAKGLASS_KUBE_BUILDS_DONE"

// Binaries returns the directory holding VERSION/kube-apiserver for every
// version: dir, or $BREAKGLASS_KUBE_BIN_DIR, else KubeCacheDir, when dir is
// empty. It is the one lookup of the lab's binaries, for its commands and
// its tests alike: a missing one is a MissingBinaryError at once, except
// while builds run beside this process into that directory
// (KubeBuildsDoneEnv), when it is waited for until it appears, the builds
// end, or ctx ends. log (nil: nowhere) says when it waits and how long it did.
func Binaries(ctx context.Context, dir string, log io.Writer, versions ...string) (string, error) {
	if dir == "" {
		var err error
		if dir, err = findKubeBinDir(); err != nil {
			return "", err
		}
	}
	w := binaryWait{done: os.Getenv(KubeBuildsDoneEnv), poll: time.Second, log: log}
	return dir, w.wait(ctx, dir, versions)
}

// binaryWait waits for binaries that builds beside this process are making.
type binaryWait struct {
	done string // the file that appears when the builds end; "" when none run
	poll time.Duration
	log  io.Writer
}

func (w binaryWait) wait(ctx context.Context, dir string, versions []string) error {
	missing := missingBinaries(dir, versions)
	if len(missing) == 0 {
		return nil
	}
	if !w.buildsInto(dir) {
		return &MissingBinaryError{Dir: dir, Missing: missing}
	}
	if w.log == nil {
		w.log = io.Discard
	}
	fmt.Fprintf(w.log, "waiting for kube-apiserver %s: building beside this run (%s)\n", strings.Join(missing, ", "), w.done)
	start := time.Now()
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	for {
		// The end is read before the binaries: one written just before it is seen.
		code, ended := w.ended()
		if missing = missingBinaries(dir, missing); len(missing) == 0 {
			fmt.Fprintf(w.log, "kube-apiserver %s: there after %s\n", strings.Join(versions, ", "), round(time.Since(start)))
			return nil
		}
		if ended {
			return &MissingBinaryError{Dir: dir, Missing: missing,
				Waited: fmt.Sprintf("the builds beside this run ended (exit %s) after %s without it: see %s", code, round(time.Since(start)), filepath.Join(dir, missing[0], "build.log"))}
		}
		select {
		case <-ctx.Done():
			return &MissingBinaryError{Dir: dir, Missing: missing,
				Waited: fmt.Sprintf("gave up after %s waiting for the builds beside this run: %v", round(time.Since(start)), ctx.Err())}
		case <-tick.C:
		}
	}
}

// buildsInto says whether builds run beside this process into dir.
func (w binaryWait) buildsInto(dir string) bool {
	if w.done == "" {
		return false
	}
	if _, ended := w.ended(); ended {
		return false
	}
	a, errA := os.Stat(filepath.Dir(w.done))
	b, errB := os.Stat(dir)
	return errA == nil && errB == nil && os.SameFile(a, b)
}

// ended says whether the builds ended, and their exit code.
func (w binaryWait) ended() (string, bool) {
	data, err := os.ReadFile(w.done)
	return strings.TrimSpace(string(data)), err == nil
}

// missingBinaries returns the versions without an executable under dir.
func missingBinaries(dir string, versions []string) []string {
	var missing []string
	for _, v := range versions {
		fi, err := os.Stat(filepath.Join(dir, v, "kube-apiserver"))
		if err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, v)
		}
	}
	return missing
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
