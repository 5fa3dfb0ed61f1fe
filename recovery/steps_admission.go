package recovery

// The executors that check the nodes, change their admission plugins and
// wait for the API server.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// PreflightResult: the nodes answered, are control planes, and the lock.
type PreflightResult struct {
	said
	Cluster  string   `json:"cluster"`
	Versions []string `json:"versions"`
	Role     string   `json:"role"`
	ToRemove []string `json:"toRemove,omitempty"`
	Lock     string   `json:"lock,omitempty"` // taken, not taken
}

func (r *run) preflight(ctx context.Context, _ Step, _ *runbooks.PreflightParams) (Result, error) {
	if err := r.tc.RequireAdmin("a guided recovery"); err != nil {
		return nil, err
	}
	res := &PreflightResult{Role: r.tc.Role()}
	for _, node := range r.tc.Nodes() {
		v, err := r.tc.Version(ctx, node)
		if err != nil {
			return nil, err
		}
		mc, err := r.tc.ReadMachineConfig(ctx, node)
		if err != nil {
			return nil, err
		}
		facts, err := talos.ReadFacts(mc.Bytes)
		if err != nil {
			return nil, talos.NewNodeError(node, "read machine config", err)
		}
		if !facts.IsControlPlane() {
			return nil, talos.NewNodeError(node, "check machine type", fmt.Errorf("%w (machine type %s)", talos.ErrNotControlPlane, facts.MachineType),
				"target only the control-plane nodes: -n CP1,CP2,CP3")
		}
		r.cluster = facts.ClusterName
		res.Versions = append(res.Versions, node+"="+v)
		r.progress(node, fmt.Sprintf("Talos %s, control plane of cluster %s, kube-apiserver image %s", v, facts.ClusterName, facts.APIServerImage))
	}
	res.Cluster = r.cluster
	msg := fmt.Sprintf("%d control-plane node(s) reachable, role %s", len(r.tc.Nodes()), r.tc.Role())
	found, err := r.checkRequestedDeletes(ctx)
	if err != nil {
		return res, err
	}
	if len(found) > 0 {
		res.ToRemove = found
		msg += "; found in etcd: " + strings.Join(found, ", ")
	}
	if !r.fx.Lock {
		if r.fx.DryRun() {
			msg += r.dryRunLockNote(ctx)
		}
		res.said = said(msg)
		return res, nil
	}
	warning, err := r.takeLock(ctx)
	if err != nil {
		return res, err
	}
	if warning != "" {
		res.Lock, res.said = "not taken", said(msg+"; cluster lock NOT taken (etcd unreachable)")
		return res, nil
	}
	res.Lock, res.said = "taken", said(msg+"; cluster lock taken")
	return res, nil
}

// AdmissionResult is a disable or restore step: the plan, as executed.
type AdmissionResult struct {
	said
	Plan *AdmissionPlan
}

// JournalData keeps per node the action, hashes and outcome, never a config.
func (a *AdmissionResult) JournalData() any { return a.Plan.JournalData() }

func (r *run) disable(ctx context.Context, s Step, p *runbooks.AdmissionDisableParams) (Result, error) {
	opts := r.admissionOptions()
	opts.Plugins, opts.RevertAfter = p.Plugins, p.RevertAfter.Std()
	if r.decision != nil {
		opts.Plugins = r.decision.Plugins // what the diagnosis fixed before the first change
	}
	plan, err := PlanDisable(ctx, r.tc, r.st, opts)
	if plan == nil {
		return nil, err
	}
	return r.applyPlan(ctx, s, plan, err)
}

func (r *run) restore(ctx context.Context, s Step, _ *runbooks.AdmissionRestoreParams) (Result, error) {
	if r.opts.KeepDisabled {
		return nil, skip("--keep-disabled: the plugins stay disabled; restore later with: breakglass admission restore")
	}
	if r.fx.DryRun() && !r.standalone() && r.opts.Command != "revert" {
		return nil, skip("dry run: the recorded values would be put back on every node (nothing was disabled, so there is nothing to restore yet)")
	}
	opts := r.admissionOptions()
	opts.Plugins = r.opts.Plugins // without a record: remove just these
	plan, err := PlanRestore(ctx, r.tc, r.st, opts)
	if plan == nil {
		return nil, err
	}
	if err == nil {
		if err := r.dropRestoredRecords(plan); err != nil {
			return nil, err
		}
	}
	return r.applyPlan(ctx, s, plan, err)
}

// dropRestoredRecords removes leftover records of restores that took
// effect (see AdmissionPlan.DropRestoredRecords), saying so.
func (r *run) dropRestoredRecords(p *AdmissionPlan) error {
	if r.fx.DryRun() {
		for _, n := range p.restoredRecords() {
			r.progress(n.Node, "the config is already what it was before the disable; its leftover record would be removed")
		}
		return nil
	}
	nodes, err := p.DropRestoredRecords(r.st)
	for _, n := range nodes {
		r.progress(n, "the config is already what it was before the disable: removed the leftover record of an interrupted restore")
	}
	return err
}

func (r *run) admissionOptions() AdmissionOptions {
	return AdmissionOptions{Wait: !r.opts.NoWait, WaitTimeout: orDuration(time.Duration(r.opts.WaitTimeout), runbooks.DefaultWait), DryRun: r.fx.DryRun(),
		AllowPendingChange: r.opts.AllowPendingChange, ToolVersion: r.opts.ToolVersion, Progress: r.progress}
}

// applyPlan shows a plan, asks, and executes it.
func (r *run) applyPlan(ctx context.Context, s Step, p *AdmissionPlan, planErr error) (Result, error) {
	var buf bytes.Buffer
	RenderAdmissionPlan(&buf, p)
	r.ui.Show(buf.String())
	res := &AdmissionResult{Plan: p}
	if planErr != nil {
		return res, planErr
	}
	// A node that cannot be planned is not left behind silently: a
	// recovery stops here. A standalone change does the other nodes and
	// ends as a partial failure naming it.
	unplanned := p.PlanErr()
	if unplanned != nil && !r.standalone() {
		return res, unplanned
	}
	if !p.Changes() {
		res.said = said("nothing to change: " + p.Nodes[0].Reason)
		return res, unplanned
	}
	if r.fx.DryRun() {
		res.said = "dry run: the nodes validated the change; nothing was applied"
		return res, unplanned
	}
	if s.Confirm {
		if err := r.ui.Confirm(ctx, fmt.Sprintf("%s on %d node(s)?", p.Operation, p.CountChanges())); err != nil {
			return res, err
		}
	}
	if err := p.Execute(ctx, r.fx.Nodes, r.tc, r.st); err != nil {
		return res, err
	}
	res.said = said(fmt.Sprintf("%s applied on %d node(s); kube-apiserver runs with disable-admission-plugins=%s", p.Operation, p.CountChanges(), ListOrNone(p.Nodes[0].DisabledAfter)))
	return res, nil
}

// HealthResult is what a wait saw last on each node.
type HealthResult struct {
	said
	Nodes map[string]string
}

func (h *HealthResult) JournalData() any { return h.Nodes }

func (r *run) waitReady(ctx context.Context, timeout time.Duration, okMsg string) (*HealthResult, error) {
	timeout = orDuration(timeout, runbooks.DefaultWait)
	if r.fx.DryRun() {
		return nil, skip("dry run: would wait up to %s for /readyz on every node", timeout)
	}
	start := time.Now()
	health, err := WaitReady(ctx, r.tc, HealthOptions{Timeout: timeout, Progress: func(h NodeHealth) { r.progress(h.Node, h.Summary()) }})
	res := &HealthResult{Nodes: map[string]string{}}
	for _, h := range health {
		res.Nodes[h.Node] = h.Summary()
	}
	if err != nil {
		return res, err
	}
	res.said = said(fmt.Sprintf("%s (%s)", okMsg, time.Since(start).Round(time.Millisecond)))
	return res, nil
}

func (r *run) verify(ctx context.Context, _ Step, _ *runbooks.VerifyParams) (Result, error) {
	if r.opts.KeepDisabled {
		return nil, skip("--keep-disabled: nothing to verify yet")
	}
	res, err := r.waitReady(ctx, 0, "the API server is ready on every node")
	if res == nil {
		return nil, err
	}
	if err != nil {
		return res, err
	}
	status, err := AdmissionStatus(ctx, r.tc, r.st, time.Now())
	if err != nil {
		return res, err
	}
	for _, n := range status {
		if n.Recorded {
			return res, talos.NewNodeError(n.Node, "verify", errors.New("breakglass still holds a record of disabled plugins: the restore did not finish"), "breakglass admission restore")
		}
		if !sameSet(n.ConfigDisabled, n.RunningDisabled) {
			return res, talos.NewNodeError(n.Node, "verify", fmt.Errorf("the running kube-apiserver has disable-admission-plugins=%v but the config says %v", n.RunningDisabled, n.ConfigDisabled))
		}
	}
	res.said += ", with the admission plugins as they were before the incident"
	return res, nil
}
