package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/configedit"
)

// DefaultPlugins is what disable turns off when no plugin is named.
var DefaultPlugins = []string{"ValidatingAdmissionWebhook"}

// AdmissionOptions tune disable and restore.
type AdmissionOptions struct {
	Plugins     []string      // plugins to disable (restore: to remove when there is no record)
	RevertAfter time.Duration // disable: > 0 applies in try mode; the node reverts by itself
	Wait        bool          // wait until the static pod runs with the new flags
	WaitTimeout time.Duration
	DryRun      bool // the nodes validate the change; nothing is applied
	// AllowPendingChange applies even where someone else's TRY or STAGED
	// change is pending (the running config and the one on disk differ in
	// ways breakglass did not make). Off, such a node is refused.
	AllowPendingChange bool
	ToolVersion        string
	Progress           func(node, msg string) // optional: one line per step, per node
	// Target is how the commands the plan names reach these nodes.
	Target Target
}

// NodeChange is the plan, then the outcome, for one node.
type NodeChange struct {
	Node              string   `json:"node"`
	Cluster           string   `json:"cluster"`
	TalosVersion      string   `json:"talosVersion"`
	Action            string   `json:"action"` // disable, restore, none
	Reason            string   `json:"reason,omitempty"`
	DisabledBefore    []string `json:"disabledBefore"`
	DisabledAfter     []string `json:"disabledAfter"`
	RemovedFromEnable []string `json:"removedFromEnable,omitempty"`
	Method            string   `json:"method,omitempty"` // text or merge
	NodeDiff          string   `json:"nodeDiff,omitempty"`
	ConfigHashBefore  string   `json:"configHashBefore"`
	ConfigHashAfter   string   `json:"configHashAfter,omitempty"`
	ByteExact         bool     `json:"byteExact,omitempty"` // restore: the config is again exactly what it was before disable
	Unknowns          []string `json:"unknowns,omitempty"`  // what breakglass cannot know (restore without a record)
	// Drift (restore): the keys someone changed since the disable, and what
	// the restore makes of them: it takes out only what breakglass added.
	Drift         []configedit.Drift `json:"drift,omitempty"`
	RollbackAt    *time.Time         `json:"rollbackAt,omitempty"`    // try mode: when the node reverts by itself
	PendingChange string             `json:"pendingChange,omitempty"` // someone else's TRY or STAGED change on the node
	Warnings      []string           `json:"warnings,omitempty"`      // what the node's validation warned about when it applied
	Outcome       string             `json:"outcome"`                 // planned, applied, running, failed
	Error         string             `json:"error,omitempty"`
	Elapsed       Duration           `json:"elapsed,omitempty"`

	newConfig []byte
	record    *AdmissionRecord // disable: to save before applying; restore: the one to drop
	// pendingRollback is when an earlier try-mode change reverts by itself.
	// Any non-try apply, even a dry run, cancels that on the node, so the
	// plan's dry run must then be a try too.
	pendingRollback time.Time
	// tryRecord is the record of breakglass's own try-mode change on the
	// node, if any: the node, not this machine's clock, says whether it is
	// still pending (see ownTryChange).
	tryRecord *AdmissionRecord
	nodeName  string
	// podsBefore are the kube-apiserver pods the node's runtime had when the
	// plan was made: the wait after the apply looks for a pod not among them.
	podsBefore []talos.RuntimePod
}

// AdmissionPlan is a computed change over the target nodes: shown, confirmed,
// then executed once.
type AdmissionPlan struct {
	Operation string        `json:"operation"` // disable or restore
	Nodes     []*NodeChange `json:"nodes"`
	Failed    []string      `json:"failed,omitempty"` // nodes that could not be planned
	Warnings  []string      `json:"warnings,omitempty"`
	DryRun    bool          `json:"dryRun"`

	planErrs []error
	opts     AdmissionOptions
}

// Changes tells whether executing the plan would change any node.
func (p *AdmissionPlan) Changes() bool {
	for _, n := range p.Nodes {
		if n.Action != "none" {
			return true
		}
	}
	return false
}

// restoredRecords are the restore plan's nodes whose config is already byte
// for byte what it was before the disable, but whose record is still there.
func (p *AdmissionPlan) restoredRecords() []*NodeChange {
	var out []*NodeChange
	for _, n := range p.Nodes {
		if p.Operation == "restore" && n.Action == "none" && n.record != nil && n.ByteExact {
			out = append(out, n)
		}
	}
	return out
}

// DropRestoredRecords removes the records of nodes whose config is already
// what it was before the disable: a restore killed between its apply and the
// record's removal, or a try-mode rollback. A record left behind would say
// the plugins are still disabled (status, verify). It returns the nodes.
func (p *AdmissionPlan) DropRestoredRecords(st State) ([]string, error) {
	var done []string
	for _, n := range p.restoredRecords() {
		if err := st.DeleteAdmission(n.Cluster, n.Node); err != nil {
			return done, talos.NewNodeError(n.Node, "remove state record", err)
		}
		done = append(done, n.Node)
	}
	return done, nil
}

// Cluster is the name of the cluster the plan's nodes belong to.
func (p *AdmissionPlan) Cluster() string {
	for _, n := range p.Nodes {
		if n.Cluster != "" {
			return n.Cluster
		}
	}
	return ""
}

// PlanErr is the planning failure of some nodes, if any.
func (p *AdmissionPlan) PlanErr() error { return failures(p.planErrs, len(p.Nodes)) }

// PlanDisable reads every target node and computes its change: the plugins
// join disable-admission-plugins, leave enable-admission-plugins, and the
// node validates the result (dry run) so that the plan shows its own diff.
// Target is how printed commands reach the plan's nodes.
func (p *AdmissionPlan) Target() Target { return p.opts.Target }

func PlanDisable(ctx context.Context, tc *talos.Client, st State, opts AdmissionOptions) (*AdmissionPlan, error) {
	if len(opts.Plugins) == 0 {
		opts.Plugins = DefaultPlugins
	}
	if err := configedit.ValidatePlugins(opts.Plugins); err != nil {
		return nil, failure.Input("", "%w", err)
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

// PlanRestore computes, per node, the config that puts back exactly the
// values recorded at disable time, keeping every other change made since.
// Without a record it can only remove the named plugins.
func PlanRestore(ctx context.Context, tc *talos.Client, st State, opts AdmissionOptions) (*AdmissionPlan, error) {
	if len(opts.Plugins) > 0 {
		if err := configedit.ValidatePlugins(opts.Plugins); err != nil {
			return nil, failure.Input("", "%w", err)
		}
	}
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
	changes := make([]*NodeChange, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			changes[i], errs[i] = planNode(ctx, tc, node, opts, plan)
		}()
	}
	wg.Wait()
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

// Execute applies the plan on every node in parallel (all API servers are
// down together; one at a time would only add waiting). The record is
// saved before a node is changed and updated or removed after.
// The configs go to the nodes through apply (the run's effects); tc reads.
func (p *AdmissionPlan) Execute(ctx context.Context, apply Applier, tc *talos.Client, st State) error {
	if p.DryRun || apply == nil {
		return errors.New("internal: a dry-run plan cannot be executed")
	}
	errs := p.eachChange(func(n *NodeChange) error { return p.executeNode(ctx, apply, tc, st, n) })
	return failures(append(slices.Clone(p.planErrs), errs...), len(p.Nodes)-len(errs))
}

// eachChange runs change on every node the plan changes, in parallel,
// timing each and marking the failed; it returns the failures.
func (p *AdmissionPlan) eachChange(change func(*NodeChange) error) []error {
	errs := make([]error, len(p.Nodes))
	var wg sync.WaitGroup
	for i, n := range p.Nodes {
		if n.Action == "none" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			errs[i] = change(n)
			n.Elapsed = elapsedSince(start)
			if errs[i] != nil {
				n.Outcome, n.Error = "failed", errs[i].Error()
			}
		}()
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return failed
}

// CountChanges is how many nodes the plan changes.
func (p *AdmissionPlan) CountChanges() int {
	n := 0
	for _, c := range p.Nodes {
		if c.Action != "none" {
			n++
		}
	}
	return n
}

// unchangedSincePlan re-reads the node's config: one changed since the plan
// was shown is never overwritten.
func unchangedSincePlan(ctx context.Context, tc *talos.Client, n *NodeChange) error {
	cur, err := tc.ReadMachineConfig(ctx, n.Node)
	if err != nil {
		return err
	}
	if cur.Hash() != n.ConfigHashBefore {
		return &talos.NodeError{Node: n.Node, Op: n.Action, Err: fmt.Errorf("%w: the machine config changed since the plan was made", ErrConflict)}
	}
	return nil
}

// applyPlanned sends the planned config; Talos validates on apply and
// answers warnings (never on a dry run), which are said and kept.
func applyPlanned(ctx context.Context, apply Applier, n *NodeChange, req talos.ApplyRequest, say func(string, ...any)) error {
	res, err := apply.Apply(ctx, n.Node, req)
	if err != nil {
		return err
	}
	n.Warnings = res.Warnings
	for _, w := range res.Warnings {
		say("the node warns: %s", w)
	}
	n.Outcome = "applied"
	return nil
}

func (p *AdmissionPlan) executeNode(ctx context.Context, apply Applier, tc *talos.Client, st State, n *NodeChange) error {
	say := func(format string, args ...any) {
		if p.opts.Progress != nil {
			p.opts.Progress(n.Node, fmt.Sprintf(format, args...))
		}
	}
	if err := unchangedSincePlan(ctx, tc, n); err != nil {
		return err
	}
	mode := talos.NoReboot
	if p.Operation == "disable" {
		mode = applyMode(p.opts)
		rec := *n.record
		if rec.DisabledAt.IsZero() {
			rec.DisabledAt = time.Now().UTC()
		}
		if mode == talos.Try {
			at := time.Now().UTC().Add(p.opts.RevertAfter)
			rec.RollbackAt, n.RollbackAt = &at, &at
		}
		if err := st.SaveAdmission(rec); err != nil {
			return &talos.NodeError{Node: n.Node, Op: "save state record", Err: err}
		}
		say("record saved; applying (mode %s)", modeName(mode))
	} else {
		say("applying the recorded values (mode no-reboot)")
	}
	if err := applyPlanned(ctx, apply, n, talos.ApplyRequest{Config: n.newConfig, Mode: mode, TryTimeout: p.opts.RevertAfter}, say); err != nil {
		return err
	}
	if p.Operation == "restore" && n.record != nil {
		if err := st.DeleteAdmission(n.Cluster, n.Node); err != nil {
			return &talos.NodeError{Node: n.Node, Op: "remove state record", Err: err}
		}
	}
	if !p.opts.Wait {
		return nil
	}
	return waitForFlags(ctx, tc, n, p.opts, say)
}

// waitForFlags waits until the node has re-rendered kube-apiserver with the
// new flags and a container of the new pod runs. On Talos that takes the
// kubelet's next poll of the static pods (every 20 s) and the old pod's
// shutdown (up to its 30 s grace). The node's container runtime says so at
// once (the StaticPodStatus would say it up to 15 s later). The new pod is
// one the runtime did not have when the plan was made: a changed manifest
// makes a pod with a new UID, while a restart of the old pod (a new
// container ID, the old flags) stays in the old one.
func waitForFlags(ctx context.Context, tc *talos.Client, n *NodeChange, opts AdmissionOptions, say func(string, ...any)) error {
	timeout := opts.WaitTimeout
	if timeout == 0 {
		timeout = runbooks.DefaultWait
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last talos.PodObservation
	phase, running := "", ""
	err := tc.WatchAPIServer(wctx, n.Node, n.nodeName, 100*time.Millisecond, func(o talos.PodObservation) bool {
		last = o
		var p string
		if p, running = podPhase(o, n); p == phaseDone {
			return true
		}
		if p != phase {
			phase = p
			say("%s", p)
		}
		return false
	})
	if err == nil {
		n.Outcome = "running"
		say("kube-apiserver runs in the new pod with disable-admission-plugins=%s (container %s)", ListOrNone(n.DisabledAfter), shortID(running))
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return &talos.NodeError{Node: n.Node, Op: "wait for kube-apiserver", Err: fmt.Errorf("%w after %s: %s (pod flags %v, runtime pods %s)",
			ErrTimeout, timeout, phase, last.Pod.DisabledPlugins(), describePods(last.Pods))}
	}
	return err
}

const phaseDone = "done"

// podPhase says what the wait is waiting for, from one look at the node,
// and once done the new pod's running container.
func podPhase(o talos.PodObservation, n *NodeChange) (string, string) {
	if !sameSet(o.Pod.DisabledPlugins(), n.DisabledAfter) {
		return fmt.Sprintf("waiting for the node to re-render the static pod with disable-admission-plugins=%s", ListOrNone(n.DisabledAfter)), ""
	}
	return newPodPhase(o.Pods, n.podsBefore)
}

// newPodPhase is what the wait waits for once the node has rendered the
// new flags: the kubelet's new pod, and its running container (returned
// once it runs).
func newPodPhase(now, before []talos.RuntimePod) (string, string) {
	pod, ok := newPod(now, before)
	if !ok {
		if oldPodRestarted(now, before) {
			return "the old pod restarted (new container, old flags); still waiting for the kubelet to replace it", ""
		}
		return "static pod re-rendered; waiting for the kubelet to pick it up (it polls every 20 s) and stop the old pod (up to 30 s)", ""
	}
	c, ok := pod.Running()
	if !ok {
		if len(pod.Containers) > 0 {
			return "new pod started; its container exited (the kubelet restarts it)", ""
		}
		return "new pod started; waiting for its container to run", ""
	}
	return phaseDone, c.ID
}

// newPod is the pod the runtime has now and did not have before. The
// kubelet runs one pod of a name at a time (the new one starts once the old
// one has stopped), so there is at most one.
func newPod(now, before []talos.RuntimePod) (talos.RuntimePod, bool) {
	for _, p := range now {
		if !slices.ContainsFunc(before, func(b talos.RuntimePod) bool { return b.Key() == p.Key() }) {
			return p, true
		}
	}
	return talos.RuntimePod{}, false
}

// oldPodRestarted tells whether a pod from before runs a container it did
// not have then.
func oldPodRestarted(now, before []talos.RuntimePod) bool {
	for _, p := range now {
		c, ok := p.Running()
		if !ok {
			continue
		}
		for _, b := range before {
			if b.Key() == p.Key() && !slices.ContainsFunc(b.Containers, func(x talos.RuntimeContainer) bool { return x.ID == c.ID }) {
				return true
			}
		}
	}
	return false
}

// describePods says what the runtime had, for a timeout's error.
func describePods(pods []talos.RuntimePod) string {
	if len(pods) == 0 {
		return "none"
	}
	var out []string
	for _, p := range pods {
		s := "pod " + shortID(p.Key())
		if c, ok := p.Running(); ok {
			s += " running " + shortID(c.ID)
		} else {
			s += " with no running container"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "containerd://")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func modeName(m talos.ApplyMode) string {
	if m == talos.Try {
		return "try"
	}
	return "no-reboot"
}

// union is a then the items of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// Duration is a duration written the short way in JSON ("1.5s", "5m"):
// the runbooks' type, so every duration breakglass writes reads the same.
type Duration = runbooks.Duration

// elapsedSince is the time since start, to the millisecond.
func elapsedSince(start time.Time) Duration {
	return Duration(time.Since(start).Round(time.Millisecond))
}

// bypassed says what a set of disabled plugins lets through unchecked.
func bypassed(plugins []string) string {
	what := map[string]string{
		kinds.PluginValidatingWebhook: "validating webhooks",
		kinds.PluginMutatingWebhook:   "mutating webhooks",
		kinds.PluginValidatingPolicy:  "ValidatingAdmissionPolicies",
		kinds.PluginMutatingPolicy:    "MutatingAdmissionPolicies",
	}
	var out []string
	for _, p := range plugins {
		if w, ok := what[p]; ok {
			out = append(out, w)
		} else {
			out = append(out, "what "+p+" enforces")
		}
	}
	if len(out) > 1 {
		return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1] + " are"
	}
	return out[0] + " are"
}

// refuseOnFullEtcd refuses to restart kube-apiserver (turn plugins off)
// while etcd's NOSPACE alarm is raised: a kube-apiserver that restarts on a
// full etcd cannot finish its start-up writes, so the change would take
// down one that still answers. An alarm list that cannot be read does not
// stop the change.
func refuseOnFullEtcd(ctx context.Context, tc *talos.Client, node string) error {
	alarms, err := tc.EtcdAlarms(ctx, node)
	if err != nil {
		return nil
	}
	for _, a := range alarms {
		if a.Type == "NOSPACE" {
			return talos.NewNodeError(node, "plan disable", fmt.Errorf("%w: etcd is full (NOSPACE alarm on member %s): a kube-apiserver restarted now could not finish its start-up writes", ErrEtcdFull, etcd.ID(a.MemberID).String()),
				"give etcd room first: breakglass recover   # the diagnosis picks runbook etcd-nospace",
				"see what filled it: breakglass etcd usage")
		}
	}
	return nil
}
