package recovery_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Issue 21, case 7: a run is killed with the plugins off; its lock.pid
// stays behind, and by the time the operator resumes, its process id is
// taken by another live process. On main the id alone was checked: resume
// was refused ("being run by another breakglass process") until the file
// was removed by hand. The record's start time tells the two apart.
func TestResumeAfterKillWhosePIDWasReused(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var once sync.Once
	var record []byte
	var dir string
	first, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{begin: func(s string) {
		if s == "restore" {
			once.Do(func() {
				// What a kill at this point leaves: the run's own lock.pid.
				list, err := env.state().Incidents()
				if err != nil || len(list) == 0 {
					t.Errorf("no incident while it runs: %v", err)
					return
				}
				dir = filepath.Dir(list[0].Path)
				if record, err = os.ReadFile(filepath.Join(dir, "lock.pid")); err != nil {
					t.Errorf("the running incident has no lock.pid: %v", err)
				}
				cancel()
			})
		}
	}}})
	wantOutcome(t, first, err, "aborted", true)
	if record == nil {
		t.Fatal("no lock.pid was read")
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	mine := strconv.Itoa(os.Getpid())
	if !strings.HasPrefix(string(record), mine) {
		t.Fatalf("lock.pid %q does not name this process %s", record, mine)
	}
	reused := strconv.Itoa(other.Process.Pid) + strings.TrimPrefix(string(record), mine)
	if err := os.WriteFile(filepath.Join(dir, "lock.pid"), []byte(reused), 0o600); err != nil {
		t.Fatal(err)
	}

	res, err := resumeRun(t, env, first.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	env.assertConfigsOriginal()
}
