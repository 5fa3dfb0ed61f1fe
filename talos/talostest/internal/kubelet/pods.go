package kubelet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
)

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
	out        *host.LineWriter
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
func (k *Kubelet) stopPodLocked(p *podRecord) {
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

func (k *Kubelet) terminateLocked(c *containerRecord, grace time.Duration) {
	c.stopping = true
	c.cancel()
	c.killTimer = time.AfterFunc(grace, func() {
		k.logf("container %s did not stop within the grace period: killing it", c.ID[:12])
		c.killNow()
	})
}

func (k *Kubelet) podStoppedLocked(p *podRecord) {
	p.stopping, p.sandboxReady = false, false
}

// startPendingLocked starts the pod the kubelet has once no other pod is
// stopping: a static pod starts only after its previous instance ended.
func (k *Kubelet) startPendingLocked() {
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

func (k *Kubelet) startContainerLocked(p *podRecord) {
	restarts := 0
	if last := p.newest(); last != nil {
		restarts = last.RestartCount + 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	kill := make(chan struct{})
	c := &containerRecord{
		Container: Container{
			ContainerConfig: expandPodIP(p.spec, k.host.IP),
			ID:              newContainerID(),
			Name:            "kube-apiserver",
			Pod:             k.podName(),
			PodUID:          p.uid,
			RestartCount:    restarts,
			StartedAt:       time.Now(),
			Node:            Node{Name: k.host.Name, IP: k.host.IP},
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
	c.out = criLog(c.logs)
	p.containers = append(p.containers, c)
	p.waiting, p.waitingMsg = "", ""

	k.logf("started container kube-apiserver %s of pod %s (restart count %d)", c.ID[:12], p.uid, restarts)

	go func() {
		err := k.runner.Run(ctx, c.Container, c.out)
		close(c.exited)
		k.post(func() { k.containerExited(c, err) })
	}()
}

// containerExited records an exit; one the kubelet did not ask for restarts the
// container in the same pod after the back-off.
func (k *Kubelet) containerExited(c *containerRecord, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	defer close(c.handled)
	defer k.notifyLocked()

	c.out.Flush()
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
		k.logf("container kube-apiserver %s exited (%v): restarting", c.ID[:12], err)
		k.startContainerLocked(p)

		return
	}

	p.waiting = "CrashLoopBackOff"
	p.waitingMsg = fmt.Sprintf("back-off %s restarting failed container=kube-apiserver pod=kube-apiserver-%s_kube-system(%s)", p.backoff, k.host.Name, p.uid)
	k.logf("container kube-apiserver %s exited (%v): %s", c.ID[:12], err, p.waitingMsg)
	p.restartIn = time.AfterFunc(p.backoff, func() { k.post(func() { k.restartAfterBackoff(p) }) })
}

func (k *Kubelet) restartAfterBackoff(p *podRecord) {
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
func (k *Kubelet) keepNewestDeadLocked(p *podRecord) {
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
func (k *Kubelet) gc() {
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
func (k *Kubelet) shutdown() {
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

// Crash makes the running kube-apiserver container exit with an error, as if the
// process died, and returns once the kubelet has recorded the exit (and restarted
// it, when no back-off is due). The restart is in the same pod: same pod UID and
// startTime, a new container ID, the restart count up by one.
func (k *Kubelet) Crash() error {
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

// StopAllPods is the CRI stopping and removing every pod sandbox at once, as a
// reset's stopAllPods does once the kubelet service stopped: every container is
// killed (no grace) and the pods go. It returns once every container exited.
func (k *Kubelet) StopAllPods() {
	var killed []*containerRecord

	k.do(func() {
		k.mu.Lock()
		defer k.mu.Unlock()

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

	k.do(func() {
		k.mu.Lock()
		k.pods = nil
		k.notifyLocked()
		k.mu.Unlock()
	})

	k.logf("kubelet stopped: every pod sandbox stopped")
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

// CollectGarbage runs the kubelet's container garbage collection now.
func (k *Kubelet) CollectGarbage() { k.do(k.gc) }
