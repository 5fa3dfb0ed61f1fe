package recovery

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

func newTestIncident(t *testing.T, st State, at time.Time, records ...Entry) *Journal {
	t.Helper()
	j, err := st.NewIncident(IncidentMeta{Runbook: "webhook-deadlock", Options: json.RawMessage(`{"runbook":"webhook-deadlock"}`)}, at)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range records {
		if err := j.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return j
}

// A journal with an unreadable record in the middle, an empty one and an
// incident directory without a journal are all listed as damaged, naming
// the file (and the line), never skipped as if there were no incident.
func TestDamagedJournalsListed(t *testing.T) {
	st := State{Dir: t.TempDir()}
	now := time.Now()
	corrupt := newTestIncident(t, st, now, Entry{Kind: "begin", Step: "disable"}, Entry{Kind: "end", Step: "disable", Outcome: OutcomeOK})
	path := filepath.Join(corrupt.Dir, "journal.jsonl")
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines[1] = "\x00\x00garbage\n" // a record in the middle
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := newTestIncident(t, st, now.Add(time.Second))
	if err := os.Truncate(filepath.Join(empty.Dir, "journal.jsonl"), 0); err != nil {
		t.Fatal(err)
	}
	noJournal := newTestIncident(t, st, now.Add(2*time.Second))
	if err := os.Remove(filepath.Join(noJournal.Dir, "journal.jsonl")); err != nil {
		t.Fatal(err)
	}
	list, err := st.Incidents()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("listed %d incidents, want 3: %+v", len(list), list)
	}
	want := map[string]string{corrupt.ID: path + " is damaged at line 2", empty.ID: "holds no record", noJournal.ID: "is missing"}
	for _, i := range list {
		if i.State != "damaged" || !strings.Contains(i.Damage, want[i.ID]) {
			t.Errorf("incident %s: state %q, damage %q; want damaged, %q", i.ID, i.State, i.Damage, want[i.ID])
		}
	}
	if list[0].Runbook != "webhook-deadlock" {
		t.Errorf("the readable incident record of a damaged journal is not shown: %+v", list[0])
	}

	// journal show: the readable records, and the damage with the file.
	_, entries, err := st.ReadIncident(corrupt.ID)
	var damage *JournalDamageError
	if !errors.As(err, &damage) || damage.Path != path || damage.Line != 2 || len(entries) != 1 {
		t.Fatalf("read: %d entries, %v; want the incident record and damage at line 2", len(entries), err)
	}
	if failure.Code(err) != int(failure.BadInput) {
		t.Errorf("exit code %d, want 2", failure.Code(err))
	}
}

// resume and revert refuse a damaged incident, saying what they cannot do
// and what still works; resume without an ID stops at the damaged newest
// incident instead of resuming an older one behind it.
func TestResumeRevertOnDamagedIncident(t *testing.T) {
	st := State{Dir: t.TempDir()}
	now := time.Now()
	older := newTestIncident(t, st, now, Entry{Kind: "begin", Step: "disable"})
	newer := newTestIncident(t, st, now.Add(time.Second), Entry{Kind: "begin", Step: "disable"}, Entry{Kind: "end", Step: "disable", Outcome: OutcomeOK})
	path := filepath.Join(newer.Dir, "journal.jsonl")
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines[1] = strings.Replace(lines[1], `{"time"`, `{"tim`, 1)
	damaged := strings.Join(lines, "")
	if err := os.WriteFile(path, []byte(damaged), 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := st.resumable()
	if err != nil || id != newer.ID {
		t.Fatalf("resumable = %q, %v; want the damaged newest %s, not %s", id, err, newer.ID, older.ID)
	}
	_, _, err = st.OpenIncident(id)
	if err == nil {
		t.Fatal("a damaged journal was opened for resume")
	}
	msg := err.Error()
	for _, w := range []string{"cannot be resumed or reverted", path, "line 2", "cannot tell which steps completed"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q lacks %q", msg, w)
		}
	}
	hints := strings.Join(failure.Hints(err), "\n")
	for _, w := range []string{"breakglass journal show " + newer.ID, "breakglass admission restore", "breakglass etcd restore FILE", newer.Dir} {
		if !strings.Contains(hints, w) {
			t.Errorf("hints %q lack %q", hints, w)
		}
	}
	after, _ := os.ReadFile(path)
	if string(after) != damaged {
		t.Error("the damaged journal was changed")
	}
}

// A record longer than bufio.Scanner's limits (64 KiB default, 16 MiB as
// it was raised to) is read back.
func TestJournalLongRecord(t *testing.T) {
	st := State{Dir: t.TempDir()}
	long := strings.Repeat("x", 17<<20)
	j := newTestIncident(t, st, time.Now(), Entry{Kind: "note", Message: long}, Entry{Kind: "begin", Step: "wait"})
	_, entries, err := st.ReadIncident(j.ID)
	if err != nil || len(entries) != 3 || entries[1].Message != long || entries[2].Step != "wait" {
		t.Fatalf("read %d entries, %v", len(entries), err)
	}
}

// After a crash tore the last record, the next run's records are not glued
// to it: reopening ends the torn line first.
func TestTornRecordThenAppend(t *testing.T) {
	st := State{Dir: t.TempDir()}
	j := newTestIncident(t, st, time.Now(), Entry{Kind: "begin", Step: "disable"})
	path := filepath.Join(j.Dir, "journal.jsonl")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"kind":"end","step":"dis`)
	f.Close()
	j2, entries, err := st.OpenIncident(j.ID)
	if err != nil || len(entries) != 2 {
		t.Fatalf("reopen: %d entries, %v", len(entries), err)
	}
	if err := j2.Append(Entry{Kind: "note", Message: "resumed"}); err != nil {
		t.Fatal(err)
	}
	j2.Close()
	_, entries, err = st.ReadIncident(j.ID)
	if err != nil || len(entries) != 4 || entries[3].Message != "resumed" || !strings.Contains(entries[2].Message, "set aside: "+strconv.Quote(`{"kind":"end","step":"dis`)) {
		t.Fatalf("read back %d entries, %v: %+v", len(entries), err, entries)
	}
}
