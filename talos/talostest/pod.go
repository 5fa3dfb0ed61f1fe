package talostest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Container is one run of the kube-apiserver container, handed to a PodRunner.
type Container struct {
	ContainerConfig

	ID           string // 64 hex digits, new for every run
	Name         string // kube-apiserver
	Pod          string // kube-system/kube-apiserver-<nodename>
	RestartCount int
	StartedAt    time.Time
	Node         *Node
}

// PodRunner runs the kube-apiserver container of a node. The lab plugs a real
// kube-apiserver process in; unit tests use StandIn.
type PodRunner interface {
	// Run runs the container until ctx is cancelled (then stops it and returns) or it
	// exits by itself. Its output goes to logs. Any return while ctx is live counts as
	// a container exit (a non-nil error as a failure).
	Run(ctx context.Context, c Container, logs io.Writer) error
}

// Prober is implemented by runners that can answer kubelet-like probes. Without it a
// running container counts as live and ready (the Talos kube-apiserver pod has no probes).
type Prober interface {
	Live(ctx context.Context, c Container) bool
	Ready(ctx context.Context, c Container) bool
}

// KubeletOptions tune the restart loop. Zero values take the defaults in brackets.
type KubeletOptions struct {
	BackoffBase      time.Duration // first restart delay [10s, as kubelet]
	BackoffCap       time.Duration // longest restart delay [5m]
	ProbePeriod      time.Duration // probe interval [1s]
	StartupGrace     time.Duration // no liveness verdict before this [10s]
	FailureThreshold int           // consecutive liveness failures before a kill [3]
}

func (o KubeletOptions) withDefaults() KubeletOptions {
	if o.BackoffBase <= 0 {
		o.BackoffBase = 10 * time.Second
	}

	if o.BackoffCap <= 0 {
		o.BackoffCap = 5 * time.Minute
	}

	if o.ProbePeriod <= 0 {
		o.ProbePeriod = time.Second
	}

	if o.StartupGrace <= 0 {
		o.StartupGrace = 10 * time.Second
	}

	if o.FailureThreshold <= 0 {
		o.FailureThreshold = 3
	}

	return o
}

func newContainerID() string {
	var b [32]byte
	rand.Read(b[:]) //nolint:errcheck

	return hex.EncodeToString(b[:])
}

// containerRecord is a container the kubelet started, kept for Logs and Containers.
type containerRecord struct {
	Container

	logs       *logBuffer
	running    bool
	ready      bool
	finishedAt time.Time
	exitCode   int
	reason     string
}

// PodState is a snapshot of the kubelet's view of the kube-apiserver pod.
type PodState struct {
	Present      bool // a rendered pod exists
	Running      bool
	Ready        bool
	RestartCount int
	ContainerID  string
	StartedAt    time.Time
	Waiting      string // CrashLoopBackOff while waiting to restart
	Config       ContainerConfig
}

// kubelet runs the node's kube-apiserver static pod.
type kubelet struct {
	n      *Node
	runner PodRunner
	opts   KubeletOptions

	mu         sync.Mutex
	desired    *ContainerConfig
	wake       chan struct{}
	podUID     string
	podStart   time.Time
	current    *containerRecord
	previous   *containerRecord
	restarts   int
	waiting    string
	waitingMsg string
	lastTerm   *containerRecord

	done chan struct{}
}

func newKubelet(n *Node, runner PodRunner, opts KubeletOptions) *kubelet {
	return &kubelet{n: n, runner: runner, opts: opts.withDefaults(), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// setDesired hands the kubelet a (re-)rendered pod.
func (k *kubelet) setDesired(c *ContainerConfig) {
	k.mu.Lock()
	k.desired = c
	k.mu.Unlock()

	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *kubelet) getDesired() *ContainerConfig {
	k.mu.Lock()
	defer k.mu.Unlock()

	return k.desired
}

func (k *kubelet) state() PodState {
	k.mu.Lock()
	defer k.mu.Unlock()

	s := PodState{Present: k.desired != nil, RestartCount: k.restarts, Waiting: k.waiting}
	if k.current != nil {
		s.Running = k.current.running
		s.Ready = k.current.ready
		s.ContainerID = k.current.ID
		s.StartedAt = k.current.StartedAt
		s.Config = k.current.ContainerConfig
	}

	return s
}

// records returns the current and the previous container, newest first.
func (k *kubelet) records() []*containerRecord {
	k.mu.Lock()
	defer k.mu.Unlock()

	var out []*containerRecord

	for _, r := range []*containerRecord{k.current, k.previous} {
		if r != nil {
			out = append(out, r)
		}
	}

	return out
}

func (k *kubelet) run(ctx context.Context) {
	defer close(k.done)

	var (
		spec    *ContainerConfig
		backoff time.Duration
	)

	for ctx.Err() == nil {
		want := k.getDesired()

		if want == nil {
			if spec != nil { // the pod was removed
				spec = nil
				k.newPod()
			}

			select {
			case <-ctx.Done():
				return
			case <-k.wake:
			}

			continue
		}

		if spec == nil || !spec.equal(*want) {
			// a changed manifest is a new static pod: kubelet replaces the pod, restart count starts over
			spec = want
			backoff = 0
			k.newPod()
		}

		started := time.Now()
		exitErr, killed := k.runOnce(ctx, *spec)

		if ctx.Err() != nil {
			return
		}

		if killed == killedForUpdate {
			continue
		}

		// the container died or failed its liveness probe: back off, then restart
		if time.Since(started) > 2*k.opts.BackoffCap {
			backoff = 0
		}

		switch {
		case backoff == 0:
			backoff = k.opts.BackoffBase
		default:
			backoff = min(2*backoff, k.opts.BackoffCap)
		}

		k.mu.Lock()
		k.restarts++
		k.waiting = "CrashLoopBackOff"
		k.waitingMsg = fmt.Sprintf("back-off %s restarting failed container=kube-apiserver pod=kube-apiserver-%s_kube-system(%s)", backoff, k.n.Name, k.podUID)
		k.mu.Unlock()
		k.n.publishPodStatus()

		if exitErr != nil {
			k.n.kubeletf("kube-apiserver container exited: %v; restarting in %s", exitErr, backoff)
		}

		timer := time.NewTimer(backoff)

		select {
		case <-ctx.Done():
			timer.Stop()

			return
		case <-k.wake:
			timer.Stop()
		case <-timer.C:
		}

		k.mu.Lock()
		k.waiting, k.waitingMsg = "", ""
		k.mu.Unlock()
	}
}

func (k *kubelet) newPod() {
	k.mu.Lock()
	k.podUID = newContainerID()[:32]
	k.podStart = time.Now()
	k.restarts = 0
	k.waiting, k.waitingMsg = "", ""
	k.lastTerm = nil
	k.mu.Unlock()
	k.n.publishPodStatus()
}

type killReason int

const (
	notKilled killReason = iota
	killedForUpdate
	killedUnhealthy
)

// runOnce starts one container and supervises it until it exits, fails its probes or
// the pod spec changes.
func (k *kubelet) runOnce(ctx context.Context, spec ContainerConfig) (error, killReason) { //nolint:revive,staticcheck
	k.mu.Lock()
	rec := &containerRecord{
		Container: Container{
			ContainerConfig: expandPodIP(spec, k.n.IP),
			ID:              newContainerID(),
			Name:            "kube-apiserver",
			Pod:             "kube-system/kube-apiserver-" + k.n.Name,
			RestartCount:    k.restarts,
			StartedAt:       time.Now(),
			Node:            k.n,
		},
		logs:    newLogBuffer(),
		running: true,
	}

	prober, hasProber := k.runner.(Prober)
	rec.ready = !hasProber

	if k.current != nil {
		k.previous = k.current
	}

	k.current = rec
	k.mu.Unlock()
	k.n.publishPodStatus()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	out := &criWriter{buf: rec.logs, stream: "stderr"}
	exited := make(chan error, 1)

	go func() {
		exited <- k.runner.Run(runCtx, rec.Container, out)
	}()

	finish := func(err error, reason killReason) (error, killReason) { //nolint:revive,staticcheck
		out.flush()

		k.mu.Lock()
		rec.running, rec.ready = false, false
		rec.finishedAt = time.Now()
		rec.exitCode, rec.reason = 0, "Completed"

		if err != nil || reason != notKilled {
			rec.exitCode, rec.reason = 1, "Error"
		}

		if reason == killedForUpdate || ctx.Err() != nil {
			rec.exitCode, rec.reason = 137, "Killed"
		}

		k.lastTerm = rec
		k.mu.Unlock()
		k.n.publishPodStatus()

		return err, reason
	}

	var tick <-chan time.Time

	if hasProber {
		t := time.NewTicker(k.opts.ProbePeriod)
		defer t.Stop()

		tick = t.C
	}

	failures := 0

	for {
		select {
		case <-ctx.Done():
			cancel()

			return finish(<-exited, notKilled)
		case err := <-exited:
			if err == nil && runCtx.Err() == nil {
				err = errors.New("container exited")
			}

			return finish(err, notKilled)
		case <-k.wake:
			if want := k.getDesired(); want == nil || !want.equal(spec) {
				cancel()

				return finish(<-exited, killedForUpdate)
			}
		case <-tick:
			ready := prober.Ready(runCtx, rec.Container)

			k.mu.Lock()
			changed := rec.ready != ready
			rec.ready = ready
			k.mu.Unlock()

			if changed {
				k.n.publishPodStatus()
			}

			if time.Since(rec.StartedAt) < k.opts.StartupGrace {
				continue
			}

			if prober.Live(runCtx, rec.Container) {
				failures = 0

				continue
			}

			failures++
			if failures >= k.opts.FailureThreshold {
				fmt.Fprintf(out, "kubelet: Liveness probe failed %d times, container will be restarted\n", failures)
				k.n.kubeletf("kube-apiserver failed liveness probe, killing container %s", rec.ID[:12])
				cancel()
				<-exited

				return finish(errors.New("liveness probe failed"), killedUnhealthy)
			}
		}
	}
}

func (k *kubelet) podID() string {
	k.mu.Lock()
	defer k.mu.Unlock()

	return k.podUID
}

func (k *kubelet) isRunning(r *containerRecord) bool {
	k.mu.Lock()
	defer k.mu.Unlock()

	return r.running
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
