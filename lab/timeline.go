package lab

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Timeline records the steps of a scenario or rehearsal with their
// durations, printing each as it finishes.
type Timeline struct {
	Start  time.Time `json:"start"`
	Events []Event   `json:"events"`

	out io.Writer
	mu  sync.Mutex
}

// Event is one step.
type Event struct {
	Name     string        `json:"name"`
	At       time.Duration `json:"at"` // since the timeline's start
	Duration time.Duration `json:"duration"`
	Err      string        `json:"error,omitempty"`
}

// NewTimeline starts a timeline; out (may be nil) gets a line per step.
func NewTimeline(out io.Writer) *Timeline {
	if out == nil {
		out = io.Discard
	}
	return &Timeline{Start: time.Now(), out: out}
}

// Step runs f as a named step.
func (t *Timeline) Step(name string, f func() error) error {
	start := time.Now()
	err := f()
	t.add(name, start, time.Now(), err)
	return err
}

// Add records a step that was timed elsewhere.
func (t *Timeline) Add(name string, start, end time.Time) { t.add(name, start, end, nil) }

func (t *Timeline) add(name string, start, end time.Time, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := Event{Name: name, At: start.Sub(t.Start), Duration: end.Sub(start)}
	status := "ok"
	if err != nil {
		e.Err, status = err.Error(), "FAILED: "+err.Error()
	}
	t.Events = append(t.Events, e)
	fmt.Fprintf(t.out, "[%7.2fs] %s: %s (%s)\n", e.At.Seconds(), name, status, round(e.Duration))
}

// Print writes the whole timeline as a table.
func (t *Timeline) Print(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintln(w, "timeline:")
	for _, e := range t.Events {
		mark := ""
		if e.Err != "" {
			mark = "  FAILED"
		}
		fmt.Fprintf(w, "  %8s  +%-8s %s%s\n", round(e.At), round(e.Duration), e.Name, mark)
	}
	fmt.Fprintf(w, "  total %s\n", round(time.Since(t.Start)))
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}
