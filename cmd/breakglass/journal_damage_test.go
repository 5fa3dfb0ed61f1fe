package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// A damaged journal is listed as damaged (not "no incident yet"), its
// readable records are shown with the damage, and resume and revert refuse
// it before dialling anything, with what still works. Nothing is changed.
func TestDamagedJournalCommands(t *testing.T) {
	dir := t.TempDir()
	st := recovery.State{Dir: dir}
	j, err := st.NewIncident(recovery.IncidentMeta{Runbook: "webhook-deadlock", Options: []byte(`{"runbook":"webhook-deadlock"}`)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(recovery.Entry{Kind: "begin", Step: "disable", Message: "disable \x1b[31mred"}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	path := filepath.Join(j.Dir, "journal.jsonl")
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("not json\n{\"kind\":\"end\",\"step\":\"disable\",\"outcome\":\"ok\"}\n")
	f.Close()
	before, _ := os.ReadFile(path)

	code, out, errOut := runInProcess(t, "--state-dir", dir, "journal", "list")
	if code != 0 || !strings.Contains(out, j.ID+"  damaged") || !strings.Contains(out, path+" is damaged at line 3") || strings.Contains(out, "no incident yet") {
		t.Errorf("journal list: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runInProcess(t, "--state-dir", dir, "journal", "show", j.ID)
	if code != 2 || !strings.Contains(out, `disable \x1b[31mred`) || !strings.Contains(errOut, "damaged at line 3") {
		t.Errorf("journal show: exit %d\n%s%s", code, out, errOut)
	}
	// It says where the readable records stop, and its hint is not the
	// command that just ran (issue 21, case 10).
	if !strings.Contains(errOut, "the 2 record(s) above are those before it") || !strings.Contains(errOut, "hint: the rest of the file, as written: tail -n +3 "+path) ||
		strings.Contains(errOut, "hint: its readable records: breakglass journal show") {
		t.Errorf("journal show of a damaged journal:\n%s", errOut)
	}
	for _, args := range [][]string{{"resume"}, {"resume", j.ID}, {"revert", j.ID}} {
		// No talosconfig: a refusal that needed one would say so instead.
		code, out, errOut := runInProcess(t, append([]string{"--state-dir", dir, "--talosconfig", filepath.Join(dir, "absent")}, args...)...)
		if code != 2 || !strings.Contains(errOut, "cannot be resumed or reverted") || !strings.Contains(errOut, "hint: the admission flags do not need the journal") || strings.Contains(errOut, "talosconfig") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the damaged journal was changed")
	}
}
