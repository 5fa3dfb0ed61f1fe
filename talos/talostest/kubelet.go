package talostest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
)

// Container is one run of the kube-apiserver container, handed to a PodRunner.
type Container struct {
	ContainerConfig

	ID           string // 64 hex digits, new for every run
	Name         string // kube-apiserver
	Pod          string // kube-system/kube-apiserver-<nodename>
	PodUID       string // new for every pod: a changed manifest is a new pod
	RestartCount int    // earlier runs of the container in this pod
	StartedAt    time.Time
	Node         *Node
	// Kill is closed when the kubelet kills the container (SIGKILL): the
	// termination grace after a stop is over, or Node.CrashContainer. Run
	// must then return at once.
	Kill <-chan struct{}
}

// PodRunner runs the kube-apiserver container of a node. The lab plugs a real
// kube-apiserver process in; unit tests use StandIn.
type PodRunner interface {
	// Run runs the container until it exits by itself or is stopped. A
	// cancelled ctx is the kubelet's SIGTERM: stop, and return at the latest
	// when Kill is closed. Output goes to logs. A return while ctx is live is
	// an exit of the container, which the kubelet restarts (restartPolicy
	// Always): a non-nil error is a failure (exit code 1), nil exit code 0.
	Run(ctx context.Context, c Container, logs io.Writer) error
}

// KubeletOptions are the kubelet's and Talos's times. Zero fields take the
// real values in brackets, multiplied by TimeScale.
type KubeletOptions struct {
	// PollInterval: the kubelet fetches the static pod manifests Talos
	// serves this often; a re-rendered pod is noticed at the next fetch
	// [20s, kubelet's httpCheckFrequency].
	PollInterval time.Duration
	// TerminationGrace: a replaced pod's container gets SIGTERM, and SIGKILL
	// if it has not exited after this [30s, terminationGracePeriodSeconds].
	TerminationGrace time.Duration
	// BackoffBase, BackoffCap: a container that exits restarts at once the
	// first time, then after BackoffBase doubling up to BackoffCap
	// (CrashLoopBackOff in between) [10s, 5m].
	BackoffBase time.Duration
	BackoffCap  time.Duration
	// StatusInterval: Talos refreshes the StaticPodStatus from the kubelet's
	// /pods this often [15s, k8s.KubeletStaticPodController].
	StatusInterval time.Duration
	// GCInterval: the kubelet's container garbage collection, which removes
	// the containers (and logs) of replaced pods [1m, ContainerGCPeriod].
	GCInterval time.Duration
	// TimeScale multiplies the real value of every time left zero; 0 means 1
	// (real time). Times set explicitly are used as given. Tests use e.g.
	// 0.01: poll 200ms, status 150ms, grace 300ms, back-off 100ms doubling to
	// 3s, garbage collection 600ms.
	TimeScale float64
}

// Resolved returns the times in effect (TimeScale applied, and then 1).
func (o KubeletOptions) Resolved() KubeletOptions {
	scale := o.TimeScale
	if scale <= 0 {
		scale = 1
	}

	for _, f := range []struct {
		d   *time.Duration
		def time.Duration
	}{
		{&o.PollInterval, 20 * time.Second},
		{&o.TerminationGrace, 30 * time.Second},
		{&o.BackoffBase, 10 * time.Second},
		{&o.BackoffCap, 5 * time.Minute},
		{&o.StatusInterval, 15 * time.Second},
		{&o.GCInterval, time.Minute},
	} {
		if *f.d <= 0 {
			*f.d = max(time.Duration(float64(f.def)*scale), time.Millisecond) // tickers need > 0
		}
	}

	o.TimeScale = 1

	return o
}

func newContainerID() string {
	var b [32]byte
	rand.Read(b[:]) //nolint:errcheck

	return hex.EncodeToString(b[:])
}

func newPodUID() string {
	id := newContainerID()

	return id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32]
}

// podRecord is one static pod the kubelet runs, ran or is about to run.
type podRecord struct {
	uid       string
	sandboxID string
	spec      ContainerConfig // as Talos rendered it
	version   string          // the manifest's talos.dev/config-version
	// startTime is the kubelet's first sync of the pod (status.startTime); zero
	// while the pod waits for the previous one to stop.
	startTime    time.Time
	sandboxReady bool // from the start until the pod is stopped
	stopping     bool
	containers   []*containerRecord // oldest first, not garbage collected yet

	backoff    time.Duration // kubelet's back-off entry for the container
	backoffAt  time.Time
	restartIn  *time.Timer // a restart waiting for its back-off
	waiting    string      // CrashLoopBackOff while it waits
	waitingMsg string
}

func (p *podRecord) newest() *containerRecord {
	if len(p.containers) == 0 {
		return nil
	}

	return p.containers[len(p.containers)-1]
}

func (p *podRecord) running() bool {
	for _, c := range p.containers {
		if c.running {
			return true
		}
	}

	return false
}

// containerRecord is a container the kubelet started, kept for Logs and Containers
// until garbage collection.
type containerRecord struct {
	Container

	pod        *podRecord
	logs       *host.Log
	out        *criWriter
	running    bool
	finishedAt time.Time
	exitCode   int
	reason     string

	cancel    context.CancelFunc // SIGTERM
	kill      chan struct{}
	killOnce  sync.Once
	killed    atomic.Bool
	killTimer *time.Timer
	stopping  bool          // stopped by the kubelet: its pod is replaced or removed
	crashed   bool          // made to exit by Node.CrashContainer
	exited    chan struct{} // Run returned
	handled   chan struct{} // the kubelet has dealt with the exit
}

// killNow is the SIGKILL.
func (c *containerRecord) killNow() {
	c.killOnce.Do(func() {
		c.killed.Store(true)
		c.cancel()
		close(c.kill)
	})
}

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

// kubelet runs the node's kube-apiserver static pod the way a kubelet does with
// Talos's manifest: see doc.go. Its state changes on its own goroutine (run);
// readers take mu.
type kubelet struct {
	n      *Node
	runner PodRunner
	opts   KubeletOptions // resolved

	mu      sync.Mutex
	desired *ContainerConfig // the manifest Talos serves now
	// desiredVersion is that manifest's talos.dev/config-version: the kubelet
	// derives a static pod's UID from the whole manifest, so a new version is
	// a new pod even with the same container.
	desiredVersion string
	pod            *podRecord    // the pod the kubelet runs or is about to start
	pods           []*podRecord  // every pod with a sandbox or container left, oldest first
	frozen         bool          // FreezePodStatus
	down           bool          // the kubelet service is stopped (a reset, until the next boot)
	changed        chan struct{} // closed and replaced on every change

	work chan func()
	done chan struct{}
}

func newKubelet(n *Node, runner PodRunner, opts KubeletOptions) *kubelet {
	return &kubelet{
		n: n, runner: runner, opts: opts.Resolved(),
		changed: make(chan struct{}), work: make(chan func()), done: make(chan struct{}),
	}
}

// setDesired changes the manifest Talos serves; the kubelet sees it at its next poll.
func (k *kubelet) setDesired(c *ContainerConfig, version string) {
	k.mu.Lock()
	defer k.mu.Unlock()

	k.desired, k.desiredVersion = c, version
}

// post runs f on the kubelet's goroutine; false once the kubelet is gone.
func (k *kubelet) post(f func()) bool {
	select {
	case k.work <- f:
		return true
	case <-k.done:
		return false
	}
}

// do runs f on the kubelet's goroutine and waits for it.
func (k *kubelet) do(f func()) bool {
	finished := make(chan struct{})
	if !k.post(func() { f(); close(finished) }) {
		return false
	}

	select {
	case <-finished:
		return true
	case <-k.done:
		return false
	}
}

func (k *kubelet) run(ctx context.Context) {
	defer close(k.done)

	poll := time.NewTicker(k.opts.PollInterval)
	status := time.NewTicker(k.opts.StatusInterval)
	gc := time.NewTicker(k.opts.GCInterval)

	defer poll.Stop()
	defer status.Stop()
	defer gc.Stop()

	k.sync() // the kubelet reads its manifests when it starts

	for {
		select {
		case <-ctx.Done():
			k.shutdown()

			return
		case <-poll.C:
			k.sync()
		case <-status.C:
			k.publish()
		case <-gc.C:
			k.gc()
		case f := <-k.work:
			f()
		}
	}
}

// notifyLocked wakes WaitPod callers.
func (k *kubelet) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// sync is one fetch of the manifest: a changed pod replaces the old one (a new
// pod UID; the old pod is stopped first), a removed one is stopped.
func (k *kubelet) sync() {
	k.mu.Lock()
	defer k.mu.Unlock()

	if k.down {
		return
	}

	want, cur := k.desired, k.pod

	switch {
	case cur == nil && want == nil:
		return
	case cur != nil && want != nil && cur.spec.equal(*want) && cur.version == k.desiredVersion:
		return
	}

	if cur != nil {
		if cur.startTime.IsZero() { // never started: it just goes
			k.pods = without(k.pods, cur)
		} else {
			k.n.kubeletf("static pod kube-apiserver-%s (%s) changed: killing it with a %s grace period", k.n.Name, cur.uid, k.opts.TerminationGrace)
			k.stopPodLocked(cur)
		}
	}

	k.pod = nil

	if want != nil {
		k.pod = &podRecord{uid: newPodUID(), sandboxID: newContainerID(), spec: *want, version: k.desiredVersion}
		k.pods = append(k.pods, k.pod)
	}

	k.startPendingLocked()
	k.notifyLocked()
}

func without(pods []*podRecord, p *podRecord) []*podRecord {
	out := pods[:0:0]

	for _, q := range pods {
		if q != p {
			out = append(out, q)
		}
	}

	return out
}

// stopPodLocked sends SIGTERM to the pod's running container; the pod is stopped
// once it exited (or was killed after the grace period).
func (k *kubelet) stopPodLocked(p *podRecord) {
	p.stopping = true
	p.waiting, p.waitingMsg = "", ""

	if p.restartIn != nil {
		p.restartIn.Stop()
		p.restartIn = nil
	}

	for _, c := range p.containers {
		if c.running && !c.stopping {
			k.terminateLocked(c, k.opts.TerminationGrace)
		}
	}

	if !p.running() {
		k.podStoppedLocked(p)
	}
}

func (k *kubelet) terminateLocked(c *containerRecord, grace time.Duration) {
	c.stopping = true
	c.cancel()
	c.killTimer = time.AfterFunc(grace, func() {
		k.n.kubeletf("container %s did not stop within the grace period: killing it", c.ID[:12])
		c.killNow()
	})
}

func (k *kubelet) podStoppedLocked(p *podRecord) {
	p.stopping, p.sandboxReady = false, false
}

// startPendingLocked starts the pod the kubelet has once no other pod is
// stopping: a static pod starts only after its previous instance ended.
func (k *kubelet) startPendingLocked() {
	p := k.pod
	if p == nil || !p.startTime.IsZero() {
		return
	}

	for _, o := range k.pods {
		if o.stopping {
			return
		}
	}

	p.startTime, p.sandboxReady = time.Now(), true
	k.startContainerLocked(p)
}

func (k *kubelet) startContainerLocked(p *podRecord) {
	restarts := 0
	if last := p.newest(); last != nil {
		restarts = last.RestartCount + 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	kill := make(chan struct{})
	c := &containerRecord{
		Container: Container{
			ContainerConfig: expandPodIP(p.spec, k.n.IP),
			ID:              newContainerID(),
			Name:            "kube-apiserver",
			Pod:             "kube-system/kube-apiserver-" + k.n.Name,
			PodUID:          p.uid,
			RestartCount:    restarts,
			StartedAt:       time.Now(),
			Node:            k.n,
			Kill:            kill,
		},
		pod:     p,
		logs:    host.NewLog(),
		running: true,
		cancel:  cancel,
		kill:    kill,
		exited:  make(chan struct{}),
		handled: make(chan struct{}),
	}
	c.out = &criWriter{buf: c.logs, stream: "stderr"}
	p.containers = append(p.containers, c)
	p.waiting, p.waitingMsg = "", ""

	k.n.kubeletf("started container kube-apiserver %s of pod %s (restart count %d)", c.ID[:12], p.uid, restarts)

	go func() {
		err := k.runner.Run(ctx, c.Container, c.out)
		close(c.exited)
		k.post(func() { k.containerExited(c, err) })
	}()
}

// containerExited records an exit; one the kubelet did not ask for restarts the
// container in the same pod after the back-off.
func (k *kubelet) containerExited(c *containerRecord, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer close(c.handled)
	defer k.notifyLocked()

	c.out.flush()
	c.running, c.finishedAt = false, time.Now()
	c.cancel()

	if c.killTimer != nil {
		c.killTimer.Stop()
	}

	switch {
	case c.crashed || (err != nil && !c.killed.Load()):
		c.exitCode, c.reason = 1, "Error"
	case c.killed.Load():
		c.exitCode, c.reason = 137, "Error"
	default:
		c.exitCode, c.reason = 0, "Completed"
	}

	p := c.pod
	k.keepNewestDeadLocked(p)

	if c.stopping || p.stopping {
		if p.stopping && !p.running() {
			k.podStoppedLocked(p)
			k.startPendingLocked()
		}

		return
	}

	if err == nil {
		err = errors.New("exited")
	}

	if p != k.pod { // an old pod's container; nothing restarts it
		return
	}

	// kubelet's doBackOff: no back-off entry (or one older than twice the cap)
	// means restart now, and back off from the next exit on
	if p.backoff == 0 || c.finishedAt.Sub(p.backoffAt) > 2*k.opts.BackoffCap {
		p.backoff, p.backoffAt = k.opts.BackoffBase, time.Now()
		k.n.kubeletf("container kube-apiserver %s exited (%v): restarting", c.ID[:12], err)
		k.startContainerLocked(p)

		return
	}

	p.waiting = "CrashLoopBackOff"
	p.waitingMsg = fmt.Sprintf("back-off %s restarting failed container=kube-apiserver pod=kube-apiserver-%s_kube-system(%s)", p.backoff, k.n.Name, p.uid)
	k.n.kubeletf("container kube-apiserver %s exited (%v): %s", c.ID[:12], err, p.waitingMsg)
	p.restartIn = time.AfterFunc(p.backoff, func() { k.post(func() { k.restartAfterBackoff(p) }) })
}

func (k *kubelet) restartAfterBackoff(p *podRecord) {
	k.mu.Lock()
	defer k.mu.Unlock()

	if p != k.pod || p.stopping || p.restartIn == nil {
		return
	}

	p.restartIn = nil
	p.backoff, p.backoffAt = min(2*p.backoff, k.opts.BackoffCap), time.Now()
	k.startContainerLocked(p)
	k.notifyLocked()
}

// keepNewestDeadLocked removes all but the newest exited container of the pod, as
// the kubelet's container deleter does on every exit (--maximum-dead-containers-per-container=1).
func (k *kubelet) keepNewestDeadLocked(p *podRecord) {
	drop := map[*containerRecord]bool{}
	dead := 0

	for i := len(p.containers) - 1; i >= 0; i-- {
		if c := p.containers[i]; !c.running {
			dead++
			drop[c] = dead > 1
		}
	}

	p.containers = slices.DeleteFunc(p.containers, func(c *containerRecord) bool { return drop[c] })
}

// gc removes the replaced pods that have stopped, with their containers and logs.
func (k *kubelet) gc() {
	k.mu.Lock()
	defer k.mu.Unlock()

	kept := k.pods[:0:0]

	for _, p := range k.pods {
		if p == k.pod || p.stopping || p.running() {
			kept = append(kept, p)
		}
	}

	if len(kept) != len(k.pods) {
		k.pods = kept
		k.notifyLocked()
	}
}

// shutdown stops every container and waits for them: the emulated node goes
// away (Cluster.Close). SIGTERM, then SIGKILL after at most a second, so that
// closing a cluster never waits for a long grace period.
func (k *kubelet) shutdown() {
	k.mu.Lock()

	var running []*containerRecord

	for _, p := range k.pods {
		if p.restartIn != nil {
			p.restartIn.Stop()
		}

		for _, c := range p.containers {
			if c.running {
				if !c.stopping {
					k.terminateLocked(c, min(k.opts.TerminationGrace, time.Second))
				} else {
					time.AfterFunc(time.Second, c.killNow)
				}

				running = append(running, c)
			}
		}
	}

	k.mu.Unlock()

	for _, c := range running {
		<-c.exited
	}
}

func (k *kubelet) state() PodState {
	k.mu.Lock()
	defer k.mu.Unlock()

	return k.stateLocked()
}

func (k *kubelet) stateLocked() PodState {
	var s PodState

	for _, p := range k.pods {
		s.Terminating = s.Terminating || p.stopping
	}

	p := k.pod
	if p == nil {
		return s
	}

	s.Present, s.UID, s.StartTime, s.Waiting = true, p.uid, p.startTime, p.waiting
	s.Config = expandPodIP(p.spec, k.n.IP)

	if c := p.newest(); c != nil {
		s.Running, s.Ready = c.running, c.running
		s.RestartCount, s.ContainerID, s.StartedAt = c.RestartCount, c.ID, c.StartedAt
		s.Config = c.ContainerConfig
	}

	return s
}

// waitPod waits until cond holds for the kubelet's state.
func (k *kubelet) waitPod(ctx context.Context, cond func(PodState) bool) (PodState, error) {
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

// crash makes the newest running container exit as if its process died, and
// returns once the kubelet has dealt with it.
func (k *kubelet) crash() error {
	var c *containerRecord

	k.do(func() {
		k.mu.Lock()
		defer k.mu.Unlock()

		for _, p := range k.pods {
			for _, r := range p.containers {
				if r.running && (c == nil || !r.stopping) {
					c = r
				}
			}
		}

		if c != nil {
			c.crashed = true
			c.killNow()
		}
	})

	if c == nil {
		return errors.New("no kube-apiserver container is running")
	}

	select {
	case <-c.handled:
	case <-k.done:
	}

	return nil
}

// stopService is the reset's stopAllPods: the kubelet service stops, and the CRI stops
// every pod sandbox at once (its containers are killed, no grace). Talos tears the
// StaticPodStatus down with the kubelet. It returns once every container exited.
func (k *kubelet) stopService() {
	var killed []*containerRecord

	k.do(func() {
		k.mu.Lock()
		defer k.mu.Unlock()

		k.down = true

		for _, p := range k.pods {
			p.stopping = true

			if p.restartIn != nil {
				p.restartIn.Stop()
				p.restartIn = nil
			}

			for _, c := range p.containers {
				if c.running {
					c.stopping = true
					c.killNow()
					killed = append(killed, c)
				}
			}
		}

		k.pod = nil
		k.notifyLocked()
	})

	for _, c := range killed {
		select {
		case <-c.handled:
		case <-k.done:
		}
	}

	k.n.writePodStatus(nil)
	k.n.kubeletf("kubelet stopped: every pod sandbox stopped")
}

// bootService is the kubelet starting on a node that booted with EPHEMERAL wiped: no
// pod and no container is left; it reads its manifests at once.
func (k *kubelet) bootService() {
	k.do(func() {
		k.mu.Lock()
		k.down = false
		k.pods, k.pod = nil, nil
		k.mu.Unlock()

		k.n.kubeletf("kubelet started")
		k.sync()
	})
}

// expandPodIP substitutes $(POD_IP) in the command, as kubelet expands the env var
// Talos declares from status.podIP (the node IP: the pod uses the host network).
func expandPodIP(c ContainerConfig, ip string) ContainerConfig {
	cmd := make([]string, len(c.Command))
	for i, a := range c.Command {
		cmd[i] = strings.ReplaceAll(a, "$(POD_IP)", ip)
	}

	return ContainerConfig{Image: c.Image, Command: cmd}
}

// publish is Talos's refresh of the StaticPodStatus from the kubelet's /pods,
// skipped while FreezePodStatus holds it.
func (k *kubelet) publish() {
	k.mu.Lock()
	if k.frozen || k.down {
		k.mu.Unlock()

		return
	}

	ps := k.podStatusLocked()
	k.mu.Unlock()

	k.n.writePodStatus(ps)
}

// podStatusLocked is the status /pods reports for the pod; nil when there is no pod.
func (k *kubelet) podStatusLocked() *corev1.PodStatus {
	p := k.pod
	if p == nil {
		return nil
	}

	if p.startTime.IsZero() {
		// not synced yet (it waits for the old pod to stop): only the phase the
		// kubelet's config source sets on every pod
		return &corev1.PodStatus{Phase: corev1.PodPending}
	}

	ip := k.n.IP
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

// imageID is a digest reference for the image, as the runtime reports it.
func imageID(image string) string {
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}

	sum := sha256.Sum256([]byte(image))

	return repo + "@sha256:" + hex.EncodeToString(sum[:])
}

// Pod returns the kubelet's live view of the kube-apiserver pod (zero on a worker).
func (n *Node) Pod() PodState {
	if n.kubelet == nil {
		return PodState{}
	}

	return n.kubelet.state()
}

// WaitPod waits until cond holds for the kubelet's live view of the pod, and returns it.
func (n *Node) WaitPod(ctx context.Context, cond func(PodState) bool) (PodState, error) {
	if n.kubelet == nil {
		return PodState{}, errors.New("no kubelet pod on a worker")
	}

	return n.kubelet.waitPod(ctx, cond)
}

// PollKubelet makes the kubelet fetch the manifest now, as at its next poll, and
// returns once it acted on it (a replaced pod's old container may still be stopping).
// With a long PollInterval, tests decide when the kubelet notices a change.
func (n *Node) PollKubelet() {
	if n.kubelet != nil {
		n.kubelet.do(n.kubelet.sync)
	}
}

// RefreshPodStatus makes Talos refresh the StaticPodStatus from the kubelet now,
// as at its next refresh (nothing while the status is frozen).
func (n *Node) RefreshPodStatus() {
	if n.kubelet != nil {
		n.kubelet.do(n.kubelet.publish)
	}
}

// FreezePodStatus stops (true) or resumes (false) the StaticPodStatus refreshes:
// the resource keeps its last values, as on a node whose kubelet cannot authorize
// Talos's /pods call through a kube-apiserver that is down.
func (n *Node) FreezePodStatus(frozen bool) {
	if n.kubelet == nil {
		return
	}

	n.kubelet.mu.Lock()
	n.kubelet.frozen = frozen
	n.kubelet.mu.Unlock()
}

// CrashContainer makes the running kube-apiserver container exit with an error,
// as if the process died, and returns once the kubelet has recorded the exit (and
// restarted it, when no back-off is due). The restart is in the same pod: same pod
// UID and startTime, a new container ID, the restart count up by one.
func (n *Node) CrashContainer() error {
	if n.kubelet == nil {
		return errors.New("no kubelet pod on a worker")
	}

	return n.kubelet.crash()
}

// pauseImage is the pod sandbox image of Talos 1.13's containerd.
const pauseImage = "registry.k8s.io/pause:3.10"

// criContainers lists the containers the runtime still has (every pod's, until
// garbage collection) in random order, as containerd lists them from a map.
func (k *kubelet) criContainers() []*containerRecord {
	k.mu.Lock()
	defer k.mu.Unlock()

	var out []*containerRecord

	for _, p := range k.pods {
		out = append(out, p.containers...)
	}

	mrand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })

	return out
}

// containerInfos is machined's Containers list for the CRI: each ready pod
// sandbox followed by its containers, running or exited. A replaced pod's
// sandbox is stopped, so its containers are not listed (Logs still finds them).
// Pods and containers come in random order, as from containerd's maps.
func (k *kubelet) containerInfos(namespace string) []*machine.ContainerInfo {
	k.mu.Lock()
	defer k.mu.Unlock()

	podName := "kube-system/kube-apiserver-" + k.n.Name
	pods := slices.Clone(k.pods)
	mrand.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })

	var out []*machine.ContainerInfo

	for _, p := range pods {
		if !p.sandboxReady {
			continue
		}

		out = append(out, &machine.ContainerInfo{
			Namespace: namespace, Id: podName, Name: podName, PodId: podName,
			InternalId: p.sandboxID, Uid: p.uid, Image: pauseImage, Status: "SANDBOX_READY",
		})

		ctrs := slices.Clone(p.containers)
		mrand.Shuffle(len(ctrs), func(i, j int) { ctrs[i], ctrs[j] = ctrs[j], ctrs[i] })

		for _, c := range ctrs {
			st := "CONTAINER_EXITED"
			if c.running {
				st = "CONTAINER_RUNNING"
			}

			out = append(out, &machine.ContainerInfo{
				Namespace:  namespace,
				Id:         podName + ":kube-apiserver:" + c.ID[:12],
				InternalId: c.ID,
				PodId:      podName,
				Name:       "kube-apiserver",
				Image:      c.Image,
				Status:     st,
			})
		}
	}

	return out
}

// findContainer resolves a CRI display id "namespace/pod:name[:id]" as Talos's CRI
// inspector does (internal/pkg/containers/cri): without an id the first container
// the runtime lists, which may be an exited or an old pod's one; with one, the
// first whose full ID contains it. The errors are plain ones (gRPC Unknown), as
// machined returns them.
func (n *Node) findContainer(id string) (*containerRecord, error) {
	notFound := fmt.Errorf("container %q not found", id)

	podNS, rest, ok := strings.Cut(id, "/")
	if !ok || n.kubelet == nil {
		return nil, notFound
	}

	pod, rest, _ := strings.Cut(rest, ":")
	name, cid, _ := strings.Cut(rest, ":")

	if podNS != "kube-system" || pod != "kube-apiserver-"+n.Name || name != "kube-apiserver" {
		return nil, notFound
	}

	for _, c := range n.kubelet.criContainers() {
		if strings.Contains(c.ID, cid) {
			return c, nil
		}
	}

	return nil, notFound
}

// criWriter turns written text into CRI log lines: "<RFC3339Nano> stderr F <line>".
type criWriter struct {
	mu      sync.Mutex
	buf     *host.Log
	stream  string
	partial []byte
}

var _ io.Writer = (*criWriter)(nil)

func (w *criWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()

	data := append(w.partial, p...)

	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}

		w.emit(data[:i])
		data = data[i+1:]
	}

	w.partial = append([]byte(nil), data...)

	return len(p), nil
}

func (w *criWriter) emit(line []byte) {
	out := make([]byte, 0, len(line)+48)
	out = time.Now().UTC().AppendFormat(out, time.RFC3339Nano)
	out = append(out, ' ')
	out = append(out, w.stream...)
	out = append(out, " F "...)
	out = append(out, line...)
	out = append(out, '\n')
	w.buf.Append(out)
}

// flush emits a trailing partial line.
func (w *criWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()

	if len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = nil
	}
}
