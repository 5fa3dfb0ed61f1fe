package recovery

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A journal written by one run is read back whole by the next (resume), and
// a record torn by a crash is ignored, not fatal.
func TestJournalRoundTrip(t *testing.T) {
	st := State{Dir: t.TempDir()}
	j, err := st.NewIncident(IncidentMeta{Nodes: []string{"127.0.0.11"}, Runbook: "webhook-deadlock"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(j.Append(Entry{Kind: "begin", Step: "disable", Action: "admission.disable"}))
	must(j.Append(Entry{Kind: "end", Step: "disable", Outcome: OutcomeOK, Elapsed: Duration(1500 * time.Millisecond), Data: json.RawMessage(`{"backup":"/x"}`)}))
	must(j.Append(Entry{Kind: "begin", Step: "wait"}))
	must(j.Close())
	// A crash in the middle of a write leaves half a line.
	f, err := os.OpenFile(filepath.Join(j.Dir, "journal.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	must(err)
	_, err = f.WriteString(`{"kind":"end","step":"wa`)
	must(err)
	must(f.Close())

	j2, entries, err := st.OpenIncident("")
	must(err)
	defer j2.Close()
	if j2.ID != j.ID || len(entries) != 4 {
		t.Fatalf("reopened %s with %d entries, want %s with 4", j2.ID, len(entries), j.ID)
	}
	if got := time.Duration(entries[2].Elapsed); got != 1500*time.Millisecond {
		t.Errorf("elapsed read back as %s", got)
	}
	done := CompletedSteps(entries)
	if !done["disable"] || done["wait"] {
		t.Errorf("completed steps = %v, want only disable", done)
	}
	list, err := st.Incidents()
	must(err)
	if len(list) != 1 || list[0].State != "interrupted" || list[0].LastStep != "wait" {
		t.Errorf("incidents = %+v", list)
	}
	info, err := os.Stat(filepath.Join(j.Dir, "journal.jsonl"))
	must(err)
	if info.Mode().Perm() != 0o600 {
		t.Errorf("journal mode %v, want 0600", info.Mode().Perm())
	}
}

// resume without an ID continues the run a kill left half done, not a
// newer one that changed nothing: a second recover declined at its first
// confirmation (a lab: recover -y killed, then a second recover declined,
// then a plain resume picked the declined one and stopped on the lock).
// With no such run, the newest unfinished one is still resumed.
func TestResumablePrefersTheRunThatChangedSomething(t *testing.T) {
	st := State{Dir: t.TempDir()}
	now := time.Now()
	opts := []byte(`{"runbook":"webhook-deadlock"}`)
	incident := func(at time.Duration, entries ...Entry) string {
		j, err := st.NewIncident(IncidentMeta{Runbook: "webhook-deadlock", Options: opts}, now.Add(at))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if err := j.Append(e); err != nil {
				t.Fatal(err)
			}
		}
		j.Close()
		return j.ID
	}
	killed := incident(0, Entry{Kind: "begin", Step: "disable"}, Entry{Kind: "apply", Step: "disable", Action: "admission.disable"})
	declined := incident(time.Second, Entry{Kind: "begin", Step: "diagnose"}, Entry{Kind: "end", Step: "diagnose", Outcome: OutcomeOK},
		Entry{Kind: "begin", Step: "disable"}, Entry{Kind: "end", Step: "disable", Outcome: OutcomeAborted})
	if id, err := st.resumable(); err != nil || id != killed {
		t.Fatalf("resumable = %q, %v; want the killed run %q, not the declined %q", id, err, killed, declined)
	}
	// Alone, a declined run is still the one to resume.
	st = State{Dir: t.TempDir()}
	declined = incident(0, Entry{Kind: "begin", Step: "disable"}, Entry{Kind: "end", Step: "disable", Outcome: OutcomeAborted})
	if id, err := st.resumable(); err != nil || id != declined {
		t.Fatalf("resumable = %q, %v; want %q", id, err, declined)
	}
}

// resume without an ID continues the newest incident that started a step
// and did not complete, not a newer one refused before its first step.
func TestResumableSkipsRefusedRuns(t *testing.T) {
	st := State{Dir: t.TempDir()}
	now := time.Now()
	opts := []byte(`{"runbook":"webhook-deadlock"}`)
	started, err := st.NewIncident(IncidentMeta{Runbook: "webhook-deadlock", Options: opts}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := started.Append(Entry{Kind: "begin", Step: "disable"}); err != nil {
		t.Fatal(err)
	}
	started.Close()
	refused, err := st.NewIncident(IncidentMeta{Runbook: "webhook-deadlock", Options: opts}, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := refused.Append(Entry{Kind: "note", Message: "not run: lock held"}); err != nil {
		t.Fatal(err)
	}
	refused.Close()
	// a standalone admission disable that failed after it began: not a guided recovery
	standalone, err := st.NewIncident(IncidentMeta{Runbook: "admission disable"}, now.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := standalone.Append(Entry{Kind: "begin", Step: "disable"}); err != nil {
		t.Fatal(err)
	}
	standalone.Close()
	id, err := st.resumable()
	if err != nil || id != started.ID {
		t.Fatalf("resumable = %q, %v; want %q", id, err, started.ID)
	}
}
