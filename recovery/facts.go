package recovery

// The world moves between a plan and its act: a confirmation may take
// minutes, and without quorum no lock keeps another operator out. A change
// names in its plan the facts it acts on (Plan.Facts); the loop shows them,
// and reads each again after the confirmation, just before the change.
// When one no longer holds, nothing of the change is done, and the run
// says what moved and what to do. The mechanism is here, once; steps only
// say their facts.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// factsText is how a plan shows its facts.
func factsText(facts []Fact) string {
	if len(facts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("  read again just before acting (nothing is done if one moved):\n")
	for _, f := range facts {
		fmt.Fprintf(&b, "    - %s\n", f.Says)
	}
	return b.String()
}

// factLines are the facts as the apply record keeps them.
func factLines(facts []Fact) []string {
	var out []string
	for _, f := range facts {
		out = append(out, f.Says)
	}
	return out
}

// stillSo reads every fact of a change again, just before it is applied:
// the first that moved stops it, nothing done. An interruption meanwhile
// is that, and says nothing of the facts.
func (r *run) stillSo(ctx context.Context, s Step, facts []Fact) error {
	for _, f := range facts {
		fctx, cancel := context.WithTimeoutCause(ctx, factReadTimeout, fmt.Errorf("%w: not read again within %s", ErrTimeout, factReadTimeout))
		err := f.Holds(fctx)
		if err != nil && fctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w (%v)", context.Cause(fctx), err)
		}
		cancel()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err != nil {
			return &MovedError{Step: s.Name, Fact: f.Says, Now: err, hints: r.movedHints()}
		}
	}
	return nil
}

// factReadTimeout bounds the reading again of one fact: a node or an etcd
// that does not answer within it does not vouch for the fact.
const factReadTimeout = 30 * time.Second

// movedHints are the ways on after a fact moved: look at what stands, then
// plan again from it, or close the incident when another run did the work.
func (r *run) movedHints() []string {
	id := r.journal.ID
	return []string{
		"see what stands now: " + r.target.NodesCmd("diagnose"),
		"continue from a new plan, made from what the nodes say then: " + r.target.Cmd("resume "+id),
		"or, if another run (another operator) recovered the cluster meanwhile, close this incident as superseded: breakglass journal close " + id,
	}
}

// MovedError is a change not made: a fact its plan acts on no longer held
// when it was about to act.
type MovedError struct {
	Step  string
	Fact  string // as the plan read it
	Now   error  // what reading it again found
	hints []string
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("step %s: nothing was done: its plan read %s; read again just before acting: %s", e.Step, e.Fact, shortErr(e.Now))
}

// Unwrap is what was found (its exit code, when it has one: a copy that
// changed fails verification), else a conflict: the world moved.
func (e *MovedError) Unwrap() []error {
	if failure.Code(e.Now) != int(failure.Unexpected) {
		return []error{e.Now}
	}
	return []error{ErrConflict, e.Now}
}

func (e *MovedError) Hints() []string { return e.hints }

// moved is the run's error as a MovedError, if it is one.
func moved(err error) (*MovedError, bool) {
	var m *MovedError
	return m, errors.As(err, &m)
}

func isMoved(err error) bool { _, ok := moved(err); return ok }

// noneApplied tells that a change was stopped before any of it was applied
// (interrupted before its first node was asked): its apply record is taken
// back, and nothing is said changed or lost.
func noneApplied(err error) bool {
	var ni *NodesInterrupted
	return errors.As(err, &ni) && len(ni.Applied) == 0 && len(ni.Asked) == 0
}

// unapply takes back the apply record of a change stopped before any of it
// was applied, in the journal and in this run.
func (r *run) unapply(s Step, err error) {
	if n := len(r.applies); n > 0 && r.applies[n-1].Step == s.Name {
		r.applies = r.applies[:n-1]
	}
	_ = r.journal.Append(Entry{Kind: "unapplied", Step: s.Name, Action: s.Action(), Message: "nothing of the change was applied: " + shortErr(err)})
}
