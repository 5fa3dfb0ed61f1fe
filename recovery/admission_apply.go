package recovery

// Applying an admission plan: every node at once, the record saved before
// a node changes, then the wait for its new kube-apiserver pod.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// execute applies the plan on every node in parallel (all API servers are
// down together; one at a time would only add waiting). The record is
// saved before a node is changed and updated or removed after.
// The configs go to the nodes through apply (the run's effects); tc reads.
func (p *AdmissionPlan) execute(ctx context.Context, apply Applier, tc *talos.Client, st State) error {
	if p.DryRun || apply == nil {
		return errors.New("internal: a dry-run plan cannot be executed")
	}
	errs, stop := p.eachChange(ctx, func(n *NodeChange) error { return p.executeNode(ctx, apply, tc, st, n) })
	if stop != nil {
		return stop
	}
	return failures(append(slices.Clone(p.planErrs), errs...), len(p.Nodes)-len(errs))
}

// eachChange runs change on every node the plan changes, in parallel,
// timing each and marking the failed; it returns the failures. Interrupted
// (ctx), it returns instead, per node, where the change went through and
// where not: a node whose config was applied did not fail.
func (p *AdmissionPlan) eachChange(ctx context.Context, change func(*NodeChange) error) (failed []error, interrupted error) {
	nodeOf := func(node string) int {
		return slices.IndexFunc(p.Nodes, func(c *NodeChange) bool { return c.Node == node })
	}
	var changing []string
	for _, n := range p.Nodes {
		if n.Action != "none" {
			changing = append(changing, n.Node)
		}
	}
	_, nodeErrs := talos.EachNode(changing, func(node string) (struct{}, error) {
		n := p.Nodes[nodeOf(node)]
		start := time.Now()
		err := change(n)
		n.Elapsed = elapsedSince(start)
		switch {
		case err == nil:
		case ctx.Err() != nil && n.applied():
			n.Outcome, n.Error = "applied", "interrupted after the change was applied: "+err.Error()
		case ctx.Err() != nil:
			n.Outcome, n.Error = "not applied", "interrupted: "+err.Error()
		default:
			n.Outcome, n.Error = "failed", err.Error()
		}
		return struct{}{}, err
	})
	errs := make([]error, len(p.Nodes)) // in the plan's order
	for i, node := range changing {
		errs[nodeOf(node)] = nodeErrs[i]
	}
	if ctx.Err() != nil {
		return nil, p.interrupted(ctx, errs)
	}
	return talos.Failed(errs), nil
}

// applied tells whether the node's change went through (the node took
// the config), whatever happened after.
func (n *NodeChange) applied() bool { return n.Outcome == "applied" || n.Outcome == "running" }

// interrupted is what an interruption left of the plan, node by node.
func (p *AdmissionPlan) interrupted(ctx context.Context, errs []error) error {
	e := &NodesInterrupted{Cause: context.Cause(ctx)}
	for i, n := range p.Nodes {
		switch {
		case n.Action == "none":
		case n.applied():
			e.Applied = append(e.Applied, n.Node)
		case n.Outcome == "failed" && errs[i] != nil:
			e.Failed = append(e.Failed, errs[i])
		default:
			e.NotApplied = append(e.NotApplied, n.Node)
		}
	}
	return e
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
	return waitForFlags(ctx, tc, n, p.opts, restarterOf(apply, p.opts.KubeletRestart), say)
}

// waitForFlags waits until the node has re-rendered kube-apiserver with the
// new flags and a container of the new pod runs. On Talos that takes the
// kubelet's next poll of the static pods (every 20 s) and the old pod's
// shutdown (up to its 30 s grace). The node's container runtime says so at
// once (the StaticPodStatus would say it up to 15 s later). The new pod is
// one the runtime did not have when the plan was made: a changed manifest
// makes a pod with a new UID, while a restart of the old pod (a new
// container ID, the old flags) stays in the old one.
func waitForFlags(ctx context.Context, tc *talos.Client, n *NodeChange, opts AdmissionOptions, restart KubeletRestarter, say func(string, ...any)) error {
	timeout := opts.WaitTimeout
	if timeout == 0 {
		timeout = runbooks.DefaultWait
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last talos.PodObservation
	phase, running := "", ""
	kick := kubeletKick{restart: restart, n: n, say: say}
	err := tc.WatchAPIServer(wctx, n.Node, n.nodeName, 100*time.Millisecond, func(o talos.PodObservation) bool {
		last = o
		var p string
		if p, running = podPhase(o, n); p == phaseDone {
			return true
		}
		kick.look(wctx, o, sameSet(o.Pod.DisabledPlugins(), n.DisabledAfter))
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
	// The deadline may end the wait inside a read of the node, whose error
	// then says unreachable: the wait timed out all the same.
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(wctx.Err(), context.DeadlineExceeded)) && ctx.Err() == nil {
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
