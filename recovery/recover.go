package recovery

// The guided operations: recover (a new incident), resume and revert (an
// existing one). Each is a run of the engine's loop (engine.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

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
	for _, g := range opts.NodesGone {
		if slices.Contains(tc.Nodes(), g) {
			return nil, failure.Input("name it in one of them", "%s is both in -n and in --nodes-gone", g)
		}
	}
	if err := checkGone(ctx, tc, opts.NodesGone, "recover"); err != nil {
		return nil, err
	}
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

// Revert undoes what an incident changed, on the nodes it recorded: each
// change its apply records say revert can undo (the admission plugins and
// the flags put back exactly as recorded, a colleague's later edit kept;
// with o.Objects, every object the incident removed from etcd restored from
// its verified backup, create-only). What nothing can undo is said, with
// what stands instead; a revert that can undo nothing is refused, and one
// that leaves something not undone does not close the incident.
func Revert(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, o IncidentOptions) (*RecoverResult, error) {
	j, entries, err := st.openFor(o.ID, fx)
	if err != nil {
		return nil, err
	}
	meta := j.Meta()
	etcdOpts := o.Etcd
	if etcdOpts.defaultConnection() {
		// Reach etcd (the lock, removed objects) the way the incident did
		// when not told otherwise.
		var orig RecoverOptions
		if json.Unmarshal(meta.Options, &orig) == nil && !orig.Etcd.defaultConnection() {
			etcdOpts.Endpoints, etcdOpts.CACert, etcdOpts.Cert, etcdOpts.Key = orig.Etcd.Endpoints, orig.Etcd.CACert, orig.Etcd.Cert, orig.Etcd.Key
		}
	}
	opts := RecoverOptions{Runbook: "revert", DryRun: fx.DryRun(), Etcd: etcdOpts, ToolVersion: o.ToolVersion, Command: "revert"}
	var orig RecoverOptions
	if json.Unmarshal(meta.Options, &orig) == nil {
		opts.NoKubeletRestart = orig.NoKubeletRestart // the kubelets as the incident chose
	}
	r := newRun(tc, st, fx, ui, opts, j, entries)
	r.done = map[string]bool{} // a revert runs its steps again each time
	if err := r.bind(ctx, o, "revert"); err != nil {
		r.close(ctx)
		j.Close()
		return nil, err
	}
	undos := r.undos()
	for _, s := range undoSteps {
		if slices.ContainsFunc(undos, func(u Undo) bool { return u.By == s.Params.Action() && (u.Asked == "" || o.Objects) }) {
			r.opts.Steps = append(r.opts.Steps, s)
		}
	}
	if len(r.opts.Steps) == 0 {
		r.close(ctx)
		j.Close()
		return nil, nothingToRevert(meta, entries, undos, o.Objects)
	}
	r.opts.CommandLine = r.target.Cmd("revert " + j.ID)
	if o.Objects {
		r.opts.CommandLine += " --objects"
	}
	for _, u := range r.notUndone() {
		r.warn("revert leaves this as it is: " + u.String())
	}
	if err := j.Append(Entry{Kind: "note", Message: fmt.Sprintf("revert started by %s", whoami())}); err != nil {
		return nil, err
	}
	return r.execute(ctx)
}

// undoSteps are the steps a revert runs, in this order, each for the
// changes its action undoes.
var undoSteps = []Step{
	{Name: "revert-admission", Params: &runbooks.AdmissionRestoreParams{}, Confirm: true,
		Description: "Put disable-admission-plugins and enable-admission-plugins back to the values recorded before the incident."},
	{Name: "revert-flags", Params: &ExtraArgsRestoreParams{}, Confirm: true,
		Description: "Put the flags this incident took out back into today's cluster.apiServer.extraArgs. kube-apiserver refused them: it will crash-loop again."},
	{Name: "revert-objects", Params: &EtcdRestoreParams{}, Confirm: true,
		Description: "Put back the objects this incident removed from etcd, from their verified backups, only where absent."},
}

// nothingToRevert refuses a revert of an incident that changed nothing
// revert can undo, saying what it changed and what to do instead.
func nothingToRevert(meta IncidentMeta, entries []Entry, undos []Undo, objects bool) error {
	t := Target{Context: meta.Context}
	var hints, said []string
	for _, u := range undos {
		if u.Asked != "" && !objects {
			hints = append(hints, "undo it: "+t.Cmd("revert "+meta.ID)+" "+u.Asked)
		}
		said = append(said, u.String())
	}
	if _, state := incidentState(entries); !finished(state) {
		hints = append(hints, "continue it instead: "+t.Cmd("resume "+meta.ID))
	}
	if len(said) == 0 {
		return failure.Hinted(failure.Input("", "incident %s changed nothing: there is nothing to revert", meta.ID), hints...)
	}
	return failure.Hinted(failure.Input("", "incident %s changed nothing revert can undo, nothing was changed: %s", meta.ID, strings.Join(said, "; ")), hints...)
}

// standaloneNext is what resume says to do instead for a standalone change:
// run the same command again (each is idempotent), or undo it.
func standaloneNext(meta IncidentMeta, id string) string {
	t := Target{Context: meta.Context, Nodes: meta.Nodes}
	switch meta.Runbook {
	case standaloneDisable:
		return "run it again (it is idempotent): " + t.NodesCmd("admission disable") + "; or undo it: " + t.Cmd("revert "+id)
	case standaloneRestore:
		return "run it again (it is idempotent): " + t.NodesCmd("admission restore")
	case standaloneDelete:
		return "run it again (it is idempotent): " + t.NodesCmd("etcd delete NAME...") + "; or put the objects back: " + t.Cmd("revert "+id+" --objects")
	case standaloneEtcdRestore:
		return "run it again (it is idempotent): " + t.NodesCmd("etcd restore FILE")
	}
	return "see what it did: breakglass journal show " + id
}
