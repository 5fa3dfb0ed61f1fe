package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// Markdown rows stay one line each, a pipe in a message escaped.
func TestTimelineMarkdownRowsOneLine(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	rows := []recovery.TimelineRow{{Start: t0, Step: "disable", Outcome: recovery.OutcomeOK, Elapsed: 3 * time.Second, Message: "applied\non | 3 nodes"}}
	var b bytes.Buffer
	renderTimeline(&b, recovery.IncidentMeta{ID: "x", Started: t0}, rows, true)
	if !strings.Contains(b.String(), "| applied on \\| 3 nodes |") {
		t.Errorf("markdown row not kept on one line:\n%s", b.String())
	}
}
