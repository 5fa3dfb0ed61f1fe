package recovery

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/testfs"
)

// Issue 29: a full or read-only state directory gave exit 1 with the raw
// system error, and a run that never started left an incident behind that
// journal list then called damaged. NewIncident says what is wrong with
// the state directory and what to do (exit 2), and leaves nothing.
func TestNewIncidentOnAStateDirThatCannotBeWritten(t *testing.T) {
	for _, c := range []struct {
		name  string
		dir   func(testfs.TB) string
		cause string
		hint  string
	}{
		{"full", testfs.Full, "no space left on device", "free space on its file system (df -h "},
		{"read-only", testfs.ReadOnly, "read-only file system", "mounted read-only"},
		{"full, state directory not made yet", func(t testfs.TB) string { return filepath.Join(testfs.Full(t), "new", "state") }, "no space left on device", "df -h"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dir(t)
			before := testfs.Tree(dir)
			j, err := State{Dir: dir}.NewIncident(IncidentMeta{Runbook: "webhook-deadlock"}, time.Now())
			if err == nil {
				j.Close()
				t.Fatal("an incident was opened")
			}
			var sde *StateDirError
			if !errors.As(err, &sde) || failure.Code(err) != int(failure.BadInput) {
				t.Fatalf("%v (exit %d): want a *StateDirError, exit 2", err, failure.Code(err))
			}
			want := "state directory " + dir + " cannot be written: " + c.cause + "; nothing was started"
			if err.Error() != want {
				t.Errorf("error %q\nwant  %q", err, want)
			}
			if h := failure.Hints(err); len(h) != 1 || !strings.Contains(h[0], c.hint) || !strings.Contains(h[0], "--state-dir") {
				t.Errorf("hints %q: want one naming %q and --state-dir", h, c.hint)
			}
			if after := testfs.Tree(dir); after != before {
				t.Errorf("left behind:\nbefore %s\nafter  %s", before, after)
			}
			if list, err := (State{Dir: dir}).Incidents(); err != nil || len(list) != 0 {
				t.Errorf("incidents %v, %v: want none", list, err)
			}
		})
	}
}
