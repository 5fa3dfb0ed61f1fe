package recovery

// Closing an incident that will not be resumed: another run (another
// operator, without quorum no lock kept them out) recovered the cluster, or
// the world moved under it and a new incident takes over from a new
// diagnosis. It changes nothing on the cluster: it ends the journal, saying
// by whom and why, and resume refuses it from then on.

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// Closing is what closing an incident would do, for the operator to read
// before it is done.
type Closing struct {
	Incident string `json:"incident"`
	State    string `json:"state"` // before
	LastStep string `json:"lastStep,omitempty"`
	Why      string `json:"why"`
	Closed   bool   `json:"closed"`
}

// Plan says what closing does.
func (c *Closing) Plan() string {
	return fmt.Sprintf("Plan: close incident %s (%s, last step %s) as %s: its journal ends there and resume refuses it from then on; nothing on the cluster changes, and what it changed stays (its journal says what)\n",
		c.Incident, c.State, orDefault(c.LastStep, "-"), termsafe.Text(c.Why))
}

// PlanClose reads the incident and says what closing it does: refused for
// one that ended, a rehearsal, or one a live process runs now.
func (s State) PlanClose(id, why string) (*Closing, error) {
	dir, entries, err := s.ReadIncident(id)
	if err != nil {
		return nil, err
	}
	meta := entries[0].Meta
	last, state := incidentState(entries)
	switch {
	case meta.DryRun:
		return nil, failure.Input("a rehearsal changed nothing and is never resumed: leave it, or list the others: breakglass journal list", "incident %s was a dry run: there is nothing to close", meta.ID)
	case finished(state):
		return nil, failure.Input("see it with: breakglass journal show "+meta.ID, "incident %s ended %s already: there is nothing to close", meta.ID, state)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "lock.pid")); err == nil {
		if pid, alive := lockPIDAlive(b); alive {
			return nil, &incidentBusyError{incident: meta.ID, pid: pid, resume: "breakglass journal close " + meta.ID}
		}
	}
	return &Closing{Incident: meta.ID, State: state, LastStep: last, Why: orDefault(why, "superseded")}, nil
}

// Close closes the incident as planned: a finish record, by whom and why.
func (s State) Close(c *Closing) error {
	dir, entries, err := s.ReadIncident(c.Incident)
	if err != nil {
		return err
	}
	j, err := openJournal(dir, *entries[0].Meta)
	if err != nil {
		return err
	}
	defer j.Close()
	if err := j.Append(Entry{Kind: "finish", Outcome: closedOutcome, Message: fmt.Sprintf("closed by %s: %s", whoami(), c.Why)}); err != nil {
		return err
	}
	c.Closed = true
	return nil
}
