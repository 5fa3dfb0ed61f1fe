// Package kubelet is an emulated Talos node's kubelet with the container runtime
// under it: it runs the kube-apiserver static pod machined renders, at a real node's
// pace. It fetches the manifest (the StaticPod resource of the node's state) every
// PollInterval, so a re-rendered pod is noticed at the next poll, not at the apply;
// a changed manifest is a new pod, started once the old one stopped (SIGTERM, then
// SIGKILL after the termination grace); an exited container restarts in its pod with
// the kubelet's back-off; and Talos's refresh of the pod's status writes the
// StaticPodStatus resource every StatusInterval. The talostest package doc tells
// the details a client sees.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// Options are the kubelet's and Talos's times. Zero fields take the
// real values in brackets, multiplied by TimeScale.
type Options struct {
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
	// PollSeed draws the poll's phase: the kubelet's first periodic fetch comes
	// a time in [0, PollInterval) after its first start, drawn from the seed and
	// the node's name, so that where the poll stands when a change is rendered
	// does not depend on when the change comes (as on a node, whose kubelet
	// started whenever it booted) and a test still gets the same phase on every
	// run. PollPhase, when set, is that time as given.
	PollSeed  uint64
	PollPhase time.Duration
	// RestartStop: a ServiceRestart of the kubelet returns once Talos has
	// stopped the service (the kubelet exits on SIGTERM) [1s, chosen].
	// RestartStart: from then until the new kubelet has fetched its static pod
	// manifests and synced them (Talos's PreFunc and the container start, then
	// the kubelet's own start-up up to its first sync) [3s, chosen]. See
	// lab/README.md: which figures are measured and which chosen.
	RestartStop  time.Duration
	RestartStart time.Duration
	// TimeScale multiplies the real value of every time left zero; 0 means 1
	// (real time). Times set explicitly are used as given. Tests use e.g.
	// 0.01: poll 200ms, status 150ms, grace 300ms, back-off 100ms doubling to
	// 3s, garbage collection 600ms.
	TimeScale float64
}

// Resolved returns the times in effect (TimeScale applied, and then 1).
func (o Options) Resolved() Options {
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
		{&o.RestartStop, time.Second},
		{&o.RestartStart, 3 * time.Second},
	} {
		if *f.d <= 0 {
			*f.d = max(time.Duration(float64(f.def)*scale), time.Millisecond) // tickers need > 0
		}
	}

	o.TimeScale = 1

	return o
}

// Phase is where the node's poll stands: its first periodic fetch comes this
// long after the kubelet's first start (see Options.PollSeed).
func (o Options) Phase(node string) time.Duration {
	if o.PollPhase > 0 {
		return o.PollPhase % o.PollInterval
	}

	h := fnv.New64a()
	h.Write([]byte(node)) //nolint:errcheck

	return time.Duration(rand.New(rand.NewPCG(o.PollSeed, h.Sum64())).Int64N(int64(o.PollInterval))) //nolint:gosec // a phase, not a secret
}

// Kubelet runs the node's kube-apiserver static pod the way a kubelet does with
// Talos's manifest (see the package doc). Its state changes on its own goroutine
// (run); readers take mu.
type Kubelet struct {
	host    *host.Host
	runner  PodRunner
	opts    Options   // resolved
	log     *host.Log // the kubelet's own log (Logs "kubelet")
	started atomic.Bool

	mu      sync.Mutex
	pod     *podRecord   // the pod the kubelet runs or is about to start
	pods    []*podRecord // every pod with a sandbox or container left, oldest first
	frozen  bool         // FreezeStatus
	down    bool         // the kubelet service is stopped (a reset, until the next boot; a restart)
	restart bool         // a ServiceRestart is under way (stopping or starting)
	// poll is the kubelet's next periodic fetch; only the run goroutine uses it.
	poll    *time.Timer
	changed chan struct{} // closed and replaced on every change

	work chan func()
	done chan struct{}
}

// New returns the node's kubelet, not started: Start runs it.
func New(h *host.Host, runner PodRunner, opts Options) *Kubelet {
	return &Kubelet{
		host: h, runner: runner, opts: opts.Resolved(), log: h.Logs.Open("kubelet"),
		changed: make(chan struct{}), work: make(chan func()), done: make(chan struct{}),
	}
}

func (k *Kubelet) logf(format string, args ...any) {
	line := fmt.Sprintf("%s kubelet: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	k.log.Append([]byte(line))
}

func (k *Kubelet) podName() string { return "kube-system/kube-apiserver-" + k.host.Name }

// Start starts the kubelet service: the first time its loop, which reads the
// manifests at once and polls them from then on, first at the poll's phase
// (Options.PollSeed), then every PollInterval (its ticks keep their pace across
// the node's reboots); after Stop, it reads them at once again.
func (k *Kubelet) Start() {
	if k.started.CompareAndSwap(false, true) {
		go k.run(k.host.Life)

		return
	}

	k.do(func() {
		k.mu.Lock()
		k.down, k.restart = false, false
		k.mu.Unlock()

		k.logf("kubelet started")
		k.sync()
	})
}

// Stop stops the kubelet service: it no longer reads the manifests nor reports the
// pods, and Talos tears their StaticPodStatus down with it. The containers keep
// running (StopAllPods is the CRI stopping them).
func (k *Kubelet) Stop() {
	k.do(func() {
		k.mu.Lock()
		k.down, k.restart = true, false
		k.mu.Unlock()
	})

	k.writeStatus(nil)
}

// ErrNotRunning is a restart of a kubelet service that is not running (a reset
// stopped it): Talos's APIRestart starts it instead, and during a reset that start
// does nothing (the service runner is shutting down; cri, which the kubelet waits
// for, is stopped).
var ErrNotRunning = errors.New("the kubelet service is not running")

// Restart is Talos's APIRestart of the kubelet service: the service is stopped (it
// returns once it is, after RestartStop) and started again in the background, as
// Talos's Start does. The stopped kubelet neither fetches the manifests nor reports
// the pods (Talos tears their StaticPodStatus down), but the containers keep
// running: the kubelet's stop does not stop them, and the new kubelet, at its first
// sync (RestartStart later), finds them in the runtime and keeps the pod whose
// manifest has not changed (see lab/README.md, the kubelet's sources). The new
// kubelet fetches the manifests at once and polls them every PollInterval from
// then on; the status is reported again at Talos's next refresh after that sync.
func (k *Kubelet) Restart() error {
	var err error

	if !k.do(func() {
		k.mu.Lock()
		defer k.mu.Unlock()

		switch {
		case k.down && !k.restart:
			err = ErrNotRunning
		case k.restart:
			// a restart under way: Talos's Stop waits for the service to be down,
			// its Start finds it starting already
		default:
			k.down, k.restart = true, true
			k.notifyLocked()
		}
	}) {
		return ErrNotRunning
	}

	if err != nil {
		return err
	}

	k.logf("kubelet stopping (service restart)")
	k.writeStatus(nil)

	select {
	case <-k.host.Life.Done():
		return ErrNotRunning
	case <-time.After(k.opts.RestartStop):
	}

	time.AfterFunc(k.opts.RestartStart, func() {
		k.post(func() {
			k.mu.Lock()
			if !k.restart { // a reset stopped the service meanwhile
				k.mu.Unlock()

				return
			}

			k.down, k.restart = false, false
			k.mu.Unlock()

			k.logf("kubelet started (service restart): fetching the static pod manifests")
			k.poll.Reset(k.opts.PollInterval)
			k.sync()
		})
	})

	return nil
}

// Wait returns once the kubelet's loop has ended (the node went away), at once when
// it never started.
func (k *Kubelet) Wait() {
	if k.started.Load() {
		<-k.done
	}
}

// post runs f on the kubelet's goroutine; false once the kubelet is gone.
func (k *Kubelet) post(f func()) bool {
	select {
	case k.work <- f:
		return true
	case <-k.done:
		return false
	}
}

// do runs f on the kubelet's goroutine and waits for it.
func (k *Kubelet) do(f func()) bool {
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

func (k *Kubelet) run(ctx context.Context) {
	defer close(k.done)

	first := k.opts.Phase(k.host.Name)
	if first <= 0 {
		first = k.opts.PollInterval
	}

	k.poll = time.NewTimer(first)
	status := time.NewTicker(k.opts.StatusInterval)
	gc := time.NewTicker(k.opts.GCInterval)

	defer k.poll.Stop()
	defer status.Stop()
	defer gc.Stop()

	k.sync() // the kubelet reads its manifests when it starts

	for {
		select {
		case <-ctx.Done():
			k.shutdown()

			return
		case <-k.poll.C:
			k.poll.Reset(k.opts.PollInterval)
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

// fetch is the kubelet's fetch of the static pod manifests Talos serves: the
// StaticPod resource machined renders (nil when there is none), and the config
// version it carries; false when it could not be read.
func (k *Kubelet) fetch() (*ContainerConfig, string, bool) {
	r, err := safe.StateGet[*k8s.StaticPod](k.host.Life, k.host.State, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID).Metadata())
	if state.IsNotFoundError(err) {
		return nil, "", true
	}

	if err != nil {
		if k.host.Life.Err() == nil {
			k.logf("fetching the static pod manifests: %v", err)
		}

		return nil, "", false
	}

	c, version, err := staticpod.Read(r.TypedSpec().Pod)
	if err != nil {
		k.logf("%v", err)

		return nil, "", false
	}

	return &c, version, true
}

// sync is one fetch of the manifest: a changed pod replaces the old one (a new
// pod UID; the old pod is stopped first), a removed one is stopped.
func (k *Kubelet) sync() {
	k.mu.Lock()
	defer k.mu.Unlock()

	if k.down {
		return
	}

	want, version, ok := k.fetch()
	if !ok {
		return
	}

	cur := k.pod

	switch {
	case cur == nil && want == nil:
		return
	case cur != nil && want != nil && cur.spec.Equal(*want) && cur.version == version:
		return
	}

	if cur != nil {
		if cur.startTime.IsZero() { // never started: it just goes
			k.pods = without(k.pods, cur)
		} else {
			k.logf("static pod kube-apiserver-%s (%s) changed: killing it with a %s grace period", k.host.Name, cur.uid, k.opts.TerminationGrace)
			k.stopPodLocked(cur)
		}
	}

	k.pod = nil

	if want != nil {
		k.pod = &podRecord{uid: newPodUID(), sandboxID: newContainerID(), spec: *want, version: version}
		k.pods = append(k.pods, k.pod)
	}

	k.startPendingLocked()
	k.notifyLocked()
}

// Poll makes the kubelet fetch the manifest now, as at its next poll, and returns
// once it acted on it (a replaced pod's old container may still be stopping).
func (k *Kubelet) Poll() { k.do(k.sync) }
