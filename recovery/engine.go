package recovery

// The engine: every change breakglass makes is a run of steps through one
// loop, run.execute. A step's executor computes a Plan: what it will
// change (shown), how to confirm it (a question, or a word to type) and a
// function that applies it. The loop alone shows the plan, stops there on a
// dry run, checks that the cluster lock is still held, asks, applies, and
// journals before and after. What a dry run writes and what a declined
// confirmation means are decided here, once:
//
//   - A dry run writes only its own new incident, marked as a rehearsal
//     (recover --dry-run, admission disable --dry-run); a dry run of an
//     existing incident (resume --dry-run, revert --dry-run) reads its
//     journal and writes nothing at all. A change's plan is made and shown
//     (the nodes validate it, etcd evaluates its guards), then the step ends
//     there; a step that only waits for what a change brought about is
//     skipped, saying what it would have waited for.
//   - A "no" at a requested step (recover --delete) is that step failing:
//     the run goes on, puts the plugins back, and ends partial (exit 5)
//     naming what is left. A "no" at an optional step skips it. A "no"
//     anywhere else, no answer, or an interruption stops the run (exit 8),
//     saying what earlier steps changed, if anything.
//
// Adding a step:
//  1. its parameters: a runbook action (runbooks/actions.go: Params type,
//     the action table), or one of the engine's own (EtcdRestoreParams);
//  2. its executor, in a file step_WHAT.go:
//     func (r *run) name(ctx context.Context, s Step, p *XxxParams) (*Plan, error)
//     It reads what it needs, renders the View, and returns the Plan (Change
//     set when Apply changes the cluster; Ask for its questions); it never
//     asks, never looks at r.fx.DryRun() to decide whether to apply, and
//     returns skip("why") when there is nothing for it to do;
//  3. register((*run).name) in init below.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
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
// incident wrote (revert --objects).
type EtcdRestoreParams struct {
	Backups []string `json:"backups,omitempty"`
}

// LockBreakParams: lock.break removes the cluster lock (lock break).
type LockBreakParams struct{}

// ExtraArgsRestoreParams: extraargs.restore puts back into
// cluster.apiServer.extraArgs, exactly, what the incident's extraargs.remove
// steps took out, as their apply records keep it (revert).
type ExtraArgsRestoreParams struct{}

// The engine's own actions, behind revert, etcd restore and lock break.
const (
	ActionEtcdRestore      runbooks.Action = "etcd.restore"
	ActionLockBreak        runbooks.Action = "lock.break"
	ActionExtraArgsRestore runbooks.Action = "extraargs.restore"
)

func (*EtcdRestoreParams) Action() runbooks.Action      { return ActionEtcdRestore }
func (*LockBreakParams) Action() runbooks.Action        { return ActionLockBreak }
func (*ExtraArgsRestoreParams) Action() runbooks.Action { return ActionExtraArgsRestore }

// Result is what a step did: one line for the operator and the journal; its
// exported fields are journaled with the step's end record.
type Result interface{ Message() string }

// said is a result that is only its message.
type said string

func (s said) Message() string { return string(s) }

// executor plans one action.
type executor struct {
	plan    func(context.Context, *run, Step) (*Plan, error)
	changes bool // changes the cluster: the lock is taken, resume and revert care
	params  reflect.Type
}

var executors = map[runbooks.Action]executor{}

// register adds the executor of P's action; whether it changes the cluster
// is what the runbooks' action table says of it (the engine's own actions
// do).
func register[P Params](fn func(*run, context.Context, Step, P) (*Plan, error)) {
	var zero P
	a := zero.Action()
	info, known := runbooks.LookupAction(a)
	executors[a] = executor{
		plan: func(ctx context.Context, r *run, s Step) (*Plan, error) {
			p, ok := s.Params.(P)
			if !ok {
				return nil, fmt.Errorf("internal: step %s has parameters %T, not %T", s.Name, s.Params, zero)
			}
			return fn(r, ctx, s, p)
		},
		changes: !known || info.ChangesCluster,
		params:  reflect.TypeOf(zero).Elem(),
	}
}

func init() {
	register((*run).preflight)
	register((*run).diagnose)
	register((*run).disable)
	register((*run).waitRecovering)
	register((*run).snapshot)
	register((*run).deleteObjects)
	register((*run).waitWebhooks)
	register((*run).restore)
	register((*run).verify)
	register((*run).restoreObjects)
	register((*run).breakLock)
	register((*run).removeFlags)
	register((*run).restoreFlags)
	register((*run).usage)
	register((*run).compact)
	register((*run).defragment)
	register((*run).disarm)
}

// changesCluster tells whether an action changes the cluster.
func changesCluster(action string) bool {
	return executors[runbooks.Action(action)].changes
}

// stepJSON is how a step is journaled (with the run's options, for resume).
type stepJSON struct {
	Name        string          `json:"name"`
	Action      runbooks.Action `json:"action"`
	Description string          `json:"description,omitempty"`
	Confirm     bool            `json:"confirm,omitempty"`
	Optional    bool            `json:"optional,omitempty"`
	Requested   bool            `json:"requested,omitempty"`
	With        json.RawMessage `json:"with,omitempty"`
}

func (s Step) MarshalJSON() ([]byte, error) {
	with, err := json.Marshal(s.Params)
	if err != nil {
		return nil, err
	}
	return json.Marshal(stepJSON{Name: s.Name, Action: s.Params.Action(), Description: s.Description,
		Confirm: s.Confirm, Optional: s.Optional, Requested: s.Requested, With: with})
}

func (s *Step) UnmarshalJSON(b []byte) error {
	var j stepJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	ex, ok := executors[j.Action]
	if !ok {
		return fmt.Errorf("step %s: unknown action %q", j.Name, j.Action)
	}
	p := reflect.New(ex.params).Interface().(Params)
	if len(j.With) > 0 {
		if err := json.Unmarshal(j.With, p); err != nil {
			return fmt.Errorf("step %s: %w", j.Name, err)
		}
	}
	*s = Step{Name: j.Name, Description: j.Description, Confirm: j.Confirm, Optional: j.Optional, Requested: j.Requested, Params: p}
	return nil
}

// journalData is a result's record for the journal: its JournalData when
// it has one, else its exported fields; nothing for a bare message.
func journalData(res Result) json.RawMessage {
	var v any = res
	switch r := res.(type) {
	case nil, said:
		return nil
	case interface{ JournalData() any }:
		v = r.JournalData()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// Applier sends a machine config to a node (a *talos.Client is one).
type Applier interface {
	Apply(ctx context.Context, node string, req talos.ApplyRequest) (talos.ApplyResult, error)
}

// Effects are what a run may change, chosen once by the command that
// starts it. The zero value changes nothing: a dry run (see the top of
// this file for what it writes).
type Effects struct {
	// Nodes applies machine configs; nil: the nodes only validate them.
	Nodes Applier
	// Etcd writes etcd keys and backup and snapshot files; nil: nothing is
	// written (etcd.DryRunWriter).
	Etcd func(*etcd.Client) etcd.Writer
	// Lock takes the cluster lock before the first change.
	Lock bool
}

// Live is the effects of a real run through tc.
// A nil tc is a run that reaches etcd only.
func Live(tc *talos.Client) Effects {
	fx := Effects{Etcd: etcd.RealWriter, Lock: true}
	if tc != nil {
		fx.Nodes = tc
	}
	return fx
}

// DryRun tells whether these effects change nothing.
func (fx Effects) DryRun() bool { return fx.Nodes == nil && fx.Etcd == nil }

// EtcdWriter is the writer for ec (a nil ec: one that only writes files).
func (fx Effects) EtcdWriter(ec *etcd.Client) etcd.Writer {
	if fx.Etcd == nil {
		return etcd.DryRunWriter(ec)
	}
	return fx.Etcd(ec)
}

// clusterLock is the cluster lock as the loop checks it before each change
// (an *etcd.Lock is one).
type clusterLock interface {
	// Lost is nil while the lock is known to be held, or says why not.
	Lost(ctx context.Context) error
	Release(ctx context.Context) error
}

// run is the state of one run of the engine.
type run struct {
	tc      *talos.Client
	st      State
	fx      Effects
	ui      UI
	opts    RecoverOptions
	journal *Journal
	target  Target // how printed commands reach the incident's cluster
	ec      *etcd.Client
	lock    clusterLock
	cluster string
	done    map[string]bool // steps completed in an earlier run (resume)
	applied bool            // this run applied a change
	// rehearsed are the actions whose change this dry run planned without
	// applying: a later step cannot find what they would have recorded.
	rehearsed map[runbooks.Action]bool
	claimed   bool    // this process wrote the incident's lock.pid
	entries   []Entry // the journal so far (resume, revert)
	// decision is what the diagnosis fixed (this run's, or the one an
	// earlier run of the incident journaled).
	decision *Decision
	undone   []string // requested steps that failed: what is left, with the command
	gone     []string // recorded nodes the operator said are gone (resume, revert)
	// lockDeferred: etcd was full when the lock was to be taken (taking it
	// is a write); the disarm step takes it once etcd takes writes.
	lockDeferred bool
	usageFound   *UsageResult // what this run's usage step found
}

func newRun(tc *talos.Client, st State, fx Effects, ui UI, opts RecoverOptions, j *Journal, entries []Entry) *run {
	return &run{tc: tc, st: st, fx: fx, ui: ui, opts: opts, journal: j, entries: entries, done: CompletedSteps(entries),
		rehearsed: map[runbooks.Action]bool{}, target: Target{Context: j.Meta().Context, Nodes: tc.Nodes()}}
}

// execute is the loop: each step planned, shown, confirmed, applied and
// journaled before and after, then what to do next.
func (r *run) execute(ctx context.Context) (*RecoverResult, error) {
	defer r.journal.Close()
	defer r.close(ctx)
	start := time.Now()
	res := &RecoverResult{Incident: r.journal.ID, Journal: r.journal.Path(), DryRun: r.opts.DryRun}
	if r.fx.Lock && !r.willRun("preflight") {
		// A resume whose preflight completed earlier, a revert or a
		// standalone change: the lock is taken here, before any step.
		if err := r.lockBeforeSteps(ctx); err != nil {
			_ = r.journal.Append(Entry{Kind: "note", Message: "not run: " + err.Error()})
			return nil, err
		}
	}
	var runErr error
	// By index: a diagnosis may switch the steps after it (followDecision).
	for i := 0; i < len(r.opts.Steps); i++ {
		s := r.opts.Steps[i]
		if r.done[s.Name] {
			res.Steps = append(res.Steps, StepResult{Name: s.Name, Action: s.Action(), Outcome: OutcomeSkipped, Message: "completed in an earlier run"})
			continue
		}
		r.ui.Begin(i+1, len(r.opts.Steps), r.decision.described(s, r.opts.Steps))
		if err := r.journal.Append(Entry{Kind: "begin", Step: s.Name, Action: s.Action(), Message: s.Description}); err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		t0 := time.Now()
		out, msg, err := r.step(ctx, s)
		if msg == "" && out != nil {
			msg = out.Message()
		}
		sr := StepResult{Name: s.Name, Action: s.Action(), Outcome: OutcomeOK, Message: msg, Elapsed: elapsedSince(t0), Result: out}
		end := Entry{Kind: "end", Step: s.Name, Action: s.Action(), Outcome: OutcomeOK, Message: msg, Elapsed: sr.Elapsed, Data: journalData(out)}
		if err != nil {
			runErr = r.judge(ctx, s, err, &sr, &end)
		}
		if jerr := r.journal.Append(end); jerr != nil && runErr == nil {
			runErr = fmt.Errorf("journal: %w", jerr)
		}
		r.ui.End(s, sr.Outcome, time.Duration(sr.Elapsed), sr.Message)
		res.Steps = append(res.Steps, sr)
		if runErr != nil {
			break
		}
	}
	res.Elapsed = elapsedSince(start)
	res.Outcome = "completed"
	res.Decision = r.decision
	switch {
	case errors.Is(runErr, ErrAborted) || ctx.Err() != nil:
		res.Outcome = "aborted"
	case errors.Is(runErr, errNothingToRecover):
		res.Outcome, runErr = "nothing-to-do", nil
	case isNotDeadlock(runErr):
		res.Outcome = "stopped"
	case runErr != nil:
		res.Outcome = "failed"
	case len(r.undone) > 0:
		res.Outcome = "partial"
		runErr = &undoneError{undone: r.undone}
	}
	res.Undone = r.undone
	res.LeftBehind = r.leftBehind()
	res.Next = r.next(res, runErr)
	_ = r.journal.Append(Entry{Kind: "finish", Outcome: res.Outcome, Elapsed: res.Elapsed, Message: strings.Join(res.Next, "; ")})
	return res, runErr
}

// step plans a step, shows the plan, and, unless this is a dry run,
// confirms and applies it. It returns the result, the message when the
// loop words it (a dry run), and the step's error.
func (r *run) step(ctx context.Context, s Step) (Result, string, error) {
	ex, ok := executors[s.Params.Action()]
	if !ok {
		return nil, "", failure.Input("see the actions with: breakglass runbook show webhook-deadlock", "unknown action %q in step %s", s.Action(), s.Name)
	}
	plan, err := ex.plan(ctx, r, s)
	if plan == nil {
		return nil, "", err
	}
	if !plan.View.empty() {
		r.ui.Show(plan.View)
	}
	if err != nil {
		return plan.Result, "", err
	}
	if plan.Apply == nil {
		return plan.Result, "", plan.Partial
	}
	if r.fx.DryRun() {
		if !plan.Change {
			return plan.Result, "", skip("dry run: %s", plan.DryRun)
		}
		r.rehearsed[s.Params.Action()] = true
		return plan.Result, "dry run: " + plan.DryRun, plan.Partial
	}
	if plan.Change {
		if err := r.lockHeld(ctx); err != nil {
			return plan.Result, "", err
		}
		if s.Confirm && len(plan.Ask) > 0 {
			for _, q := range plan.Ask {
				if err := r.ui.Confirm(ctx, q); err != nil {
					return plan.Result, "", err
				}
			}
			// The answer may have taken minutes: the lock again.
			if err := r.lockHeld(ctx); err != nil {
				return plan.Result, "", err
			}
		}
		// Hook (issue 29, outputcheck.go): no change whose record cannot be written.
		if err := outputFailing(r.ui); err != nil {
			return plan.Result, "", err
		}
		r.applied = true
		apply := Entry{Kind: "apply", Step: s.Name, Action: s.Action()}
		if plan.Record != nil {
			if apply.Data, err = json.Marshal(plan.Record); err != nil {
				return plan.Result, "", fmt.Errorf("journal: %w", err)
			}
		}
		if err := r.journal.Append(apply); err != nil {
			return plan.Result, "", fmt.Errorf("journal: %w", err)
		}
	}
	out, err := plan.Apply(ctx)
	if out == nil {
		out = plan.Result
	}
	return out, "", err
}

// judge decides what a step's error means for the step (its outcome and
// message, as the result and the journal say them) and for the run: a
// non-nil return ends it with that error.
func (r *run) judge(ctx context.Context, s Step, err error, sr *StepResult, end *Entry) error {
	set := func(outcome, msg string) {
		sr.Outcome, sr.Message, end.Outcome, end.Error = outcome, msg, outcome, msg
	}
	var sk errSkip
	var lost *etcd.LockLostError
	declined := errors.Is(err, ErrNotConfirmed) && ctx.Err() == nil
	switch {
	case errors.As(err, &sk):
		sr.Outcome, sr.Message, end.Outcome, end.Message = OutcomeSkipped, sk.reason, OutcomeSkipped, sk.reason
		return nil
	case errors.As(err, &lost):
		// Whatever the step: nothing more may change without the lock.
		set(OutcomeFailed, err.Error())
		return err
	case declined && s.Requested:
		// Asked for by name, so never optional: declining it is that step
		// failing. The plugins must still be put back: go on, and end as a
		// partial failure.
		set(OutcomeFailed, "declined at the confirmation: "+err.Error())
		r.undone = append(r.undone, r.finishCommand(s, err))
		return nil
	case declined && s.Optional:
		set(OutcomeSkipped, "declined at the confirmation: "+err.Error())
		end.Message = sr.Message
		return nil
	case errors.Is(err, ErrAborted) || ctx.Err() != nil:
		err = r.stopped(ctx, err)
		set(OutcomeAborted, err.Error())
		return err
	case errors.Is(err, errNothingToRecover), isNotDeadlock(err):
		// The diagnosis found nothing this runbook can fix: stop before
		// any change. A healthy cluster is a success.
		sr.Message, end.Message = err.Error(), err.Error()
		return err
	case s.Requested:
		set(OutcomeFailed, err.Error())
		r.undone = append(r.undone, r.finishCommand(s, err))
		return nil
	case s.Optional:
		// An optional step may fail without failing the run; it says so.
		set(OutcomeSkipped, "optional step failed: "+err.Error())
		end.Message, end.Error = sr.Message, err.Error()
		return nil
	}
	set(OutcomeFailed, err.Error())
	return err
}

// stopped is the error of a run stopped at a confirmation or by an
// interruption: aborted, by what, and whether anything had changed.
func (r *run) stopped(ctx context.Context, err error) error {
	if !errors.Is(err, ErrAborted) || errors.Is(err, ErrNotConfirmed) {
		err = fmt.Errorf("%w: %w", ErrAborted, err) // interrupted mid-call (the node's error says canceled), or a no
	}
	if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (%v)", err, cause) // the journal says interrupted, and by what
	}
	return &stoppedError{err: err, changed: r.changed()}
}

// stoppedError is a run that stopped before its end, saying whether it
// leaves anything changed.
type stoppedError struct {
	err     error
	changed bool
}

func (e *stoppedError) Error() string {
	if e.changed {
		return e.err.Error() + "; what the earlier steps changed stays (see the next commands)"
	}
	return e.err.Error() + ", nothing was changed"
}
func (e *stoppedError) Unwrap() error { return e.err }

// changed tells whether this incident applied a change, in this run or an
// earlier one.
func (r *run) changed() bool {
	return r.applied || appliedBefore(r.entries)
}

// appliedBefore tells whether an earlier run of the incident applied a
// change: its apply records (journals before them: a begun changing step).
func appliedBefore(entries []Entry) bool {
	if len(entries) == 0 {
		return false
	}
	applyRecords := entries[0].Meta != nil && entries[0].Meta.JournalVersion >= 2
	for _, e := range entries {
		if e.Kind == "apply" || !applyRecords && e.Kind == "begin" && changesCluster(e.Action) {
			return true
		}
	}
	return false
}

// lockHeld checks, before a change, that the cluster lock this run took is
// still its own: a *etcd.LockLostError says why not and how to continue.
func (r *run) lockHeld(ctx context.Context) error {
	if r.lock == nil {
		return nil
	}
	return r.lock.Lost(ctx)
}

// next names what the operator should run after this run.
func (r *run) next(res *RecoverResult, runErr error) []string {
	id := r.journal.ID
	var out []string
	var stop *NotDeadlockError
	switch {
	case errors.As(runErr, &stop):
		return append(out, stop.Next...)
	case res.Outcome == "nothing-to-do":
		return []string{"nothing was changed; check the webhooks anyway: " + r.target.NodesCmd("audit --from-etcd")}
	case r.opts.DryRun && r.journal.Path() == "":
		out = append(out, "nothing was written, not even the journal; run it for real: "+r.opts.CommandLine)
	case r.opts.DryRun:
		out = append(out, "run it for real: "+orDefault(r.opts.CommandLine, "the same command without --dry-run"))
	case len(r.undone) > 0:
		out = append(out, r.undone...)
	case runErr != nil && !r.changed():
		// Refused or failed before any change was applied (the lock held by
		// someone else, preflight, diagnose, a declined confirmation).
		out = append(out, "nothing was changed; once the cause is dealt with, run it again or continue it: "+r.target.Cmd("resume "+id))
	case runErr != nil:
		out = append(out, "continue from where it stopped: "+r.target.Cmd("resume "+id),
			"or undo what this incident changed: "+r.target.Cmd("revert "+id))
	case r.opts.KeepDisabled:
		out = append(out, "admission plugins are still disabled (--keep-disabled): put them back with: "+r.target.NodesCmd("admission restore"))
	}
	if r.journal.Path() != "" {
		out = append(out, "timeline for the postmortem: breakglass journal timeline "+id+" --format markdown")
	}
	if r.decision != nil && r.decision.Verdict == string(diagnose.EtcdNoSpace) {
		return append(out, r.roomNext(runErr)...)
	}
	if !r.opts.DryRun && runErr == nil {
		out = append(out, "prevent a repeat: "+r.target.NodesCmd("audit --from-etcd --fix"))
	}
	return out
}

func (r *run) close(ctx context.Context) {
	if r.claimed {
		r.unclaim()
	}
	if r.lock != nil {
		_ = r.lock.Release(ctx)
	}
	if r.ec != nil {
		_ = r.ec.Close()
	}
}

// etcd connects on first use. Failing to reach etcd fails only the steps
// that need it, and is not kept: the next use tries again (etcd that timed
// out at preflight may answer by the time a step needs it).
func (r *run) etcd(ctx context.Context) (*etcd.Client, error) {
	if r.ec != nil {
		return r.ec, nil
	}
	o := r.opts.Etcd
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	ec, err := ConnectEtcd(ctx, r.tc, o)
	if err != nil {
		return nil, err
	}
	r.ec = ec
	return ec, nil
}

func (r *run) progress(node, msg string) { r.ui.Progress(node, msg) }

// errSkip ends a step as skipped, with the reason as its message.
type errSkip struct{ reason string }

func (e errSkip) Error() string { return e.reason }

func skip(format string, args ...any) error { return errSkip{fmt.Sprintf(format, args...)} }

func isNotDeadlock(err error) bool {
	var stop *NotDeadlockError
	return errors.As(err, &stop)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
