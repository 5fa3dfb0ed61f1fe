package recovery

// The engine: every change breakglass makes is a run of steps through one
// loop, run.execute. A step's executor computes a Plan: what it will
// change (shown), how to confirm it (a question, or a word to type), what
// can be done about it afterwards (Undo) and a function that applies it.
// The loop alone shows the plan, stops there on a dry run, checks the
// cluster lock, asks, applies, and journals before and after; it alone
// follows a diagnosis's decision to another incident type's steps, and
// holds the run to what that type needs (its scope, its lock). What a dry
// run writes and what a declined confirmation means are decided here, once:
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
//     saying what earlier steps changed, if anything, and what of it revert
//     can undo.
//
// Adding a step:
//  1. its parameters: a runbook action (runbooks/actions.go: Params type,
//     the action table), or one of the engine's own (undo.go);
//  2. its executor, in a file step_WHAT.go:
//     func (r *run) name(ctx context.Context, s Step, p *XxxParams) (*Plan, error)
//     It reads what it needs (earlier steps' results with earlier[T]),
//     renders the View, and returns the Plan (Change and Undo set when Apply
//     changes the cluster; Ask for its questions); it never asks, never
//     looks at r.fx.DryRun() to decide whether to apply, and returns
//     skip("why") when there is nothing for it to do;
//  3. register((*run).name) in that file's init.
//
// Adding an incident type: incident_type.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/runbooks"
)

// Outcomes of a run that are not a step's.
const (
	runCompleted      = "completed"
	runReverted       = "reverted"        // a revert that undid every change of the incident
	runRevertedPartly = "reverted-partly" // a revert that undid what it could; the rest cannot be (or was not asked)
)

// execute is the loop: each step planned, shown, confirmed, applied and
// journaled before and after, a diagnosis's decision followed, then what to
// do next.
func (r *run) execute(ctx context.Context) (*RecoverResult, error) {
	defer r.journal.Close()
	defer r.close(ctx)
	start := time.Now()
	res := &RecoverResult{Incident: r.journal.ID, Journal: r.journal.Path(), DryRun: r.opts.DryRun}
	if err := r.begin(ctx); err != nil {
		_ = r.journal.Append(Entry{Kind: "note", Message: "not run: " + err.Error()})
		return nil, err
	}
	var runErr error
	// By index: a decision may switch the steps after the diagnosis.
	for i := 0; runErr == nil && i < len(r.opts.Steps); i++ {
		s := r.opts.Steps[i]
		if r.done[s.Name] {
			res.Steps = append(res.Steps, StepResult{Name: s.Name, Action: s.Action(), Outcome: OutcomeSkipped, Message: "completed in an earlier run"})
			continue
		}
		var sr StepResult
		sr, runErr = r.runStep(ctx, i, s)
		res.Steps = append(res.Steps, sr)
		r.results = append(r.results, sr)
		if d, ok := sr.Result.(interface{ decided() *Decision }); ok && runErr == nil && d.decided() != nil {
			runErr = r.enter(ctx, d.decided())
		}
	}
	res.Elapsed = elapsedSince(start)
	res.Outcome = runCompleted
	res.Decision = r.decision()
	switch {
	case errors.Is(runErr, ErrAborted) || ctx.Err() != nil:
		res.Outcome = "aborted"
	case errors.Is(runErr, errNothingToRecover):
		res.Outcome, runErr = "nothing-to-do", nil
	case isStop(runErr):
		res.Outcome = "stopped"
	case runErr != nil:
		res.Outcome = "failed"
	case len(r.undone) > 0:
		res.Outcome = "partial"
		runErr = &undoneError{undone: r.undone}
	case r.reverting() && r.opts.DryRun:
	case r.reverting() && len(r.notUndone()) > 0:
		res.Outcome = runRevertedPartly
	case r.reverting():
		res.Outcome = runReverted
	}
	res.Undone = r.undone
	res.LeftBehind = r.leftBehind()
	res.Next = r.next(res, runErr)
	_ = r.journal.Append(Entry{Kind: "finish", Outcome: res.Outcome, Elapsed: res.Elapsed, Message: strings.Join(res.Next, "; ")})
	return res, runErr
}

// begin prepares a run before its first step: a resumed incident follows
// the decision its diagnosis journaled, and a run without a preflight step
// (a resume past it, a revert, a standalone change) takes the lock here.
func (r *run) begin(ctx context.Context) error {
	if d := r.decision(); d != nil {
		if err := r.enter(ctx, d); err != nil {
			return err
		}
	}
	if r.fx.Lock && !r.willRun("preflight") {
		return r.lockBeforeSteps(ctx)
	}
	return nil
}

// enter follows a decision: the steps after the diagnosis become the
// decided type's when the run's runbook is another's, the type's own
// decision fills their parameters, and the run is held to what the type
// needs before any of its changes.
func (r *run) enter(ctx context.Context, d *Decision) error {
	r.opts.Steps = d.follow(r.opts.Steps)
	t := d.incidentType()
	if t == nil {
		return nil
	}
	if r.lock.deferred && !t.LockLater {
		return fmt.Errorf("%w: the cluster lock could not be taken (etcd refuses writes), and %s changes nothing without it", ErrConflict, t.Name)
	}
	if t.Scope == ScopeEveryMember {
		return r.coversEveryMember(ctx, t)
	}
	return nil
}

// follow is the steps a run follows after this decision: after diagnose,
// the type's runbook's when the decision says so, their parameters filled
// by what the type decided. A run without a diagnose step (a revert, a
// standalone change) keeps its own.
func (d *Decision) follow(steps []Step) []Step {
	isDiagnose := func(s Step) bool { return s.Action() == "diagnose" }
	i := slices.IndexFunc(steps, isDiagnose)
	if i < 0 {
		return steps
	}
	after := steps[i+1:]
	if j := slices.IndexFunc(d.Steps, isDiagnose); j >= 0 {
		after = d.Steps[j+1:]
	}
	if d.Of != nil {
		after = d.Of.Fill(after)
	}
	return append(slices.Clone(steps[:i+1]), after...)
}

// runStep runs one step: begun, planned, applied, judged and journaled.
func (r *run) runStep(ctx context.Context, i int, s Step) (StepResult, error) {
	r.ui.Begin(i+1, len(r.opts.Steps), s)
	sr := StepResult{Name: s.Name, Action: s.Action(), Outcome: OutcomeOK}
	if err := r.journal.Append(Entry{Kind: "begin", Step: s.Name, Action: s.Action(), Message: s.Description}); err != nil {
		sr.Outcome, sr.Message = OutcomeFailed, "journal: "+err.Error()
		return sr, fmt.Errorf("journal: %w", err)
	}
	t0 := time.Now()
	plan, out, msg, err := r.step(ctx, s)
	if msg == "" && out != nil {
		msg = out.Message()
	}
	sr.Message, sr.Elapsed, sr.Result = msg, elapsedSince(t0), out
	end := Entry{Kind: "end", Step: s.Name, Action: s.Action(), Outcome: OutcomeOK, Message: msg, Elapsed: sr.Elapsed, Data: journalData(out)}
	var runErr error
	if err != nil {
		runErr = r.judge(ctx, s, plan, err, &sr, &end)
	}
	if jerr := r.journal.Append(end); jerr != nil && runErr == nil {
		runErr = fmt.Errorf("journal: %w", jerr)
	}
	r.ui.End(s, sr.Outcome, time.Duration(sr.Elapsed), sr.Message)
	return sr, runErr
}

// step plans a step, shows the plan, and, unless this is a dry run,
// confirms and applies it. It returns the plan, the result, the message
// when the loop words it (a dry run), and the step's error.
func (r *run) step(ctx context.Context, s Step) (*Plan, Result, string, error) {
	ex, ok := executors[s.Params.Action()]
	if !ok {
		return nil, nil, "", failure.Input("see the actions with: breakglass runbook show webhook-deadlock", "unknown action %q in step %s", s.Action(), s.Name)
	}
	plan, err := ex.plan(ctx, r, s)
	if plan == nil {
		return nil, nil, "", err
	}
	plan.View.Foot += factsText(plan.Facts)
	if !plan.View.empty() {
		r.ui.Show(plan.View)
	}
	if err != nil {
		return plan, plan.Result, "", err
	}
	if plan.Apply == nil {
		return plan, plan.Result, "", plan.Partial
	}
	if r.fx.DryRun() {
		if !plan.Change {
			return plan, plan.Result, "", skip("dry run: %s", plan.DryRun)
		}
		r.planned[s.Params.Action()] = true
		return plan, plan.Result, "dry run: " + plan.DryRun, plan.Partial
	}
	if plan.Change {
		if err := r.confirm(ctx, s, plan); err != nil {
			return plan, plan.Result, "", err
		}
		// The plan may be minutes old: what it acts on is read again.
		if err := r.stillSo(ctx, s, plan.Facts); err != nil {
			return plan, plan.Result, "", err
		}
		// No change whose record cannot be written (stdout or stderr failing).
		if err := outputFailing(r.ui); err != nil {
			return plan, plan.Result, "", err
		}
		apply := Entry{Kind: "apply", Step: s.Name, Action: s.Action(), Undo: plan.Undo, Facts: factLines(plan.Facts)}
		if plan.Record != nil {
			if apply.Data, err = json.Marshal(plan.Record); err != nil {
				return plan, plan.Result, "", fmt.Errorf("journal: %w", err)
			}
		}
		if err := r.journal.Append(apply); err != nil {
			return plan, plan.Result, "", fmt.Errorf("journal: %w", err)
		}
		apply.Time = time.Now()
		r.applies = append(r.applies, apply)
	}
	out, err := plan.Apply(ctx)
	if out == nil {
		out = plan.Result
	}
	if plan.Change && noneApplied(err) {
		r.unapply(s, err)
	}
	if plan.Change && r.lock.deferred && ctx.Err() == nil {
		// etcd may take writes again now.
		if lerr := r.takeDeferredLock(ctx); lerr != nil {
			r.warn("the cluster lock: " + lerr.Error())
		}
	}
	return plan, out, "", err
}

// confirm holds a change to the lock and asks for it: the lock is checked
// before the question and again after the answer (it may take minutes).
func (r *run) confirm(ctx context.Context, s Step, plan *Plan) error {
	if err := r.lockBeforeChange(ctx); err != nil {
		return err
	}
	if !s.Confirm || len(plan.Ask) == 0 {
		return nil
	}
	for _, q := range plan.Ask {
		if err := r.ui.Confirm(ctx, q); err != nil {
			return err
		}
	}
	return r.lockBeforeChange(ctx)
}

// judge decides what a step's error means for the step (its outcome and
// message, as the result and the journal say them) and for the run: a
// non-nil return ends it with that error.
func (r *run) judge(ctx context.Context, s Step, plan *Plan, err error, sr *StepResult, end *Entry) error {
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
		r.undone = append(r.undone, r.finishCommand(s, plan, err))
		return nil
	case declined && s.Optional:
		set(OutcomeSkipped, "declined at the confirmation: "+err.Error())
		end.Message = sr.Message
		return nil
	case errors.Is(err, ErrAborted) || ctx.Err() != nil:
		err = r.stopped(ctx, err)
		set(OutcomeAborted, err.Error())
		return err
	case errors.Is(err, errNothingToRecover), isStop(err):
		// The diagnosis found nothing this runbook can fix: stop before
		// any change. A healthy cluster is a success.
		sr.Message, end.Message = err.Error(), err.Error()
		return err
	case s.Requested:
		set(OutcomeFailed, err.Error())
		r.undone = append(r.undone, r.finishCommand(s, plan, err))
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

// finishCommand is the command that does what a requested step left
// undone: the plan's own, or continuing the incident.
func (r *run) finishCommand(s Step, plan *Plan, err error) string {
	if plan != nil && plan.Finish != "" {
		return fmt.Sprintf("step %s failed (%s); finish it with: %s", s.Name, shortErr(err), plan.Finish)
	}
	return fmt.Sprintf("step %s failed (%s); run it again with: %s", s.Name, shortErr(err), r.target.Cmd("resume "+r.journal.ID))
}

// undoneError is a run that did everything but something the operator
// asked for: a partial failure.
type undoneError struct{ undone []string }

func (e *undoneError) Error() string {
	return "the recovery completed, but not everything asked for was done:\n" + strings.Join(e.undone, "\n")
}

func (e *undoneError) Unwrap() error { return ErrPartial }

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

// reverting tells whether this run is a revert.
func (r *run) reverting() bool { return r.opts.Command == "revert" }

// undos are what can be done about each change the incident applied,
// oldest first, once each.
func (r *run) undos() []Undo {
	var out []Undo
	for _, e := range r.appliedChanges() {
		if u := undoOf(e); !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// notUndone are the incident's changes a revert leaves: those nothing
// undoes, and those undone only when asked (--objects) and not asked.
func (r *run) notUndone() []Undo {
	var out []Undo
	for _, u := range r.undos() {
		switch {
		case u.By == "" && u.Lost == "":
		case u.By == "" || !slices.ContainsFunc(r.opts.Steps, func(s Step) bool { return s.Params.Action() == u.By }):
			out = append(out, u)
		}
	}
	return out
}

// next names what the operator should run after this run: only commands
// that can do what they say.
func (r *run) next(res *RecoverResult, runErr error) []string {
	id := r.journal.ID
	var out []string
	if stop, ok := stopNext(runErr); ok {
		return stop
	}
	switch {
	case res.Outcome == "nothing-to-do":
		return []string{"nothing was changed; check the webhooks anyway: " + r.target.NodesCmd("audit --from-etcd")}
	case r.opts.DryRun && r.journal.Path() == "":
		out = append(out, "nothing was written, not even the journal; run it for real: "+r.opts.CommandLine)
	case r.opts.DryRun:
		out = append(out, "run it for real: "+orDefault(r.opts.CommandLine, "the same command without --dry-run"))
	case len(r.undone) > 0:
		out = append(out, r.undone...)
	case isMoved(runErr):
		m, _ := moved(runErr)
		out = append(out, m.Hints()...)
	case runErr != nil && !r.changed():
		// Refused or failed before any change was applied (the lock held by
		// someone else, preflight, diagnose, a declined confirmation).
		out = append(out, "nothing was changed; once the cause is dealt with, run it again or continue it: "+r.target.Cmd("resume "+id))
	case runErr != nil && r.reverting():
		out = append(out, "run the revert again once the cause is dealt with: "+r.opts.CommandLine)
	case runErr != nil:
		out = append(out, "continue from where it stopped: "+r.target.Cmd("resume "+id))
		out = append(out, r.undoOffers()...)
	case r.reverting():
		for _, u := range r.notUndone() {
			out = append(out, "not undone: "+u.String())
		}
	}
	if r.lock.deferred && r.changed() && !r.opts.DryRun {
		out = append(out, "WARNING: the cluster lock was never taken (etcd refused the write that takes it): make sure nobody else ran breakglass on this cluster meanwhile")
	}
	if r.journal.Path() != "" {
		out = append(out, "timeline for the postmortem: breakglass journal timeline "+id+" --format markdown")
	}
	d := r.decision()
	if t := d.incidentType(); t != nil && t.Advice != nil && !r.opts.DryRun && !r.reverting() {
		out = append(out, t.Advice(r, d, runErr)...)
	}
	return out
}

// undoOffers say what revert can do about the incident's changes, and
// what nothing can undo.
func (r *run) undoOffers() []string {
	var out, whats, asked []string
	for _, u := range r.undos() {
		switch {
		case u.By != "" && u.Asked != "":
			asked = append(asked, u.Asked)
			out = append(out, "or undo it ("+u.What+"): "+r.target.Cmd("revert "+r.journal.ID)+" "+u.Asked)
		case u.By != "":
			whats = append(whats, u.What)
		case u.Lost != "":
			out = append(out, u.String())
		}
	}
	if len(whats) > 0 {
		out = append([]string{"or undo what this incident changed (" + strings.Join(whats, "; ") + "): " + r.target.Cmd("revert "+r.journal.ID)}, out...)
	}
	return out
}

func (r *run) close(ctx context.Context) {
	if r.claimed {
		r.unclaim()
	}
	if r.lock.held != nil {
		_ = r.lock.held.Release(ctx)
	}
	if r.ec != nil {
		_ = r.ec.Close()
	}
}

// undoOf is what an apply record says can be done about its change; a
// record from before changes said it gets what its action always allowed.
func undoOf(e Entry) Undo {
	if e.Undo != nil {
		return *e.Undo
	}
	switch runbooks.Action(e.Action) {
	case runbooks.ActionAdmissionDisable:
		return *undoneBy(runbooks.ActionAdmissionRestore, "disable admission plugins")
	case runbooks.ActionExtraArgsRemove:
		return *undoneBy(ActionExtraArgsRestore, "take flags out of cluster.apiServer.extraArgs")
	case runbooks.ActionEtcdDelete:
		u := undoneBy(ActionEtcdRestore, "remove objects from etcd")
		u.Asked = "--objects"
		return *u
	}
	return *nothingToUndo(e.Action, "it puts back or checks what an earlier change did")
}
