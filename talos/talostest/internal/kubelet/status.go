package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// PodState is the kubelet's own, live view of the kube-apiserver pod (the
// StaticPodStatus resource lags it by up to StatusInterval).
type PodState struct {
	Present bool   // the kubelet has the pod (it may still wait for the old pod to stop)
	UID     string // new for every pod
	// StartTime is when the kubelet started the pod; zero while it waits for
	// the previous pod to stop. A container restart keeps it.
	StartTime    time.Time
	Running      bool // the newest container runs
	Ready        bool // same: the pod has no readiness probe
	RestartCount int
	ContainerID  string // the newest container of the pod
	StartedAt    time.Time
	Waiting      string          // CrashLoopBackOff while waiting to restart
	Config       ContainerConfig // the newest container's ($(POD_IP) expanded)
	Terminating  bool            // a replaced pod's container is still stopping
}

// notifyLocked wakes WaitPod callers.
func (k *Kubelet) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// Pod returns the kubelet's live view of the kube-apiserver pod.
func (k *Kubelet) Pod() PodState {
	k.mu.Lock()
	defer k.mu.Unlock()

	return k.stateLocked()
}

func (k *Kubelet) stateLocked() PodState {
	var s PodState

	for _, p := range k.pods {
		s.Terminating = s.Terminating || p.stopping
	}

	p := k.pod
	if p == nil {
		return s
	}

	s.Present, s.UID, s.StartTime, s.Waiting = true, p.uid, p.startTime, p.waiting
	s.Config = expandPodIP(p.spec, k.host.IP)

	if c := p.newest(); c != nil {
		s.Running, s.Ready = c.running, c.running
		s.RestartCount, s.ContainerID, s.StartedAt = c.RestartCount, c.ID, c.StartedAt
		s.Config = c.ContainerConfig
	}

	return s
}

// WaitPod waits until cond holds for the kubelet's live view of the pod, and returns it.
func (k *Kubelet) WaitPod(ctx context.Context, cond func(PodState) bool) (PodState, error) {
	for {
		k.mu.Lock()
		s, changed := k.stateLocked(), k.changed
		k.mu.Unlock()

		if cond(s) {
			return s, nil
		}

		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-k.done:
			return s, errors.New("the kubelet stopped")
		case <-changed:
		}
	}
}

// publish is Talos's refresh of the StaticPodStatus from the kubelet's /pods,
// skipped while FreezePodStatus holds it.
func (k *Kubelet) publish() {
	k.mu.Lock()
	if k.frozen || k.down {
		k.mu.Unlock()

		return
	}

	ps := k.podStatusLocked()
	k.mu.Unlock()

	k.writeStatus(ps)
}

// writeStatus is the StaticPodStatus resource as Talos writes it from the kubelet's
// /pods: the pod's status through JSON (numbers become floats, times whole seconds);
// nil removes it.
func (k *Kubelet) writeStatus(ps *corev1.PodStatus) {
	ctx, st := k.host.Life, k.host.State
	md := k8s.NewStaticPodStatus(k8s.NamespaceName, k.podName())

	if ps == nil {
		if err := st.Destroy(ctx, md.Metadata()); err != nil && !state.IsNotFoundError(err) && ctx.Err() == nil {
			k.host.Logf("removing StaticPodStatus: %v", err)
		}

		return
	}

	raw, err := json.Marshal(ps)
	if err != nil {
		k.host.Logf("encoding pod status: %v", err)

		return
	}

	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		k.host.Logf("decoding pod status: %v", err)

		return
	}

	if err := st.Modify(ctx, md, func(r resource.Resource) error {
		r.(*k8s.StaticPodStatus).TypedSpec().PodStatus = m

		return nil
	}); err != nil && ctx.Err() == nil {
		k.host.Logf("writing StaticPodStatus: %v", err)
	}
}

// podStatusLocked is the status /pods reports for the pod; nil when there is no pod.
func (k *Kubelet) podStatusLocked() *corev1.PodStatus {
	p := k.pod
	if p == nil {
		return nil
	}

	if p.startTime.IsZero() {
		// not synced yet (it waits for the old pod to stop): only the phase the
		// kubelet's config source sets on every pod
		return &corev1.PodStatus{Phase: corev1.PodPending}
	}

	ip := k.host.IP
	ps := &corev1.PodStatus{
		Phase:     corev1.PodRunning, // restartPolicy Always: running, or restarting
		HostIP:    ip,
		HostIPs:   []corev1.HostIP{{IP: ip}},
		PodIP:     ip,
		PodIPs:    []corev1.PodIP{{IP: ip}},
		QOSClass:  corev1.PodQOSBurstable,
		StartTime: &metav1.Time{Time: p.startTime},
	}

	c := p.newest()
	started := c.running
	cs := corev1.ContainerStatus{
		Name:         "kube-apiserver",
		Image:        c.Image,
		ImageID:      imageID(c.Image),
		ContainerID:  "containerd://" + c.ID,
		RestartCount: int32(c.RestartCount), //nolint:gosec
		Started:      &started,
	}
	changed := c.finishedAt // of the Ready condition

	switch {
	case c.running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: c.StartedAt}}
		cs.Ready, changed = true, c.StartedAt

		if n := len(p.containers); n > 1 && !p.containers[n-2].running {
			cs.LastTerminationState.Terminated = terminated(p.containers[n-2])
		}
	case p.waiting != "":
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: p.waiting, Message: p.waitingMsg}
		cs.LastTerminationState.Terminated = terminated(c)
	default:
		cs.State.Terminated = terminated(c)
	}

	ps.ContainerStatuses = []corev1.ContainerStatus{cs}

	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Time{Time: changed}}
	if !cs.Ready {
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: [kube-apiserver]"
	}

	containersReady := ready
	containersReady.Type = corev1.ContainersReady
	since := metav1.Time{Time: p.startTime}
	ps.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: since},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: since},
		ready,
		containersReady,
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: since},
	}

	return ps
}

func terminated(c *containerRecord) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    int32(c.exitCode), //nolint:gosec
		Reason:      c.reason,
		StartedAt:   metav1.Time{Time: c.StartedAt},
		FinishedAt:  metav1.Time{Time: c.finishedAt},
		ContainerID: "containerd://" + c.ID,
	}
}

// RefreshStatus makes Talos refresh the StaticPodStatus from the kubelet now, as at
// its next refresh (nothing while the status is frozen).
func (k *Kubelet) RefreshStatus() { k.do(k.publish) }

// FreezeStatus stops (true) or resumes (false) the StaticPodStatus refreshes: the
// resource keeps its last values, as on a node whose kubelet cannot authorize Talos's
// /pods call through a kube-apiserver that is down.
func (k *Kubelet) FreezeStatus(frozen bool) {
	k.mu.Lock()
	k.frozen = frozen
	k.mu.Unlock()
}
