package recovery

// A step that changes kube-apiserver's static pod restarts the kubelet of
// each node once the node has rendered the new pod: the kubelet fetches
// Talos's static pods every 20 s and has no watch on them, but fetches them
// at once when it starts. See README.md, "The kubelet restart".

import (
	"context"
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/talos"
)

// KubeletRestarter restarts a node's kubelet service through the Talos API
// (a *talos.Client is one). It is an effect: a dry run's Effects have none.
type KubeletRestarter interface {
	RestartKubelet(ctx context.Context, node string) error
}

// The outcomes of a node's kubelet restart, journaled per node
// (NodeChange.KubeletRestart).
const (
	kubeletRestarted  = "restarted"
	kubeletNotNeeded  = "not needed"
	kubeletNotStarted = "failed"
)

// restarterOf is the restarter of the run's nodes when the plan restarts
// the kubelets, else nil: --no-kubelet-restart, or a dry run (no applier).
func restarterOf(apply Applier, restart bool) KubeletRestarter {
	if !restart {
		return nil
	}
	k, _ := apply.(KubeletRestarter)
	return k
}

// kubeletKick restarts one node's kubelet, once, when the node has rendered
// the new static pod and the kubelet has not replaced the old pod yet.
type kubeletKick struct {
	restart KubeletRestarter // nil: wait for the kubelet's poll
	n       *NodeChange
	say     func(string, ...any)
	tried   bool
}

// look is one look at the node: rendered tells whether the node has
// rendered the new pod. It restarts the kubelet at most once.
func (k *kubeletKick) look(ctx context.Context, o talos.PodObservation, rendered bool) {
	if k.restart == nil || k.tried || !rendered {
		return
	}
	k.tried = true
	if _, ok := newPod(o.Pods, k.n.podsBefore); ok {
		k.n.KubeletRestart = kubeletNotNeeded
		return
	}
	k.say("static pod re-rendered: restarting the kubelet so that it fetches it now rather than at its next poll (up to 20 s); the running containers are kept")
	start := time.Now()
	if err := k.restart.RestartKubelet(ctx, k.n.Node); err != nil {
		k.n.KubeletRestart = kubeletNotStarted + ": " + err.Error()
		k.say("could not restart the kubelet (%v): waiting for its next poll instead", err)
		return
	}
	k.n.KubeletRestart = kubeletRestarted
	k.say("kubelet restarted (stopped in %s; Talos starts it again and it fetches the static pods at once)", time.Since(start).Round(time.Millisecond))
}

// kubeletPlanLine is what a plan says about the kubelets.
func kubeletPlanLine(restart bool) string {
	if restart {
		return "  then, on each node once it has rendered the new kube-apiserver pod, the kubelet is restarted through the Talos API so that it fetches the pod at once (its containers keep running; --no-kubelet-restart waits for its next poll instead, up to 20 s)\n"
	}
	return "  the kubelets are not restarted (--no-kubelet-restart): each picks the new pod up at its next poll of the static pods, up to 20 s after the node renders it\n"
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
