package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/lab"
)

// Issue 36's CI bug, through a command: under make test the binaries the
// rehearsal does not need still build beside the tests
// (BREAKGLASS_KUBE_BUILDS_DONE), and a lookup that did not wait found them
// missing. Here the builds end 1.5 s after the replay starts; they make
// binaries that report another version, so the replay refusing them
// proves it waited for them and looked at them. On main it failed at once:
// "no kube-apiserver binary for v1.32.13, v1.34.4".
func TestReplayWaitsForTheBuildsBeside(t *testing.T) {
	dir := t.TempDir()
	done := filepath.Join(dir, ".builds-done")
	t.Setenv(lab.KubeBinDirEnv, dir)
	t.Setenv(lab.KubeBuildsDoneEnv, done)
	objects := filepath.Join("..", "..", "lab", "testdata", "kyverno-like.yaml")
	built := make(chan error, 1)
	time.AfterFunc(1500*time.Millisecond, func() {
		for _, v := range []string{"v1.32.13", "v1.34.4"} {
			bin := filepath.Join(dir, v, "kube-apiserver")
			if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
				built <- err
				return
			}
			if err := os.WriteFile(bin, []byte("#!/bin/sh\necho Kubernetes v0.0.0-fake\n"), 0o755); err != nil {
				built <- err
				return
			}
		}
		built <- os.WriteFile(done, []byte("0\n"), 0o644)
	})
	start := time.Now()
	code, _, stderr := runLab(t, "breakglass-lab", "replay", "--from", "v1.32.13", "--to", "v1.34.4", "-f", objects)
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	if code != int(failure.LabNoBinaries) || !strings.Contains(stderr, "waiting for kube-apiserver v1.32.13, v1.34.4: building beside this run") ||
		!strings.Contains(stderr, `says "Kubernetes v0.0.0-fake", want "Kubernetes v1.32.13"`) {
		t.Errorf("exit %d after %s, stderr:\n%s", code, time.Since(start), stderr)
	}
}
