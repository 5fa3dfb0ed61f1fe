package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// UI is how a guided recovery talks to the operator: the command supplies
// a terminal (spinner, prompts) or plain lines for automation.
type UI interface {
	Begin(index, total int, s Step)
	End(s Step, outcome string, elapsed time.Duration, message string)
	Progress(node, msg string)
	Show(text string) // a plan to read before a confirmation
	Confirm(ctx context.Context, question string) error
	ConfirmTyped(ctx context.Context, question, word string) error
}

// RecoverOptions are what the operator asked for; they are stored in the
// incident record so that a resume continues the same way.
type RecoverOptions struct {
	Runbook      string `json:"runbook"`
	Steps        []Step `json:"steps"` // the runbook's, with the command line's overrides
	KeepDisabled bool   `json:"keepDisabled,omitempty"`
	// AllowPendingChange: apply even over someone else's pending TRY or STAGED change.
	AllowPendingChange bool `json:"allowPendingChange,omitempty"`
	// PluginsExplicit, RunbookExplicit: --plugins or --runbook was given;
	// otherwise the diagnosis decides (see Decision).
	PluginsExplicit bool `json:"pluginsExplicit,omitempty"`
	RunbookExplicit bool `json:"runbookExplicit,omitempty"`
	// Delete names admission objects to remove (recover --delete), of any
	// kind unless DeleteKind says; they are resolved in etcd during
	// preflight, before anything changes.
	Delete     []string `json:"delete,omitempty"`
	DeleteKind string   `json:"deleteKind,omitempty"`
	// NoWait, WaitTimeout: after an admission change, whether and how long
	// to wait for kube-apiserver to run with the new flags.
	NoWait      bool     `json:"noWait,omitempty"`
	WaitTimeout Duration `json:"waitTimeout,omitempty"`
	// Plugins: restore without a record removes just these.
	Plugins []string `json:"plugins,omitempty"`
	// BackupDir, Snapshot (etcd delete), ForceCluster (etcd restore): the
	// standalone etcd changes' options.
	BackupDir    string      `json:"backupDir,omitempty"`
	Snapshot     bool        `json:"snapshot,omitempty"`
	ForceCluster bool        `json:"forceCluster,omitempty"`
	DryRun       bool        `json:"dryRun,omitempty"` // chosen by the run's Effects
	Etcd         EtcdOptions `json:"etcd"`
	ToolVersion  string      `json:"toolVersion"`
	Command      string      `json:"command"` // recover, resume, revert: for the lock and the journal
}

// StepResult is the outcome of one step.
type StepResult struct {
	Name    string   `json:"name"`
	Action  string   `json:"action"`
	Outcome string   `json:"outcome"`
	Message string   `json:"message,omitempty"`
	Elapsed Duration `json:"elapsed"`
	// Result is what the step did, typed by its action (for example
	// *AdmissionResult): the command that ran one step renders it.
	Result Result `json:"-"`
}

// RecoverResult is the whole run.
type RecoverResult struct {
	Incident string       `json:"incident"`
	Journal  string       `json:"journal"`
	DryRun   bool         `json:"dryRun"`
	Steps    []StepResult `json:"steps"`
	Outcome  string       `json:"outcome"` // completed, nothing-to-do, stopped, partial, failed, aborted
	// Decision is the plan the diagnosis fixed (plugins and why).
	Decision *Decision `json:"decision,omitempty"`
	// Undone lists what the operator asked for and the run could not do,
	// each with the command that finishes it.
	Undone  []string `json:"undone,omitempty"`
	Elapsed Duration `json:"elapsed"`
	Next    []string `json:"next,omitempty"` // the commands to run next
}

// errSkip ends a step as skipped, with the reason as its message.
type errSkip struct{ reason string }

func (e errSkip) Error() string { return e.reason }

func skip(format string, args ...any) error { return errSkip{fmt.Sprintf(format, args...)} }

// run is the state of one run of the engine.
type run struct {
	tc      *talos.Client
	st      State
	fx      Effects
	ui      UI
	opts    RecoverOptions
	journal *Journal
	ec      *etcd.Client
	lock    *etcd.Lock
	cluster string
	done    map[string]bool // steps completed in an earlier run (resume)
	touched bool            // a step that changes the cluster began in this run
	claimed bool            // this process wrote the incident's lock.pid
	entries []Entry         // the journal so far (resume, revert)
	// decision is what the diagnosis fixed (this run's, or the one an
	// earlier run of the incident journaled).
	decision *Decision
	undone   []string // requested steps that failed: what is left, with the command
}

// Recover runs a guided recovery: each step says what it will do and why,
// asks before changing anything, and is journaled before and after.
func Recover(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, opts RecoverOptions) (*RecoverResult, error) {
	if len(opts.Steps) == 0 {
		return nil, invalidInput("", "the runbook %q has no steps", opts.Runbook)
	}
	steps, err := withRequestedDeletes(opts.Steps, opts.Delete, opts.DeleteKind, opts.Runbook)
	if err != nil {
		return nil, err
	}
	opts.Steps, opts.DryRun = steps, fx.DryRun()
	r := &run{tc: tc, st: st, fx: fx, ui: ui, opts: opts, done: map[string]bool{}}
	rawOpts, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	cluster := clusterName(ctx, tc)
	if ctx.Err() != nil {
		// Interrupted while still connecting: no incident is opened.
		return nil, fmt.Errorf("%w before the incident was opened: nothing was changed", context.Cause(ctx))
	}
	j, err := st.NewIncident(IncidentMeta{Cluster: cluster, Nodes: tc.Nodes(), Runbook: opts.Runbook, Options: rawOpts, ToolVersion: opts.ToolVersion, DryRun: opts.DryRun}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create the incident journal: %w", err)
	}
	r.journal = j
	return r.execute(ctx)
}

// defaultConnection: no endpoints nor certificates given.
func (o EtcdOptions) defaultConnection() bool {
	return len(o.Endpoints) == 0 && o.CACert == "" && o.Cert == "" && o.Key == ""
}

// clusterName is the cluster's name from the first node's machine config,
// for the incident record (where it happened); "" when it cannot be read
// quickly: preflight then says why.
func clusterName(ctx context.Context, tc *talos.Client) string {
	nodes := tc.Nodes()
	if len(nodes) == 0 || !tc.CanApply() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	mc, err := tc.ReadMachineConfig(ctx, nodes[0])
	if err != nil {
		return ""
	}
	facts, err := talos.ReadFacts(mc.Bytes)
	if err != nil {
		return ""
	}
	return facts.ClusterName
}

// Resume continues an interrupted incident from its last completed step,
// with the options it was started with.
func Resume(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, id string) (*RecoverResult, error) {
	if id == "" {
		var err error
		if id, err = st.resumable(); err != nil {
			return nil, err
		}
	}
	j, entries, err := st.OpenIncident(id)
	if err != nil {
		return nil, err
	}
	var opts RecoverOptions
	if standalone(j.Meta()) {
		// A standalone change (admission disable, etcd delete, ...) journaled
		// as an incident of one step: it has no runbook to continue, but it
		// is idempotent, and revert undoes it.
		return nil, invalidInput(standaloneNext(j.Meta().Runbook, j.ID),
			"incident %s is a standalone %s: there is nothing to resume", j.ID, orDefault(j.Meta().Runbook, "change"))
	}
	if err := json.Unmarshal(j.Meta().Options, &opts); err != nil {
		return nil, fmt.Errorf("incident %s: cannot read its options: %w", j.ID, err)
	}
	if _, state := incidentState(entries); finished(state) {
		return nil, invalidInput("see it with: breakglass journal show "+j.ID, "incident %s has nothing to resume: it ended %s", j.ID, state)
	}
	opts.DryRun = fx.DryRun()
	r := &run{tc: tc, st: st, fx: fx, ui: ui, opts: opts, journal: j, done: CompletedSteps(entries), entries: entries, decision: decisionFrom(entries)}
	if err := j.Append(Entry{Kind: "note", Message: fmt.Sprintf("resumed by %s; completed steps are not run again", whoami())}); err != nil {
		return nil, err
	}
	return r.execute(ctx)
}

// Revert undoes what an incident changed: it puts the admission plugins
// back as recorded and, when objects is set, restores the objects the
// incident removed from etcd from their verified backups (create-only:
// an object someone re-created meanwhile is left alone and reported).
func Revert(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, id string, objects bool, etcdOpts EtcdOptions, toolVersion string) (*RecoverResult, error) {
	j, entries, err := st.OpenIncident(id)
	if err != nil {
		return nil, err
	}
	steps := []Step{{Name: "revert-admission", Params: &runbooks.AdmissionRestoreParams{}, Confirm: true,
		Description: "Put disable-admission-plugins and enable-admission-plugins back to the values recorded before the incident."}}
	if objects {
		steps = append(steps, Step{Name: "revert-objects", Params: &EtcdRestoreParams{}, Confirm: true,
			Description: "Put back the objects this incident removed from etcd, from their verified backups, only where absent."})
	}
	if etcdOpts.defaultConnection() {
		// Reach etcd (the lock, removed objects) the way the incident did
		// when not told otherwise.
		var orig RecoverOptions
		if json.Unmarshal(j.Meta().Options, &orig) == nil && !orig.Etcd.defaultConnection() {
			etcdOpts.Endpoints, etcdOpts.CACert, etcdOpts.Cert, etcdOpts.Key = orig.Etcd.Endpoints, orig.Etcd.CACert, orig.Etcd.Cert, orig.Etcd.Key
		}
	}
	opts := RecoverOptions{Runbook: "revert", Steps: steps, DryRun: fx.DryRun(), Etcd: etcdOpts, ToolVersion: toolVersion, Command: "revert"}
	r := &run{tc: tc, st: st, fx: fx, ui: ui, opts: opts, journal: j, done: map[string]bool{}, entries: entries}
	if err := j.Append(Entry{Kind: "note", Message: fmt.Sprintf("revert started by %s", whoami())}); err != nil {
		return nil, err
	}
	return r.execute(ctx)
}

func (r *run) execute(ctx context.Context) (*RecoverResult, error) {
	defer r.journal.Close()
	defer r.close(ctx)
	start := time.Now()
	res := &RecoverResult{Incident: r.journal.ID, Journal: filepath.Join(r.journal.Dir, "journal.jsonl"), DryRun: r.opts.DryRun}
	if r.fx.Lock && !r.willRun("preflight") {
		// A resume whose preflight completed earlier, or a revert, changes
		// the cluster too: it takes the lock here, before any step.
		if err := r.lockBeforeSteps(ctx); err != nil {
			_ = r.journal.Append(Entry{Kind: "note", Message: "not run: " + err.Error()})
			return nil, err
		}
	}
	var runErr error
	for i, s := range r.opts.Steps {
		if r.done[s.Name] {
			res.Steps = append(res.Steps, StepResult{Name: s.Name, Action: s.Action(), Outcome: OutcomeSkipped, Message: "completed in an earlier run"})
			continue
		}
		r.ui.Begin(i+1, len(r.opts.Steps), r.decision.described(s, r.opts.Steps))
		r.touched = r.touched || changesCluster(s.Action())
		if err := r.journal.Append(Entry{Kind: "begin", Step: s.Name, Action: s.Action(), Message: s.Description}); err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		t0 := time.Now()
		out, err := r.step(ctx, s)
		msg := ""
		if out != nil {
			msg = out.Message()
		}
		sr := StepResult{Name: s.Name, Action: s.Action(), Outcome: OutcomeOK, Message: msg, Elapsed: elapsedSince(t0), Result: out}
		end := Entry{Kind: "end", Step: s.Name, Action: s.Action(), Outcome: OutcomeOK, Message: msg, Elapsed: sr.Elapsed, Data: journalData(out)}
		var sk errSkip
		var stop *NotDeadlockError
		switch {
		case err == nil:
		case errors.As(err, &sk):
			sr.Outcome, sr.Message = OutcomeSkipped, sk.reason
			end.Outcome, end.Message = OutcomeSkipped, sk.reason
		case errors.Is(err, ErrAborted) || ctx.Err() != nil:
			if !errors.Is(err, ErrAborted) {
				err = fmt.Errorf("%w: %w", ErrAborted, err) // interrupted mid-call: the node's error says canceled
			}
			if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%v)", err, cause) // the journal says interrupted, and by what
			}
			sr.Outcome, end.Outcome, end.Error = OutcomeAborted, OutcomeAborted, err.Error()
			sr.Message = err.Error()
			runErr = err
		case errors.Is(err, errNothingToRecover), errors.As(err, &stop):
			// The diagnosis found nothing this runbook can fix: stop before
			// any change. A healthy cluster is a success.
			sr.Message, end.Message = err.Error(), err.Error()
			runErr = err
		case s.Requested:
			// Asked for by name, so never optional; but the plugins must still
			// be put back: go on, and end as a partial failure.
			sr.Outcome, end.Outcome, end.Error = OutcomeFailed, OutcomeFailed, err.Error()
			sr.Message = err.Error()
			r.undone = append(r.undone, r.finishCommand(s, err))
		case s.Optional:
			// An optional step may fail without failing the run; it says so.
			sr.Outcome, sr.Message = OutcomeSkipped, "optional step failed: "+err.Error()
			end.Outcome, end.Message, end.Error = OutcomeSkipped, sr.Message, err.Error()
		default:
			sr.Outcome, end.Outcome, end.Error = OutcomeFailed, OutcomeFailed, err.Error()
			sr.Message = err.Error()
			runErr = err
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
	var stop *NotDeadlockError
	switch {
	case errors.Is(runErr, ErrAborted) || ctx.Err() != nil:
		res.Outcome = "aborted"
	case errors.Is(runErr, errNothingToRecover):
		res.Outcome, runErr = "nothing-to-do", nil
	case errors.As(runErr, &stop):
		res.Outcome = "stopped"
	case runErr != nil:
		res.Outcome = "failed"
	case len(r.undone) > 0:
		res.Outcome = "partial"
		runErr = &undoneError{undone: r.undone}
	}
	res.Undone = r.undone
	res.Next = r.next(res, runErr)
	_ = r.journal.Append(Entry{Kind: "finish", Outcome: res.Outcome, Elapsed: res.Elapsed, Message: strings.Join(res.Next, "; ")})
	return res, runErr
}

// touchedBefore tells whether an earlier run of the incident began a step
// that changes the cluster.
func touchedBefore(entries []Entry) bool {
	for _, e := range entries {
		if e.Kind == "begin" && changesCluster(e.Action) {
			return true
		}
	}
	return false
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
		return []string{"nothing was changed; check the webhooks anyway: breakglass audit --from-etcd"}
	case r.opts.DryRun:
		out = append(out, "run it for real: the same command without --dry-run")
	case len(r.undone) > 0:
		out = append(out, r.undone...)
	case runErr != nil && !r.touched && !touchedBefore(r.entries):
		// Refused or failed before any step that changes the cluster began
		// (the lock held by someone else, preflight, diagnose): nothing to undo.
		out = append(out, "nothing was changed; once the cause is dealt with, run it again or continue it: breakglass resume "+id)
	case runErr != nil:
		out = append(out, "continue from where it stopped: breakglass resume "+id,
			"or undo what this incident changed: breakglass revert "+id)
	case r.opts.KeepDisabled:
		out = append(out, "admission plugins are still disabled (--keep-disabled): put them back with: breakglass admission restore")
	}
	out = append(out, "timeline for the postmortem: breakglass journal timeline "+id+" --format markdown")
	if !r.opts.DryRun && runErr == nil {
		out = append(out, "prevent a repeat: breakglass audit --from-etcd --fix")
	}
	return out
}

func (r *run) close(ctx context.Context) {
	if r.claimed {
		_ = os.Remove(r.lockPIDPath())
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

// step runs one step by its action's executor.
func (r *run) step(ctx context.Context, s Step) (Result, error) {
	ex, ok := executors[s.Params.Action()]
	if !ok {
		return nil, invalidInput("see the actions with: breakglass runbook show webhook-deadlock", "unknown action %q in step %s", s.Action(), s.Name)
	}
	return ex.run(ctx, r, s)
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
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
