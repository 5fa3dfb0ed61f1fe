// Package recovery holds breakglass's steps and their order: plan, confirm,
// act and verify, on top of the talos and etcd packages. Commands call one
// function here and render what it returns.
package recovery

import (
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Kinds of failure, each of a failure category (an exit code).
var (
	ErrPartial  = failure.New(failure.Partial, "partial failure")
	ErrAborted  = failure.New(failure.Declined, "aborted")
	ErrConflict = failure.New(failure.Conflict, "conflict")
	ErrTimeout  = failure.New(failure.Timeout, "timed out")
	// ErrEtcdFull: etcd's NOSPACE alarm is raised; a change that restarts kube-apiserver is refused.
	ErrEtcdFull = failure.New(failure.DiagnoseNoSpace, "etcd is full")
)

// ErrNotConfirmed is the operator's no at a confirmation (see Declined);
// it is an ErrAborted.
var ErrNotConfirmed error = notConfirmed{}

type notConfirmed struct{}

func (notConfirmed) Error() string { return "not confirmed" }
func (notConfirmed) Unwrap() error { return ErrAborted }

// Declined is a UI's answer for the operator's no: its words ("not
// confirmed", "NAME was not typed"), an ErrNotConfirmed. What it means for
// the run the engine decides (it never says nothing was changed by itself).
func Declined(format string, args ...any) error {
	return &declinedError{msg: fmt.Sprintf(format, args...)}
}

type declinedError struct{ msg string }

func (e *declinedError) Error() string { return e.msg }
func (e *declinedError) Unwrap() error { return ErrNotConfirmed }

// NodeFailures is what went wrong on some of the target nodes. When other
// nodes succeeded it is a partial failure; a run is never reported as a
// success while one node failed.
type NodeFailures struct {
	Failed    []error
	Succeeded int
}

func (e *NodeFailures) Error() string {
	var b strings.Builder
	if e.Succeeded > 0 {
		fmt.Fprintf(&b, "%d of %d nodes failed", len(e.Failed), len(e.Failed)+e.Succeeded)
	} else {
		fmt.Fprintf(&b, "%d %s failed", len(e.Failed), map[bool]string{true: "node", false: "nodes"}[len(e.Failed) == 1])
	}
	for _, err := range e.Failed {
		b.WriteString("\n" + err.Error())
	}
	return b.String()
}

// Unwrap exposes each node's error (for exit codes and hints), and marks a
// mixed outcome as partial.
func (e *NodeFailures) Unwrap() []error {
	out := append([]error(nil), e.Failed...)
	if e.Succeeded > 0 {
		out = append([]error{ErrPartial}, out...)
	}
	return out
}

// NodesInterrupted is a change interrupted while it ran on several nodes:
// where it went through, where not, and where it had failed first. Nothing
// is said failed that did not fail.
type NodesInterrupted struct {
	Cause   error
	Applied []string // the node took the change (it may not have been waited for)
	// Asked: the node was asked, and its answer was not seen (it may have
	// taken the change).
	Asked      []string
	NotApplied []string
	Failed     []error
}

func (e *NodesInterrupted) Error() string {
	var parts []string
	if len(e.Applied) > 0 {
		parts = append(parts, "the change was applied on "+strings.Join(e.Applied, ", "))
	}
	if len(e.Asked) > 0 {
		parts = append(parts, "asked of "+strings.Join(e.Asked, ", ")+", its answer not seen (it may have taken it)")
	}
	if len(e.NotApplied) > 0 {
		parts = append(parts, "not applied on "+strings.Join(e.NotApplied, ", "))
	}
	for _, err := range e.Failed {
		parts = append(parts, "failed: "+shortErr(err))
	}
	cause := "interrupted"
	if e.Cause != nil {
		cause = "interrupted (" + e.Cause.Error() + ")"
	}
	return cause + ": " + strings.Join(parts, "; ")
}

// Unwrap makes it an interruption (exit 8), whatever the nodes said.
func (e *NodesInterrupted) Unwrap() []error { return []error{ErrAborted, e.Cause} }

func failures(errs []error, succeeded int) error {
	if len(errs) == 0 {
		return nil
	}
	return &NodeFailures{Failed: errs, Succeeded: succeeded}
}

// invalidInput is failure.Input, the one constructor of bad input. Only
// health.go still calls it by this name: another change is rewriting that
// file's output; rename the call there, then delete this line.
var invalidInput = failure.Input

// shortErr is an error's first line.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
