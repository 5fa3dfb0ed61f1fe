package recovery

// An incident type is what breakglass recovers from (an admission
// deadlock, flags the new minor refuses, a full etcd, ...): one value,
// found by the diagnosis, that gives the engine its runbook and states what
// the engine must keep for it: what its runs must cover, whether the
// cluster lock may wait for etcd to take writes, and what to advise when a
// run ends. What each change can be undone by is said by the change itself
// (Plan.Undo). The engine knows no type by name: it asks the one the
// diagnosis decided (journaled with the decision, for resume and revert).
// Adding a type is a file type_NAME.go that registers it, with its steps.
// What it decides is a type of its own in that file (its Decided, set by
// Decide as Decision.Of), whose Fill gives the steps after diagnose their
// parameters: no shared struct changes, and no step reads the decision.

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

// IncidentType is one kind of incident and what its runs promise.
type IncidentType struct {
	// Name is how the journal, `journal list` and the headers name it.
	Name string
	// Verdicts are the diagnoses it answers.
	Verdicts []diagnose.Verdict
	// Runbook is its built-in runbook: a run on another one follows it
	// after the diagnosis (or stops, when the operator named that one).
	Runbook string
	// Does says what its runbook does, for a run told to use it where
	// another type's runbook is needed ("gives a full etcd room").
	Does string
	// Fits tells whether a runbook's steps recover this type.
	Fits func(steps []Step) bool
	// Decide fills the decision from the diagnosis: what to change, and
	// why. What the type alone decides it sets as d.Of, a value of its own
	// type whose Fill gives the steps after diagnose their parameters.
	Decide func(d *Decision, report *diagnose.Report, opts RecoverOptions) error
	// Decided, when the type decides something of its own, is a zero value
	// of it (the type Decide sets as d.Of), which a journal's decision is
	// read into.
	Decided func() Decided
	// Plan says the decision's plan in one line.
	Plan func(d *Decision) string
	// Scope: what a run of this type must cover, or refuse before any change.
	Scope Scope
	// LockLater: its runs may go on while the cluster lock cannot be taken
	// yet (a full etcd refuses the write that takes it); the loop reads the
	// lock before each change and takes it as soon as etcd takes writes.
	LockLater bool
	// Advice is said last, after every run of the type that is not a dry
	// run or a revert, whether it worked or not (runErr).
	Advice func(r *run, d *Decision, runErr error) []string
}

// Scope is what a run must cover.
type Scope int

const (
	// ScopeNodesGiven: the nodes named are enough (one kube-apiserver that
	// starts creates the objects the others need).
	ScopeNodesGiven Scope = iota
	// ScopeEveryMember: every etcd member, hence every control plane (each
	// runs one); a run naming fewer is refused before any change.
	ScopeEveryMember
)

// incidentTypes are the registered types, in the order the diagnosis
// prefers them.
var incidentTypes []*IncidentType

func registerType(t *IncidentType) { incidentTypes = append(incidentTypes, t) }

// IncidentTypes are the names of the registered incident types.
func IncidentTypes() []string {
	var out []string
	for _, t := range incidentTypes {
		out = append(out, t.Name)
	}
	return out
}

// typeNamed is the registered type of that name (nil: none).
func typeNamed(name string) *IncidentType {
	for _, t := range incidentTypes {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// typeOfVerdict is the type that answers a verdict (nil: none does).
func typeOfVerdict(v diagnose.Verdict) *IncidentType {
	for _, t := range incidentTypes {
		if slices.Contains(t.Verdicts, v) {
			return t
		}
	}
	return nil
}

// typeFitting is the type a run's steps recover (nil: none).
func typeFitting(steps []Step) *IncidentType {
	for _, t := range incidentTypes {
		if t.Fits(steps) {
			return t
		}
	}
	return nil
}

// incidentType is the decision's type; a journal from before types were
// journaled names it by its verdict.
func (d *Decision) incidentType() *IncidentType {
	if d == nil {
		return nil
	}
	if t := typeNamed(d.Type); t != nil {
		return t
	}
	return typeOfVerdict(diagnose.Verdict(d.Verdict))
}

// planText is the decision's plan in one line.
func (d *Decision) planText() string {
	if t := d.incidentType(); t != nil && t.Plan != nil {
		return t.Plan(d)
	}
	return d.Verdict
}

// Render is the plan as the diagnosis shaped it, for the operator to read.
func (d *Decision) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Plan from the diagnosis (verdict %s): %s\n", d.Verdict, d.planText())
	for _, r := range d.Reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	for _, w := range d.Warnings {
		fmt.Fprintf(&b, "WARNING: %s\n", w)
	}
	return b.String()
}

// DiagnoseResult is the verdict, the culprits and the plan it fixed.
type DiagnoseResult struct {
	said
	Verdict  string    `json:"verdict"`
	Summary  string    `json:"summary,omitempty"`
	Culprits any       `json:"culprits"`
	Decision *Decision `json:"decision,omitempty"`
	// Cluster is the cluster the diagnosis read (its kube-system
	// namespace's UID): a copy of etcd's data is checked against it before
	// any step uses it.
	Cluster *etcd.Identity `json:"cluster,omitempty"`
}

// decision is what the incident's diagnosis decided: this run's, or the
// one an earlier run journaled (nil: none yet).
func (r *run) decision() *Decision {
	res, ok := earlier[*DiagnoseResult](r, runbooks.ActionDiagnose)
	if !ok || res.Decision == nil {
		return nil
	}
	d := res.Decision
	if d.Type == "" && len(d.Steps) == 0 && (d.Of == nil || reflect.Indirect(reflect.ValueOf(d.Of)).IsZero()) && d.incidentType() == typeOfVerdict(diagnose.AdmissionDeadlock) {
		return nil // an old journal's empty decision: nothing was fixed
	}
	return d
}

// decide turns a diagnosis into the run's plan, through the type that
// answers its verdict: a run whose steps fit it keeps them; one told its
// runbook explicitly stops before any change when they do not; any other
// follows the type's runbook after diagnose, saying why.
func decide(report *diagnose.Report, opts RecoverOptions) (*Decision, error) {
	d := &Decision{Verdict: string(report.Verdict), Runbook: report.Runbook}
	switch report.Verdict {
	case diagnose.Healthy:
		return d, errNothingToRecover
	case diagnose.OtherFailure:
		return d, &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary, Next: report.Next}
	}
	t := typeOfVerdict(report.Verdict)
	if t == nil {
		return d, &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary, Next: report.Next}
	}
	d.Type = t.Name
	if d.Runbook == "" {
		d.Runbook = t.Runbook
	}
	if !t.Fits(opts.Steps) {
		owner := typeFitting(opts.Steps)
		does := "does not recover it"
		if owner != nil {
			does = owner.Does
		}
		if opts.RunbookExplicit || owner == nil {
			return d, wrongRunbook(report, fmt.Sprintf("runbook %s %s, and the diagnosis says %s", opts.Runbook, does, report.Verdict))
		}
		rb, err := runbooks.Get(t.Runbook)
		if err != nil {
			return d, err
		}
		d.Steps = StepsOf(rb)
		d.Reasons = append(d.Reasons, fmt.Sprintf("the diagnosis says %s: the steps after diagnose are those of runbook %s (%s), not those of %s, which %s",
			report.Verdict, rb.Metadata.Name, strings.Join(stepNames(d.Steps, runbooks.ActionDiagnose), ", "), opts.Runbook, does))
	}
	if err := t.Decide(d, report, opts); err != nil {
		return d, err
	}
	return d, nil
}

// stepNames are the names of the steps after the first of that action.
func stepNames(steps []Step, from runbooks.Action) []string {
	i := slices.IndexFunc(steps, func(s Step) bool { return s.Params.Action() == from })
	var out []string
	for _, s := range steps[i+1:] {
		out = append(out, s.Name)
	}
	return out
}

// NotDeadlockError ends a guided recovery whose diagnosis found nothing its
// runbook can recover from: nothing was changed. Its exit code is the one
// `breakglass diagnose` gives the same verdict.
type NotDeadlockError struct {
	Verdict diagnose.Verdict
	Summary string
	Next    []string
	// Mismatch, when set, says why the run's runbook does not fit the
	// verdict (its steps fix another failure).
	Mismatch string
}

func (e *NotDeadlockError) Error() string {
	if e.Mismatch != "" {
		return e.Mismatch + "; nothing was changed: " + e.Summary
	}
	switch e.Verdict {
	case diagnose.OtherFailure:
		return "not an admission deadlock, nothing was changed: " + e.Summary
	case diagnose.FlagsRefused:
		return "kube-apiserver refuses its own flags; nothing was changed: " + e.Summary
	default:
		return "cannot tell whether this is an admission deadlock, nothing was changed: " + e.Summary
	}
}

// Hints are the diagnosis's next commands.
func (e *NotDeadlockError) Hints() []string { return e.Next }

// Unwrap gives the exit code `breakglass diagnose` gives the same verdict.
func (e *NotDeadlockError) Unwrap() error { return e.Verdict.Category() }

func (e *NotDeadlockError) stopsRun() []string { return e.Next }

// stopper is an error that stops a run before any change because the run
// cannot help as asked (another failure than its runbook's, too few nodes,
// a change that would not help): the run is stopped, not failed, and what
// to do next is the error's own.
type stopper interface {
	error
	stopsRun() (hints []string)
}

// stopNext is the next commands of a stopping error (ok: err is one).
func stopNext(err error) ([]string, bool) {
	var s stopper
	if errors.As(err, &s) {
		return s.stopsRun(), true
	}
	return nil, false
}

func isStop(err error) bool { _, ok := stopNext(err); return ok }

// refusedError stops a run that cannot help as asked (-n naming too few
// nodes): bad input, nothing changed, and how to ask again.
type refusedError struct {
	err   error
	hints []string
}

func (e *refusedError) Error() string      { return e.err.Error() }
func (e *refusedError) Unwrap() error      { return e.err }
func (e *refusedError) Hints() []string    { return e.hints }
func (e *refusedError) stopsRun() []string { return e.hints }

// wrongRunbook stops a run whose runbook fixes another failure than the
// diagnosis's, before any change; the plain recover follows the diagnosis.
func wrongRunbook(report *diagnose.Report, why string) *NotDeadlockError {
	hints := slices.Clone(report.Next)
	if report.Runbook != "" {
		hints = append([]string{"breakglass recover   # without --runbook: the diagnosis picks " + report.Runbook}, hints...)
	}
	return &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary, Next: hints, Mismatch: why}
}

// errNothingToRecover ends a run whose diagnosis says kube-apiserver is
// ready everywhere: there is nothing to recover, and that is a success.
var errNothingToRecover = errors.New("kube-apiserver is ready on every node: nothing to recover")

func hasAction(steps []Step, a runbooks.Action) bool {
	return slices.ContainsFunc(steps, func(s Step) bool { return s.Params.Action() == a })
}
