package recovery

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// TimelineRow is one finished (or interrupted) step of an incident.
type TimelineRow struct {
	Start   time.Time     `json:"start"`
	Offset  time.Duration `json:"offset"` // since the incident started
	Step    string        `json:"step"`
	Action  string        `json:"action,omitempty"`
	Outcome string        `json:"outcome"` // ok, skipped, failed, aborted, or interrupted (no end record)
	Message string        `json:"message,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
}

// Timeline pairs begin and end records into rows, in order.
func Timeline(entries []Entry) (IncidentMeta, []TimelineRow) {
	var meta IncidentMeta
	var rows []TimelineRow
	open := map[string]int{}
	for _, e := range entries {
		switch e.Kind {
		case "incident":
			if e.Meta != nil {
				meta = *e.Meta
			}
		case "begin":
			open[e.Step] = len(rows)
			rows = append(rows, TimelineRow{Start: e.Time, Offset: e.Time.Sub(meta.Started), Step: e.Step, Action: e.Action, Outcome: "interrupted", Message: "no end record: the run stopped during this step"})
		case "end":
			i, ok := open[e.Step]
			if !ok {
				continue
			}
			delete(open, e.Step)
			rows[i].Outcome, rows[i].Elapsed = e.Outcome, e.Time.Sub(rows[i].Start)
			if e.Message != "" {
				rows[i].Message = e.Message
			}
			if e.Error != "" {
				rows[i].Message = e.Error
			}
		}
	}
	return meta, rows
}

// RenderTimeline writes the incident's timeline as text, or as Markdown
// ready to paste into a postmortem.
func RenderTimeline(w io.Writer, meta IncidentMeta, rows []TimelineRow, markdown bool) {
	if markdown {
		fmt.Fprintf(w, "### Incident %s\n\n", meta.ID)
		fmt.Fprintf(w, "- started: %s by %s\n- cluster: %s, nodes: %s\n- runbook: %s\n\n", meta.Started.Format(time.RFC3339), meta.By, orDash(meta.Cluster), strings.Join(meta.Nodes, ", "), meta.Runbook)
		fmt.Fprintln(w, "| time (UTC) | +offset | step | outcome | duration | notes |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, r := range rows {
			fmt.Fprintf(w, "| %s | +%s | %s | %s | %s | %s |\n", r.Start.UTC().Format("15:04:05"), r.Offset.Round(time.Second), r.Step, r.Outcome, r.Elapsed.Round(time.Millisecond), markdownCell(r.Message))
		}
		return
	}
	fmt.Fprintf(w, "Incident %s, started %s by %s (cluster %s, runbook %s)\n", meta.ID, meta.Started.Format(time.RFC3339), meta.By, orDash(meta.Cluster), meta.Runbook)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tOFFSET\tSTEP\tOUTCOME\tDURATION\tNOTES")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t+%s\t%s\t%s\t%s\t%s\n", r.Start.UTC().Format("15:04:05"), r.Offset.Round(time.Second), r.Step, r.Outcome, r.Elapsed.Round(time.Millisecond), r.Message)
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// markdownCell keeps a message on one table row.
func markdownCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.Join(strings.Fields(s), " ")
}
