package recovery

import "time"

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
		case "apply":
			if i, ok := open[e.Step]; ok {
				what := "its change"
				if e.Undo != nil && e.Undo.What != "" {
					what = e.Undo.What
				}
				rows[i].Message = "no end record: the run stopped while applying " + what + " (it may have been applied)"
			}
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
	meta.Runbook = followedRunbook(meta, entries)
	return meta, rows
}
