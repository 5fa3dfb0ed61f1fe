package recovery

// The steps that change the nodes' admission plugins: disable and restore,
// each planned by planDisable or planRestore (admission.go) and applied by
// the loop.

import (
	"context"
	"fmt"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	register((*run).disable)
	register((*run).restore)
}

// AdmissionResult is a disable or restore step: the plan, as executed.
type AdmissionResult struct {
	said
	Plan *AdmissionPlan
}

// JournalData keeps per node the action, hashes and outcome, never a config.
func (a *AdmissionResult) JournalData() any { return a.Plan.JournalData() }

func (r *run) disable(ctx context.Context, _ Step, p *runbooks.AdmissionDisableParams) (*Plan, error) {
	opts := r.admissionOptions()
	opts.Plugins, opts.RevertAfter = p.Plugins, p.RevertAfter.Std() // a diagnosis's decision filled them
	plan, err := planDisable(ctx, r.tc, r.st, opts)
	if plan == nil {
		return nil, err
	}
	return r.admissionPlan(plan, err, nil)
}

func (r *run) restore(ctx context.Context, _ Step, _ *runbooks.AdmissionRestoreParams) (*Plan, error) {
	if r.opts.KeepDisabled {
		return nil, skip("--keep-disabled: the plugins stay disabled; restore later with: %s", r.target.NodesCmd("admission restore"))
	}
	if r.planned[runbooks.ActionAdmissionDisable] {
		// This dry run's disable recorded nothing: there is no record to plan from.
		return nil, skip("dry run: the disable above was planned, not applied, so nothing is recorded to put back yet; a real run puts back on every node the values its disable records")
	}
	opts := r.admissionOptions()
	opts.Plugins = r.opts.Plugins // without a record: remove just these
	plan, err := planRestore(ctx, r.tc, r.st, opts)
	if plan == nil {
		return nil, err
	}
	var drop func() error
	if err == nil && len(plan.restoredRecords()) > 0 {
		drop = func() error { return r.dropRestoredRecords(plan) }
	}
	return r.admissionPlan(plan, err, drop)
}

// dropRestoredRecords removes leftover records of restores that took
// effect (see AdmissionPlan.DropRestoredRecords), saying so.
func (r *run) dropRestoredRecords(p *AdmissionPlan) error {
	nodes, err := p.DropRestoredRecords(r.st)
	for _, n := range nodes {
		r.progress(n, "the config is already what it was before the disable: removed the leftover record of an interrupted restore")
	}
	return err
}

func (r *run) admissionOptions() AdmissionOptions {
	return AdmissionOptions{Wait: !r.opts.NoWait, KubeletRestart: !r.opts.NoWait && !r.opts.NoKubeletRestart, WaitTimeout: orDuration(time.Duration(r.opts.WaitTimeout), runbooks.DefaultWait), DryRun: r.fx.DryRun(),
		AllowPendingChange: r.opts.AllowPendingChange, ToolVersion: r.opts.ToolVersion, Progress: r.progress, Target: r.target}
}

// admissionPlan is the step's plan of an admission change: shown, asked,
// then executed on every node at once. drop, when set, first removes the
// records of restores that took effect.
func (r *run) admissionPlan(p *AdmissionPlan, planErr error, drop func() error) (*Plan, error) {
	res := &AdmissionResult{Plan: p}
	plan := &Plan{View: AdmissionView(p), Result: res}
	if planErr != nil {
		return plan, planErr
	}
	// A node that cannot be planned is not left behind silently: a
	// recovery stops here. A standalone change does the other nodes and
	// ends as a partial failure naming it.
	unplanned := p.PlanErr()
	if unplanned != nil && !r.opts.standalone() {
		return plan, unplanned
	}
	plan.Partial = unplanned
	if !p.Changes() {
		res.said = said("nothing to change: " + p.Nodes[0].Reason)
		if drop != nil {
			plan.Change, plan.DryRun = true, "the leftover records of restores that took effect would be removed"
			plan.Undo = nothingToUndo("remove breakglass's leftover records", "the configs are already what they were")
			plan.Apply = func(context.Context) (Result, error) { return res, drop() }
		}
		return plan, nil
	}
	plan.Change = true
	plan.Undo = admissionUndo(p)
	plan.Ask = []Question{{Text: fmt.Sprintf("%s on %d node(s)?", p.Operation, p.CountChanges())}}
	plan.DryRun = "the nodes validated the change; nothing was applied"
	plan.Apply = func(ctx context.Context) (Result, error) {
		if drop != nil {
			if err := drop(); err != nil {
				return res, err
			}
		}
		if err := p.execute(ctx, r.fx.Nodes, r.tc, r.st); err != nil {
			return res, err
		}
		res.said = said(fmt.Sprintf("%s applied on %d node(s); kube-apiserver runs with disable-admission-plugins=%s", p.Operation, p.CountChanges(), ListOrNone(p.Nodes[0].DisabledAfter)))
		return res, nil
	}
	return plan, nil
}

// admissionUndo is what can be done about a disable or restore: a disable
// is undone by a restore; a restore puts back what a disable changed.
func admissionUndo(p *AdmissionPlan) *Undo {
	if p.Operation == "disable" {
		return undoneBy(runbooks.ActionAdmissionRestore, fmt.Sprintf("disable %s on %d node(s)", ListOrNone(p.opts.Plugins), p.CountChanges()))
	}
	return nothingToUndo("put the admission plugins back", "it undoes a disable")
}
