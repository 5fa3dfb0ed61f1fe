package talostest_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// A kubelet restart through the Talos API, as Talos does it: the call returns once
// the service stopped; the running container is kept (same pod, same container, no
// restart); the StaticPodStatus goes with the stopped kubelet and comes back only
// after the new one synced; and the new kubelet fetches the manifest at once, so a
// pod re-rendered before the restart is replaced without waiting for the poll.
func TestKubeletRestartKeepsTheRunningContainer(t *testing.T) {
	ctx := t.Context()
	runner := talostest.StandIn{ReadyAfter: time.Millisecond}
	c := newCluster(t, talostest.ClusterOptions{Runner: runner, Kubelet: talostest.KubeletOptions{TimeScale: 0.01,
		PollInterval: time.Hour, RestartStop: 50 * time.Millisecond, RestartStart: 300 * time.Millisecond}})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	first := waitPod(t, n, "running", running)
	n.RefreshPodStatus()

	if v := podStatus(t, ctx, cl, n); !v.Found {
		t.Fatal("no StaticPodStatus before the restart")
	}

	start := time.Now()
	if _, err := cl.ServiceRestart(client.WithNode(ctx, n.IP), "kubelet"); err != nil {
		t.Fatal(err)
	}

	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("ServiceRestart returned after %s, before the service stopped", d)
	}

	// stopped: the status is gone, the container runs on
	if v := podStatus(t, ctx, cl, n); v.Found {
		t.Errorf("StaticPodStatus while the kubelet is stopped: %v", v.Raw)
	}

	if p := n.Pod(); !p.Running || p.ContainerID != first.ContainerID {
		t.Errorf("the container did not survive the kubelet's stop: %+v", p)
	}

	n.RefreshPodStatus() // Talos's refresh while the kubelet starts: nothing yet

	if v := podStatus(t, ctx, cl, n); v.Found {
		t.Errorf("StaticPodStatus before the new kubelet synced: %v", v.Raw)
	}

	waitFor(t, "the new kubelet's sync", func() bool {
		n.RefreshPodStatus()
		return podStatus(t, ctx, cl, n).Found
	})

	p := n.Pod()
	if !p.Running || p.UID != first.UID || p.ContainerID != first.ContainerID || p.RestartCount != 0 || !p.StartTime.Equal(first.StartTime) {
		t.Errorf("after the restart: %+v, before: %+v", p, first)
	}

	if v := podStatus(t, ctx, cl, n); !v.Ready || v.ContainerID != "containerd://"+first.ContainerID || v.RestartCount != 0 {
		t.Errorf("status after the restart: %+v", v)
	}

	// a re-rendered pod: the restarted kubelet fetches it at once (the poll is an hour)
	edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	if _, err := cl.ServiceRestart(client.WithNode(ctx, n.IP), "kubelet"); err != nil {
		t.Fatal(err)
	}

	p = waitPod(t, n, "the new pod", func(p talostest.PodState) bool {
		return p.Running && talostest.FlagHas(p.Config, "disable-admission-plugins", "ValidatingAdmissionWebhook")
	})
	if p.UID == first.UID {
		t.Errorf("the new manifest ran in the old pod: %+v", p)
	}
}

// Talos refuses a restart where the node cannot take it: a node whose API is not up
// answers Unavailable, and the kubelet goes on as it was.
func TestKubeletRestartRefusedWhenTheNodeIsNotUp(t *testing.T) {
	ctx := t.Context()
	cl, n := polledByHand(t, talostest.StandIn{ReadyAfter: time.Millisecond}, talostest.KubeletOptions{})

	first := waitPod(t, n, "running", running)
	n.Stop()
	t.Cleanup(func() { _ = n.Start() })

	_, err := cl.ServiceRestart(client.WithNode(ctx, n.IP), "kubelet")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("restart on a node that is not up: %v, want Unavailable", err)
	}

	if p := n.Pod(); !p.Running || p.ContainerID != first.ContainerID {
		t.Errorf("pod after a refused restart: %+v", p)
	}
}

// The poll's phase is drawn from the seed and the node, not from when a change comes:
// the same seed gives the same phase, another seed another one.
func TestKubeletPollPhaseIsSeeded(t *testing.T) {
	o := talostest.KubeletOptions{PollSeed: 1}.Resolved()
	a, b := o.Phase("cp-1"), o.Phase("cp-1")
	if a != b || a < 0 || a >= 20*time.Second {
		t.Fatalf("phase %s then %s", a, b)
	}

	seen := map[time.Duration]bool{}
	for seed := range uint64(8) {
		seen[talostest.KubeletOptions{PollSeed: seed}.Resolved().Phase("cp-1")] = true
	}

	if len(seen) < 6 {
		t.Errorf("8 seeds gave %d phases", len(seen))
	}

	if p := (talostest.KubeletOptions{PollPhase: 3 * time.Second}).Resolved().Phase("cp-1"); p != 3*time.Second {
		t.Errorf("PollPhase 3s: %s", p)
	}
}
