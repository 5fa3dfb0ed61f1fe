package lab

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBuild writes DIR/VERSION/kube-apiserver as a build does (a .part,
// then the rename), after a delay.
func fakeBuild(t *testing.T, dir, version string, after time.Duration) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, version, "kube-apiserver")
	timer := time.AfterFunc(after, func() {
		if err := os.WriteFile(bin+".part", []byte("#!/bin/sh\necho Kubernetes "+version+"\n"), 0o755); err == nil {
			os.Rename(bin+".part", bin)
		}
	})
	t.Cleanup(func() { timer.Stop() }) // before the directory goes
}

// endBuilds writes the builds' done file as scripts/test.sh does, after a delay.
func endBuilds(t *testing.T, done, code string, after time.Duration) {
	timer := time.AfterFunc(after, func() {
		if os.WriteFile(done+".part", []byte(code+"\n"), 0o644) == nil {
			os.Rename(done+".part", done)
		}
	})
	t.Cleanup(func() { timer.Stop() })
}

// The CI bug of issue 36: make test starts the tests while the binaries
// the rehearsal does not need still build, and a test that looked its
// binary up on its own found it missing and failed. Through the one
// lookup a binary that builds beside the run is waited for; one the
// builds never made fails once they end, naming their exit; elsewhere
// (another directory, no builds beside) a missing binary fails at once.
func TestBinariesWaitForTheBuildsBeside(t *testing.T) {
	t.Parallel()
	const later = 300 * time.Millisecond
	// building: v1.36.3 is built into a directory after later, and the
	// builds end (exit code) after end.
	building := func(t *testing.T, code string, end time.Duration) (string, binaryWait, *bytes.Buffer) {
		dir := t.TempDir()
		var log bytes.Buffer
		w := binaryWait{done: filepath.Join(dir, ".builds-done"), poll: 10 * time.Millisecond, log: &log}
		fakeBuild(t, dir, "v1.36.3", later)
		if end > 0 {
			endBuilds(t, w.done, code, end)
		}
		return dir, w, &log
	}

	t.Run("built later", func(t *testing.T) {
		t.Parallel()
		dir, w, log := building(t, "0", 20*later)
		start := time.Now()
		if err := w.wait(t.Context(), dir, []string{"v1.36.3"}); err != nil {
			t.Fatalf("%v\n%s", err, log)
		}
		if took := time.Since(start); took < later || took >= 20*later {
			t.Errorf("returned after %s: want once the binary is there (%s), before the builds end (%s)", took, later, 20*later)
		}
		if !strings.Contains(log.String(), "waiting for kube-apiserver v1.36.3: building beside this run") {
			t.Errorf("log:\n%s", log)
		}
	})

	t.Run("never built", func(t *testing.T) {
		t.Parallel()
		dir, w, _ := building(t, "1", 2*later)
		err := w.wait(t.Context(), dir, []string{"v1.36.3", "v1.37.2"})
		var missing *MissingBinaryError
		if !errors.As(err, &missing) || strings.Join(missing.Missing, " ") != "v1.37.2" ||
			!strings.Contains(err.Error(), "the builds beside this run ended (exit 1)") ||
			!strings.Contains(err.Error(), filepath.Join(dir, "v1.37.2", "build.log")) || !errors.Is(err, ErrNoKubeBinary) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("gave up", func(t *testing.T) {
		t.Parallel()
		dir, w, _ := building(t, "", 0)
		ctx, cancel := context.WithTimeout(t.Context(), later/2)
		defer cancel()
		err := w.wait(ctx, dir, []string{"v1.37.2"})
		if !errors.Is(err, ErrNoKubeBinary) || !strings.Contains(err.Error(), "gave up after") {
			t.Errorf("got %v", err)
		}
	})

	// No wait where nothing builds: another directory, or builds that ended.
	for name, setup := range map[string]func(t *testing.T, w *binaryWait){
		"another directory": func(t *testing.T, w *binaryWait) { w.done = filepath.Join(t.TempDir(), ".builds-done") },
		"no builds":         func(t *testing.T, w *binaryWait) { w.done = "" },
		"builds ended":      func(t *testing.T, w *binaryWait) { os.WriteFile(w.done, []byte("0\n"), 0o644) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir, w, log := building(t, "", 0)
			setup(t, &w)
			start := time.Now()
			err := w.wait(t.Context(), dir, []string{"v1.36.3"})
			if !errors.Is(err, ErrNoKubeBinary) || time.Since(start) >= later || log.Len() > 0 {
				t.Errorf("got %v after %s, log %q: want missing at once", err, time.Since(start), log)
			}
		})
	}
}
