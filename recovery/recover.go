package recovery

// The guided operations: recover (a new incident), resume and revert (an
// existing one). Each is a run of the engine's loop (engine.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

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
	// CommandLine is the command as typed, without --dry-run: what a dry
	// run says to run for real.
	CommandLine string `json:"commandLine,omitempty"`
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
	Incident string `json:"incident"`
	// Journal is the journal file this run wrote; "" when it wrote none (a
	// dry run of an existing incident).
	Journal string       `json:"journal"`
	DryRun  bool         `json:"dryRun"`
	Steps   []StepResult `json:"steps"`
	Outcome string       `json:"outcome"` // completed, nothing-to-do, stopped, partial, failed, aborted
	// Decision is the plan the diagnosis fixed (plugins and why).
	Decision *Decision `json:"decision,omitempty"`
	// Undone lists what the operator asked for and the run could not do,
	// each with the command that finishes it.
	Undone []string `json:"undone,omitempty"`
	// LeftBehind names the incident's nodes the operator said are gone
	// (--nodes-gone), and what of them the state directory still holds.
	LeftBehind []string `json:"leftBehind,omitempty"`
	Elapsed    Duration `json:"elapsed"`
	Next       []string `json:"next,omitempty"` // the commands to run next
}

// Recover runs a guided recovery: each step says what it will do and why,
// asks before changing anything, and is journaled before and after.
func Recover(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, opts RecoverOptions) (*RecoverResult, error) {
	if len(opts.Steps) == 0 {
		return nil, failure.Input("", "the runbook %q has no steps", opts.Runbook)
	}
	steps, err := withRequestedDeletes(opts.Steps, opts.Delete, opts.DeleteKind, opts.Runbook)
	if err != nil {
		return nil, err
	}
	opts.Steps, opts.DryRun = steps, fx.DryRun()
	rawOpts, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	cluster := clusterName(ctx, tc)
	if ctx.Err() != nil {
		// Interrupted while still connecting: no incident is opened.
		return nil, fmt.Errorf("%w before the incident was opened: nothing was changed", context.Cause(ctx))
	}
	j, err := st.NewIncident(IncidentMeta{Cluster: cluster, Nodes: tc.Nodes(), Context: tc.ContextName(), Runbook: opts.Runbook,
		Options: rawOpts, ToolVersion: opts.ToolVersion, DryRun: opts.DryRun}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("create the incident journal: %w", err)
	}
	return newRun(tc, st, fx, ui, opts, j, nil).execute(ctx)
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
	_, facts, err := tc.ReadConfigFacts(ctx, nodes[0])
	if err != nil {
		return ""
	}
	return facts.ClusterName
}

// IncidentOptions say which incident a resume or revert works on, and what
// the command line said of its cluster.
type IncidentOptions struct {
	ID string // "" : resume the newest interrupted incident (revert: the newest)
	// Nodes and Context are -n and --context as given (empty: not given):
	// they must name the incident's own.
	Nodes   []string
	Context string
	// NodesGone are recorded nodes the operator says are gone for good
	// (--nodes-gone): left out, and said so.
	NodesGone []string
	// Objects (revert): also put back what the incident removed from etcd.
	Objects bool
	// Etcd (revert): how to reach etcd; default: as the incident did.
	Etcd        EtcdOptions
	ToolVersion string
}

// Resume continues an interrupted incident from its last completed step,
// with the options it was started with, on the nodes it recorded.
func Resume(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, o IncidentOptions) (*RecoverResult, error) {
	id := o.ID
	if id == "" {
		var err error
		if id, err = st.resumable(); err != nil {
			return nil, err
		}
	}
	j, entries, err := st.openFor(id, fx)
	if err != nil {
		return nil, err
	}
	meta := j.Meta()
	if standalone(meta) {
		// A standalone change (admission disable, etcd delete, ...) journaled
		// as an incident of one step: it has no runbook to continue, but it
		// is idempotent, and revert undoes it.
		j.Close()
		return nil, failure.Input(standaloneNext(meta, j.ID),
			"incident %s is a standalone %s: there is nothing to resume", j.ID, orDefault(meta.Runbook, "change"))
	}
	var opts RecoverOptions
	if err := json.Unmarshal(meta.Options, &opts); err != nil {
		j.Close()
		return nil, fmt.Errorf("incident %s: cannot read its options: %w", j.ID, err)
	}
	if _, state := incidentState(entries); finished(state) {
		j.Close()
		return nil, failure.Input("see it with: breakglass journal show "+j.ID, "incident %s has nothing to resume: it ended %s", j.ID, state)
	}
	opts.DryRun = fx.DryRun()
	r := newRun(tc, st, fx, ui, opts, j, entries)
	r.decision = decisionFrom(entries)
	r.followDecision()
	if err := r.bind(ctx, o, "resume"); err != nil {
		r.close(ctx)
		j.Close()
		return nil, err
	}
	r.opts.CommandLine = r.target.Cmd("resume " + j.ID)
	if err := j.Append(Entry{Kind: "note", Message: fmt.Sprintf("resumed by %s; completed steps are not run again", whoami())}); err != nil {
		return nil, err
	}
	return r.execute(ctx)
}

// Revert undoes what an incident changed, on the nodes it recorded: it
// puts the admission plugins back as recorded and, with o.Objects,
// restores every object the incident removed from etcd from its verified
// backup (create-only: an object someone re-created meanwhile is left
// alone and reported).
func Revert(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, o IncidentOptions) (*RecoverResult, error) {
	j, entries, err := st.openFor(o.ID, fx)
	if err != nil {
		return nil, err
	}
	meta := j.Meta()
	if meta.Runbook == standaloneLockBreak {
		j.Close()
		return nil, failure.Input("see it with: breakglass journal show "+j.ID, "incident %s is a standalone lock break: there is nothing to revert", j.ID)
	}
	steps := []Step{{Name: "revert-admission", Params: &runbooks.AdmissionRestoreParams{}, Confirm: true,
		Description: "Put disable-admission-plugins and enable-admission-plugins back to the values recorded before the incident."}}
	steps = append(steps, flagsRevertSteps(entries)...)
	if o.Objects {
		steps = append(steps, Step{Name: "revert-objects", Params: &EtcdRestoreParams{}, Confirm: true,
			Description: "Put back the objects this incident removed from etcd, from their verified backups, only where absent."})
	}
	etcdOpts := o.Etcd
	if etcdOpts.defaultConnection() {
		// Reach etcd (the lock, removed objects) the way the incident did
		// when not told otherwise.
		var orig RecoverOptions
		if json.Unmarshal(meta.Options, &orig) == nil && !orig.Etcd.defaultConnection() {
			etcdOpts.Endpoints, etcdOpts.CACert, etcdOpts.Cert, etcdOpts.Key = orig.Etcd.Endpoints, orig.Etcd.CACert, orig.Etcd.Cert, orig.Etcd.Key
		}
	}
	opts := RecoverOptions{Runbook: "revert", Steps: steps, DryRun: fx.DryRun(), Etcd: etcdOpts, ToolVersion: o.ToolVersion, Command: "revert"}
	r := newRun(tc, st, fx, ui, opts, j, entries)
	r.done = map[string]bool{} // a revert runs its steps again each time
	if err := r.bind(ctx, o, "revert"); err != nil {
		r.close(ctx)
		j.Close()
		return nil, err
	}
	r.opts.CommandLine = r.target.Cmd("revert " + j.ID)
	if o.Objects {
		r.opts.CommandLine += " --objects"
	}
	if err := j.Append(Entry{Kind: "note", Message: fmt.Sprintf("revert started by %s", whoami())}); err != nil {
		return nil, err
	}
	return r.execute(ctx)
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
