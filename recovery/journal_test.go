package recovery

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
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

// resume without an ID never guesses between a run a kill left half done
// and a newer one that changed nothing (a lab: recover -y killed, then a
// second recover declined at its prompt; a plain resume picked the
// declined one and stopped on the killed one's lock): it names both. The
// same where the older one failed a week ago (an adversarial review: the
// week-old incident was resumed before today's). An apply record withdrawn
// by an unapplied one, and a damaged journal behind the newest, do not
// count (the review again).
func TestResumableNamesTheRunThatChangedSomething(t *testing.T) {
	now := time.Now()
	opts := []byte(`{"runbook":"webhook-deadlock"}`)
	incident := func(st State, at time.Duration, entries ...Entry) string {
		j, err := st.NewIncident(IncidentMeta{Runbook: "webhook-deadlock", Options: opts, JournalVersion: 2}, now.Add(at))
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
	applied := []Entry{{Kind: "begin", Step: "disable"}, {Kind: "apply", Step: "disable", Action: "admission.disable"}}
	declined := []Entry{{Kind: "begin", Step: "disable"}, {Kind: "end", Step: "disable", Outcome: OutcomeAborted}}

	st := State{Dir: t.TempDir()}
	killed := incident(st, 0, applied...)
	newer := incident(st, time.Second, declined...)
	if id, err := st.resumable(); err == nil || !strings.Contains(err.Error(), killed) || !strings.Contains(strings.Join(failure.Hints(err), "\n"), "breakglass resume "+killed) || !strings.Contains(strings.Join(failure.Hints(err), "\n"), newer) {
		t.Fatalf("killed then declined: resumable = %q, %v; want both named", id, err)
	}

	st = State{Dir: t.TempDir()}
	stale := incident(st, -7*24*time.Hour, append(applied, Entry{Kind: "end", Step: "disable", Outcome: OutcomeOK}, Entry{Kind: "begin", Step: "verify"}, Entry{Kind: "end", Step: "verify", Outcome: OutcomeFailed})...)
	today := incident(st, 0, Entry{Kind: "begin", Step: "diagnose"})
	if id, err := st.resumable(); err == nil || !strings.Contains(err.Error(), stale) || !strings.Contains(err.Error(), today) {
		t.Fatalf("a week-old failed change and today's run: resumable = %q, %v; want both named", id, err)
	}

	st = State{Dir: t.TempDir()}
	withdrawn := incident(st, 0, append(applied, Entry{Kind: "unapplied", Step: "disable", Action: "admission.disable"}, Entry{Kind: "end", Step: "disable", Outcome: OutcomeFailed})...)
	newer = incident(st, time.Second, declined...)
	if list, _ := st.Incidents(); list[0].ID != withdrawn || list[0].Changed {
		t.Errorf("an apply withdrawn by an unapplied record counts as a change: %+v", list[0])
	}
	if id, err := st.resumable(); err != nil || id != newer {
		t.Fatalf("resumable = %q, %v; want the newest %q", id, err, newer)
	}

	st = State{Dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(st.incidentsDir(), "20200101-000000-aaaaaa"), 0o700); err != nil {
		t.Fatal(err)
	}
	newer = incident(st, 0, declined...)
	if id, err := st.resumable(); err != nil || id != newer {
		t.Fatalf("an old damaged journal behind the newest: resumable = %q, %v; want %q", id, err, newer)
	}

	// Alone, a declined run is still the one to resume; a changed newest wins.
	st = State{Dir: t.TempDir()}
	alone := incident(st, 0, declined...)
	if id, err := st.resumable(); err != nil || id != alone {
		t.Fatalf("resumable = %q, %v; want %q", id, err, alone)
	}
	changed := incident(st, time.Second, applied...)
	if id, err := st.resumable(); err != nil || id != changed {
		t.Fatalf("resumable = %q, %v; want the newest, which changed something, %q", id, err, changed)
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
