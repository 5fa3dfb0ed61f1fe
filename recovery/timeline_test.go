package recovery

import (
	"testing"
	"time"
)

// A step interrupted by a crash and run again by resume shows twice: once
// interrupted, once with its outcome; Markdown rows stay one line each.
func TestTimelineInterruptedAndResumed(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	entries := []Entry{
		{Time: t0, Kind: "incident", Meta: &IncidentMeta{ID: "x", Started: t0, Runbook: "webhook-deadlock"}},
		{Time: t0.Add(time.Second), Kind: "begin", Step: "disable", Message: "why"},
		{Time: t0.Add(time.Minute), Kind: "note", Message: "resumed"},
		{Time: t0.Add(61 * time.Second), Kind: "begin", Step: "disable"},
		{Time: t0.Add(64 * time.Second), Kind: "end", Step: "disable", Outcome: OutcomeOK, Message: "applied\non | 3 nodes"},
	}
	_, rows := Timeline(entries)
	if len(rows) != 2 || rows[0].Outcome != "interrupted" || rows[1].Outcome != OutcomeOK || rows[1].Elapsed != 3*time.Second {
		t.Fatalf("rows %+v", rows)
	}
}
