package recovery

// What a step gives the loop: its Plan (the View shown before the
// question, the Questions, the Undo of its change and the function that
// applies it) and its Result. The loop (engine.go) alone shows, confirms,
// journals and applies.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
)

// Step is one step of a run: its name, how to treat it, and its action's
// typed parameters (the runbook's *XxxParams, or one of the engine's own).
type Step struct {
	Name        string
	Description string
	Confirm     bool
	Optional    bool
	// Requested: the operator asked for this step by name (recover --delete):
	// never optional, and when it fails (or is declined) the run still puts
	// the plugins back, then ends as a partial failure naming what is left.
	Requested bool
	Params    Params
}

// Params are an action's parameters; their type names the action.
type Params interface{ Action() runbooks.Action }

// Action is the step's action name.
func (s Step) Action() string { return string(s.Params.Action()) }

// Plan is what a step will do, computed before anything changes.
type Plan struct {
	// View is what the operator reads before the question.
	View View
	// Change: Apply changes the cluster (a machine config, etcd, the lock).
	// The loop checks the cluster lock first and asks Ask; a dry run ends
	// the step after the plan (done as planned). Without Change, Apply only
	// waits for, or saves, what earlier changes brought about, and a dry run
	// skips it.
	Change bool
	Ask    []Question
	// DryRun says what a dry run did instead of Apply ("the nodes validated
	// the change"), or would have waited for.
	DryRun string
	// Apply does it; nil: the plan is all the step does (a check, or
	// nothing to change) and Result is its outcome.
	Apply func(context.Context) (Result, error)
	// Result is the step's outcome when Apply does not run (nothing to
	// change, a dry run, a decline).
	Result Result
	// Partial is what the plan could not cover (nodes that could not be
	// planned): the step ends with it after doing the rest. Apply's own
	// error includes it.
	Partial error
	// Record is what the journal's apply record keeps for a later revert
	// (the old values a change overwrites): written before Apply runs, so
	// a run killed during it still has them.
	Record any
	// Undo is what can be done about the change afterwards, journaled with
	// the apply record: revert and the commands offered after a stop read
	// it there. Every Change says it (a test holds every incident type to it).
	Undo *Undo
	// Facts are what the change acts on, as the plan read them (a member
	// lost and why, a node's boot and etcd, the copy's size, sha256 and
	// owner): the loop shows them with the plan and reads each again after
	// the confirmation, just before Apply; one that moved stops the step,
	// nothing done (facts.go).
	Facts []Fact
	// Finish is the command that does what the step would have done, for a
	// step the operator asked for by name that fails or is declined.
	Finish string
}

// Fact is one thing a change acts on, as its plan read it.
type Fact struct {
	// Says it as the plan read it ("node 10.5.0.4 in boot 5e1d..., its
	// etcd down: its log says its data directory is empty").
	Says string
	// Holds reads it again: nil while it holds; otherwise what is there
	// now. A fact that cannot be read again does not hold.
	Holds func(ctx context.Context) error
}

// View is text for the operator: a plan before its question, a diagnosis.
// Parts are a plan's per-node (or per-object) sections, in order, between
// Head and Foot. Detail is the evidence behind it: a terminal shows it with
// -v; the journal and -o json keep the results whole either way.
type View struct {
	Head   string
	Parts  []ViewPart
	Foot   string
	Detail string
}

// ViewPart is one node's part of a plan.
type ViewPart struct {
	Node   string // whom it is about
	About  string // what else its title says ("cluster c1, Talos v1.13.8")
	Body   string // the rest
	Detail string // the evidence behind it (the node's own dry run), after the view
}

func (p ViewPart) title(who string) string {
	if p.About == "" {
		return fmt.Sprintf("  %s\n", who)
	}
	return fmt.Sprintf("  %s (%s)\n", who, p.About)
}

// Text is a view of plain text.
func Text(s string) View { return View{Head: s} }

// String is the whole view, every part in full and the detail last.
func (v View) String() string {
	var b strings.Builder
	b.WriteString(v.Head)
	for _, p := range v.Parts {
		b.WriteString(p.title("node " + p.Node))
		b.WriteString(p.Body)
	}
	b.WriteString(v.Foot)
	b.WriteString(v.details())
	return b.String()
}

// details are the view's and its parts' evidence.
func (v View) details() string {
	var b strings.Builder
	for _, p := range v.Parts {
		b.WriteString(p.Detail)
	}
	b.WriteString(v.Detail)
	return b.String()
}

// Short is the view as a person reads it at 3 a.m.: parts that are the
// same on every node said once, naming the nodes, and the details (each
// node's own) only when verbose.
func (v View) Short(verbose bool) string {
	if !v.sameOnEveryNode() {
		if !verbose {
			v.Detail = ""
			v.Parts = slices.Clone(v.Parts)
			for i := range v.Parts {
				v.Parts[i].Detail = ""
			}
		}
		return v.String()
	}
	var b strings.Builder
	b.WriteString(v.Head)
	nodes := make([]string, len(v.Parts))
	for i, p := range v.Parts {
		nodes[i] = p.Node
	}
	b.WriteString(v.Parts[0].title(fmt.Sprintf("the same on all %d nodes: %s", len(nodes), strings.Join(nodes, ", "))))
	b.WriteString(v.Parts[0].Body)
	b.WriteString(v.Foot)
	if verbose {
		b.WriteString(v.details())
	}
	return b.String()
}

func (v View) sameOnEveryNode() bool {
	if len(v.Parts) < 2 {
		return false
	}
	for _, p := range v.Parts[1:] {
		if p.Body != v.Parts[0].Body || p.About != v.Parts[0].About {
			return false
		}
	}
	return true
}

func (v View) empty() bool {
	return v.Head == "" && len(v.Parts) == 0 && v.Foot == "" && v.Detail == ""
}

// Question is how a change is confirmed: a yes/no question, or a word
// (an object's name) to type.
type Question struct {
	Text string
	Word string
}

// UI is how a run talks to the operator: the command supplies a terminal
// (spinner, prompts), plain lines for automation, or the lab's measuring
// one.
type UI interface {
	Begin(index, total int, s Step)
	End(s Step, outcome string, elapsed time.Duration, message string)
	Progress(node, msg string)
	Show(v View)
	// Confirm asks q: nil is yes; an error wrapping ErrNotConfirmed is the
	// operator's no (see Declined); any other error is no answer (end of
	// input, an interruption).
	Confirm(ctx context.Context, q Question) error
}

// EtcdRestoreParams: etcd.restore puts back, create-only, the objects of
// backup files: those named (etcd restore FILE), or every backup the

// Result is what a step did: one line for the operator and the journal; its
// exported fields are journaled with the step's end record.
type Result interface{ Message() string }

// said is a result that is only its message.
type said string

func (s said) Message() string { return string(s) }

// errSkip ends a step as skipped, with the reason as its message.
type errSkip struct{ reason string }

func (e errSkip) Error() string { return e.reason }

func skip(format string, args ...any) error { return errSkip{fmt.Sprintf(format, args...)} }
