package recovery

// Planning an admission change: each node read, its new config computed
// and validated by the node (dry run), nothing applied.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/configedit"
)

// planDisable reads every target node and computes its change: the plugins
// join disable-admission-plugins, leave enable-admission-plugins, and the
// node validates the result (dry run) so that the plan shows its own diff.
func planDisable(ctx context.Context, tc *talos.Client, st State, opts AdmissionOptions) (*AdmissionPlan, error) {
	if len(opts.Plugins) == 0 {
		opts.Plugins = DefaultPlugins
	}
	if err := tc.RequireAdmin("disabling admission plugins"); err != nil {
		return nil, err
	}
	return planEach(ctx, tc, "disable", opts, func(ctx context.Context, n *NodeChange, cfg talos.MachineConfig) error {
		existing, err := st.LoadAdmission(n.Cluster, n.Node)
		if err != nil {
			return err
		}
		res, err := configedit.Disable(cfg.Bytes, configedit.Options{Plugins: opts.Plugins, StringOnly: !talos.SupportsListArgs(n.TalosVersion)})
		if err != nil {
			return err
		}
		n.DisabledBefore, n.DisabledAfter = res.Before.Disable.Plugins, res.After.Disable.Plugins
		n.RemovedFromEnable, n.Method = res.RemovedFromEnable, res.Method
		if !res.Changed {
			n.Action, n.Reason = "none", "already disabled"
			return nil
		}
		n.pendingRollback, n.tryRecord = rollbackPending(existing, cfg), existing
		if !n.pendingRollback.IsZero() && opts.RevertAfter > 0 {
			// A second try would roll back to the first one's result, and
			// the first one's rollback would be lost.
			return fmt.Errorf("%w: a try-mode change is pending on this node until %s; restore it first (%s) or wait", ErrConflict, n.pendingRollback.Local().Format(time.RFC3339), opts.Target.NodesCmd("admission restore"))
		}
		n.Action, n.newConfig = "disable", res.Config
		n.ConfigHashAfter = talos.HashConfig(res.Config)
		rec := AdmissionRecord{
			SchemaVersion: 1, Cluster: n.Cluster, Node: n.Node, TalosVersion: n.TalosVersion,
			Plugins: opts.Plugins, Edits: []configedit.Record{res.Record},
			ConfigHashBefore: n.ConfigHashBefore, ConfigHashAfter: n.ConfigHashAfter,
			Mode: "no-reboot", By: whoami(), ToolVersion: opts.ToolVersion,
		}
		if existing != nil && cfg.Hash() != existing.ConfigHashBefore {
			// An earlier disable is still (at least partly) in place: this
			// one stacks on it, and restore undoes both, newest first, back
			// to the values from before the first.
			rec.Edits = append(slices.Clone(existing.Edits), res.Record)
			rec.ConfigHashBefore, rec.DisabledAt = existing.ConfigHashBefore, existing.DisabledAt
			rec.Plugins = union(existing.Plugins, opts.Plugins)
			n.Reason = fmt.Sprintf("adds to the change breakglass made at %s; restore undoes both", existing.DisabledAt.Local().Format(time.RFC3339))
		}
		if opts.RevertAfter > 0 {
			rec.Mode = "try"
		}
		n.record = &rec
		return nil
	})
}

// planRestore computes, per node, the config that puts back exactly the
// values recorded at disable time, keeping every other change made since.
// Without a record it can only remove the named plugins.
func planRestore(ctx context.Context, tc *talos.Client, st State, opts AdmissionOptions) (*AdmissionPlan, error) {
	if err := tc.RequireAdmin("restoring admission plugins"); err != nil {
		return nil, err
	}
	return planEach(ctx, tc, "restore", opts, func(ctx context.Context, n *NodeChange, cfg talos.MachineConfig) error {
		rec, err := st.LoadAdmission(n.Cluster, n.Node)
		if err != nil {
			return err
		}
		n.DisabledBefore, err = configedit.Disabled(cfg.Bytes)
		if err != nil {
			return err
		}
		var out []byte
		switch {
		case rec != nil && cfg.Hash() == rec.ConfigHashBefore:
			n.Action, n.Reason = "none", "the config is already what it was before disable (rolled back or restored)"
			n.record, n.ByteExact = rec, true
		case rec != nil:
			n.pendingRollback, n.tryRecord = rollbackPending(rec, cfg), rec
			out = cfg.Bytes
			for i := len(rec.Edits) - 1; i >= 0; i-- {
				u, err := configedit.Undo(out, rec.Edits[i])
				if err != nil {
					return err
				}
				out, n.Drift = u.Config, append(n.Drift, u.Drift...)
			}
			n.record = rec
			n.ByteExact = talos.HashConfig(out) == rec.ConfigHashBefore
			if cfg.Hash() != rec.ConfigHashAfter {
				n.Reason = "the config changed since disable; those changes are kept"
			}
		case len(opts.Plugins) > 0:
			out, err = configedit.RemovePlugins(cfg.Bytes, opts.Plugins)
			if err != nil {
				return err
			}
			n.Unknowns = []string{
				"no record of breakglass disabling plugins on this node: the named plugins are removed",
				"whether they were disabled before the incident, and whether they were in enable-admission-plugins, cannot be known",
			}
		default:
			n.Action, n.Reason = "none", "no record of breakglass disabling plugins on this node"
			if len(n.DisabledBefore) > 0 {
				n.Reason += fmt.Sprintf("; disable-admission-plugins holds %v: name the ones to remove with --plugins", n.DisabledBefore)
			}
		}
		if n.Action == "none" {
			n.DisabledAfter = n.DisabledBefore
			return nil
		}
		if string(out) == string(cfg.Bytes) {
			n.Action, n.Reason = "none", "nothing to remove"
			n.DisabledAfter = n.DisabledBefore
			return nil
		}
		n.Action, n.newConfig = "restore", out
		n.ConfigHashAfter = talos.HashConfig(out)
		n.DisabledAfter, err = configedit.Disabled(out)
		return err
	})
}

// planEach reads each node in parallel, lets plan fill in the change, and
// asks the node to validate it. A node that fails is named and left out;
// the others are still planned.
func planEach(ctx context.Context, tc *talos.Client, op string, opts AdmissionOptions,
	plan func(context.Context, *NodeChange, talos.MachineConfig) error) (*AdmissionPlan, error) {
	nodes := tc.Nodes()
	if len(nodes) == 0 {
		return nil, failure.Input("name the control-plane nodes with -n NODE[,NODE...]", "no target nodes: the talosconfig context names none")
	}
	p := &AdmissionPlan{Operation: op, DryRun: opts.DryRun, opts: opts}
	changes, errs := talos.EachNode(nodes, func(node string) (*NodeChange, error) { return planNode(ctx, tc, node, opts, plan) })
	for i := range nodes {
		if errs[i] != nil {
			p.planErrs = append(p.planErrs, errs[i])
			p.Failed = append(p.Failed, nodes[i])
			continue
		}
		p.Nodes = append(p.Nodes, changes[i])
	}
	if op == "disable" && p.Changes() {
		p.Warnings = append(p.Warnings, "while the plugins are disabled, "+bypassed(opts.Plugins)+" bypassed. Restore as soon as the API server is healthy: "+opts.Target.NodesCmd("admission restore"))
	}
	if len(p.Nodes) == 0 {
		return p, p.PlanErr()
	}
	return p, nil
}

func planNode(ctx context.Context, tc *talos.Client, node string, opts AdmissionOptions,
	plan func(context.Context, *NodeChange, talos.MachineConfig) error) (*NodeChange, error) {
	n := &NodeChange{Node: node, Outcome: "planned"}
	var err error
	if n.TalosVersion, err = tc.Version(ctx, node); err != nil {
		return nil, err
	}
	cfg, facts, err := tc.ReadConfigFacts(ctx, node)
	if err != nil {
		return nil, err
	}
	if !facts.IsControlPlane() {
		return nil, talos.NewNodeError(node, "check machine type", fmt.Errorf("%w (machine type %s): kube-apiserver does not run there", talos.ErrNotControlPlane, facts.MachineType),
			"target only the control-plane nodes: -n CP1,CP2,CP3")
	}
	n.Cluster, n.ConfigHashBefore = facts.ClusterName, cfg.Hash()
	if err := plan(ctx, n, cfg); err != nil {
		var ne *talos.NodeError
		if errors.As(err, &ne) {
			return nil, err
		}
		return nil, &talos.NodeError{Node: node, Op: "plan " + opsName(n), Err: err}
	}
	if n.Action == "none" {
		return n, nil
	}
	if err := checkPendingChange(ctx, tc, n, cfg, opts); err != nil {
		return nil, err
	}
	if health, err := tc.ReadEtcdHealth(ctx, node); err != nil {
		return nil, err
	} else if health == talos.EtcdUnhealthy {
		return nil, talos.NewNodeError(node, "plan "+opsName(n), fmt.Errorf("%w: Talos renders kube-apiserver's static pod only while the node's etcd is healthy, so the new flags would never reach it", talos.ErrEtcdUnhealthy),
			"look at etcd on that node: talosctl -n "+node+" service etcd; talosctl -n "+node+" etcd status",
			"or leave the node out: -n with the other control-plane nodes")
	}
	if n.Action == "disable" {
		if err := refuseOnFullEtcd(ctx, tc, node); err != nil {
			return nil, err
		}
	}
	// Every planning dry run is sent in TRY mode: on Talos any other request,
	// a dry run included, cancels a pending TRY rollback (someone's, or our
	// own --revert-after). A TRY is refused exactly when NO_REBOOT would be
	// (the change needs a reboot), so it answers the same question.
	dryReq := talos.ApplyRequest{Config: n.newConfig, Mode: talos.Try, TryTimeout: dryRunTryTimeout, DryRun: true}
	if opts.RevertAfter > 0 {
		dryReq.TryTimeout = opts.RevertAfter
	}
	if left := time.Until(n.pendingRollback); left > time.Second {
		dryReq.TryTimeout = left
	}
	dry, err := tc.Apply(ctx, node, dryReq)
	if err != nil {
		return nil, err
	}
	n.NodeDiff = redactSecrets(dry.Details)
	if n.nodeName, err = tc.NodeName(ctx, node); err != nil {
		return nil, err
	}
	if opts.Wait {
		// Without them any pod, the old one too, would look new to the wait.
		if n.podsBefore, err = tc.ReadAPIServerPods(ctx, node, n.nodeName); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// dryRunTryTimeout is the try timeout a planning dry run names; nothing is
// applied, so it only has to be valid.
const dryRunTryTimeout = time.Minute

// checkPendingChange finds a TRY or STAGED change someone else left pending:
// the running config and the one on disk differ, and breakglass's own record
// does not explain it. Applying on top would make a TRY change permanent (its
// rollback is cancelled) or lose a STAGED one (the disk is overwritten).
func checkPendingChange(ctx context.Context, tc *talos.Client, n *NodeChange, running talos.MachineConfig, opts AdmissionOptions) error {
	disk, err := tc.ReadPersistentConfig(ctx, n.Node)
	if err != nil {
		return err
	}
	if disk.Hash() == running.Hash() || ownTryChange(n.tryRecord, running, disk) {
		return nil
	}
	n.PendingChange = "the running config and the config on disk differ: someone's TRY change is pending (it rolls back by itself) or a STAGED change waits for a reboot"
	if opts.AllowPendingChange {
		n.PendingChange += "; applying anyway (--allow-pending-change): a pending TRY change becomes permanent, a STAGED one is overwritten"
		return nil
	}
	return talos.NewNodeError(n.Node, "plan "+opsName(n), fmt.Errorf("%w: %s; breakglass will not stack on it", ErrConflict, n.PendingChange),
		"see the difference: talosctl -n "+n.Node+" get machineconfig v1alpha1 -o yaml, and the same for persistent",
		"let the TRY change roll back or make it permanent (talosctl apply-config --mode no-reboot), or add --allow-pending-change to apply on top")
}

// ownTryChange tells whether breakglass's own try-mode disable explains the
// difference: the node runs what it applied and its disk still holds what
// was there before, so the rollback is still pending there, whatever this
// machine's clock says of the recorded rollback time (a clock ahead of the
// node's, a restore moments before the rollback).
func ownTryChange(rec *AdmissionRecord, running, disk talos.MachineConfig) bool {
	return rec != nil && rec.Mode == "try" && running.Hash() == rec.ConfigHashAfter && disk.Hash() == rec.ConfigHashBefore
}

// rollbackPending is when a try-mode change recorded in rec reverts by
// itself, if it is still in place; zero otherwise.
func rollbackPending(rec *AdmissionRecord, cfg talos.MachineConfig) time.Time {
	if rec == nil || rec.RollbackAt == nil || cfg.Hash() != rec.ConfigHashAfter || time.Now().After(*rec.RollbackAt) {
		return time.Time{}
	}
	return *rec.RollbackAt
}

func opsName(n *NodeChange) string {
	if n.Action == "" {
		return "change"
	}
	return n.Action
}

func applyMode(opts AdmissionOptions) talos.ApplyMode {
	if opts.RevertAfter > 0 {
		return talos.Try
	}
	return talos.NoReboot
}
