package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// Tests of breakglass on an emulated node that behaves like a real Talos
// node: the kubelet polls the manifest, the status lags, the CRI lists in
// no order, list values render as repeated flags.

// fast is a real node's kubelet 200 times faster, polling the manifest every
// 1.2 s (a replacing pod then starts in a later second than the one it
// replaces, as on a node: the pod status's start times are whole seconds).
var fast = talostest.KubeletOptions{TimeScale: 0.005, PollInterval: 1200 * time.Millisecond}

func realNodes(t testing.TB, n int, kubelet talostest.KubeletOptions, runner talostest.PodRunner) (*talostest.Cluster, *talos.Client, State) {
	t.Helper()
	if runner == nil {
		runner = talostest.StandIn{ReadyAfter: time.Millisecond}
	}
	c, err := talostest.NewCluster(t.Context(), talostest.ClusterOptions{ControlPlanes: n, Dir: t.TempDir(), Runner: runner, Kubelet: kubelet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	path, err := c.Talosconfig(role.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := talos.Connect(t.Context(), talos.Options{Talosconfig: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	return c, tc, State{Dir: t.TempDir()}
}

// withExtraArgs returns the node's running config with extraArgs lines
// under cluster.apiServer (the generated config has none).
func withExtraArgs(t *testing.T, n *talostest.Node, lines ...string) []byte {
	t.Helper()
	cfg := string(n.RunningConfig())
	const anchor = "\n    apiServer:\n"
	if !strings.Contains(cfg, anchor) || strings.Contains(cfg, "        extraArgs:") {
		t.Fatal("unexpected generated config")
	}
	ins := anchor + "        extraArgs:\n"
	for _, l := range lines {
		ins += "            " + l + "\n"
	}
	return []byte(strings.Replace(cfg, anchor, ins, 1))
}

func waitRunning(t *testing.T, n *talostest.Node, cond func(talostest.PodState) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := n.WaitPod(ctx, cond); err != nil {
		t.Fatalf("node %s: %v (pod %+v)", n.IP, err, n.Pod())
	}
}

// A Talos 1.13 list value renders as the flag repeated once per item: the
// wait after disable and the status read every occurrence.
func TestDisableOverListFormFlag(t *testing.T) {
	c, tc, st := realNodes(t, 1, fast, nil)
	n := c.Nodes[0]
	cfg := withExtraArgs(t, n, "disable-admission-plugins: [DefaultStorageClass]")
	if _, err := tc.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: cfg, Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	n.PollKubelet()
	waitRunning(t, n, func(p talostest.PodState) bool {
		return p.Running && talostest.FlagHas(p.Config, "disable-admission-plugins", "DefaultStorageClass")
	})

	p, err := planDisable(t.Context(), tc, st, AdmissionOptions{Wait: true, WaitTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.execute(t.Context(), tc, tc, st); err != nil {
		t.Fatalf("disable over a list value: %v", err)
	}
	pod, err := tc.ReadAPIServerPod(t.Context(), n.IP)
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Flags["disable-admission-plugins"]; len(got) != 2 {
		t.Errorf("rendered flags %v: want the flag repeated, once per item", got)
	}
	if got := pod.DisabledPlugins(); !sameSet(got, []string{"DefaultStorageClass", "ValidatingAdmissionWebhook"}) {
		t.Errorf("disabled plugins read as %v", got)
	}
	status, err := AdmissionStatus(t.Context(), tc, st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := status[0].RunningDisabled; !sameSet(got, []string{"DefaultStorageClass", "ValidatingAdmissionWebhook"}) {
		t.Errorf("status shows %v running", got)
	}
}

// Someone's TRY change is pending on the node: planning never cancels it
// (its dry runs are TRY too), and breakglass refuses to stack on it unless
// told to.
func TestPendingTryChange(t *testing.T) {
	c, tc, st := realNodes(t, 1, fast, nil)
	n := c.Nodes[0]
	theirs := withExtraArgs(t, n, `profiling: "false"`)
	if _, err := tc.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: theirs, Mode: talos.Try, TryTimeout: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	p, err := planDisable(t.Context(), tc, st, AdmissionOptions{})
	if err == nil || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "someone's TRY change is pending") {
		t.Fatalf("plan over a pending TRY change: %v, want a conflict naming it", err)
	}
	if p == nil || len(p.Failed) != 1 {
		t.Errorf("plan %+v: the node should be named as not planned", p)
	}
	if pending, _ := n.RollbackPending(); !pending {
		t.Fatal("planning cancelled the pending TRY rollback")
	}
	p, err = planDisable(t.Context(), tc, st, AdmissionOptions{AllowPendingChange: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Nodes[0].PendingChange, "--allow-pending-change") {
		t.Errorf("the plan does not show the pending change: %q", p.Nodes[0].PendingChange)
	}
	if pending, _ := n.RollbackPending(); !pending {
		t.Error("the planning dry run cancelled the pending TRY rollback")
	}
}

// While the kubelet has not yet polled the re-rendered manifest, the old
// pod's container dies and restarts: a new container ID, old flags. The
// wait must not take it for the new pod.
func TestWaitIgnoresRestartOfOldPod(t *testing.T) {
	kubelet := fast
	kubelet.PollInterval = time.Hour // the test decides when the kubelet polls
	c, tc, st := realNodes(t, 1, kubelet, nil)
	n := c.Nodes[0]
	n.RefreshPodStatus()
	p, err := planDisable(t.Context(), tc, st, AdmissionOptions{Wait: true, WaitTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.execute(t.Context(), tc, tc, st) }()

	rendered := func() bool {
		r, _ := n.Rendered()
		return r != nil && talostest.FlagHas(*r, "disable-admission-plugins", "ValidatingAdmissionWebhook")
	}
	for !rendered() {
		time.Sleep(10 * time.Millisecond)
	}
	old := n.Pod()
	if err := n.CrashContainer(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, n, func(p talostest.PodState) bool { return p.Running && p.ContainerID != old.ContainerID })
	n.RefreshPodStatus()
	for {
		st, err := tc.ReadAPIServerStatus(t.Context(), n.IP, n.Name)
		if err == nil && strings.HasSuffix(st.ContainerID, n.Pod().ContainerID) && st.RestartCount == old.RestartCount+1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The wait polls every 100ms: give it several looks at the restarted old pod.
	select {
	case err := <-done:
		t.Fatalf("the wait ended on a restart of the old pod (err %v): it reported the new flags running before the kubelet replaced the pod", err)
	case <-time.After(time.Second):
	}
	replaceAndSee(t, n, old.UID, done)
	if p.Nodes[0].Outcome != "running" {
		t.Errorf("outcome %q", p.Nodes[0].Outcome)
	}
}

// replaceAndSee lets the kubelet poll (replacing pod old by the new flags'
// pod) and Talos refresh the status; the disable running in done must then
// end, and well.
func replaceAndSee(t *testing.T, n *talostest.Node, old string, done <-chan error) {
	t.Helper()
	n.PollKubelet()
	waitRunning(t, n, func(p talostest.PodState) bool {
		return p.Running && p.UID != old && talostest.FlagHas(p.Config, "disable-admission-plugins", "ValidatingAdmissionWebhook")
	})
	n.RefreshPodStatus()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("disable: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not see the new pod")
	}
}

// A node whose etcd is unhealthy would never render the new flags into the
// pod: it is named before anything is applied.
func TestEtcdUnhealthyNodeNamedBeforeApply(t *testing.T) {
	c, tc, st := realNodes(t, 2, fast, nil)
	c.Nodes[1].SetEtcdHealthy(false)
	before := c.Nodes[1].RunningConfig()
	p, err := planDisable(t.Context(), tc, st, AdmissionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Failed, []string{c.Nodes[1].IP}) || len(p.Nodes) != 1 {
		t.Fatalf("planned %d, failed %v: want node %s refused", len(p.Nodes), p.Failed, c.Nodes[1].IP)
	}
	err = p.PlanErr()
	if !errors.Is(err, talos.ErrEtcdUnhealthy) || !strings.Contains(err.Error(), c.Nodes[1].IP) {
		t.Errorf("plan error %v: want the node named with its unhealthy etcd", err)
	}
	if string(c.Nodes[1].RunningConfig()) != string(before) {
		t.Error("the node with unhealthy etcd was changed")
	}
}

// idLogger logs its container's ID, so that the logs read show which
// container they came from.
type idLogger struct{ talostest.StandIn }

func (r idLogger) Run(ctx context.Context, c talostest.Container, logs io.Writer) error {
	fmt.Fprintf(logs, "I0000 container %s\n", c.ID)
	return r.StandIn.Run(ctx, c, logs)
}

// The CRI lists a pod's dead container beside the running one, in no
// order, and Logs without an ID answers with the first listed: diagnose
// reads the container the pod status names, every time.
func TestDiagnoseReadsTheCurrentContainer(t *testing.T) {
	c, tc, _ := realNodes(t, 1, fast, idLogger{talostest.StandIn{ReadyAfter: time.Millisecond}})
	n := c.Nodes[0]
	waitRunning(t, n, func(p talostest.PodState) bool { return p.Running })
	old := n.Pod().ContainerID
	if err := n.CrashContainer(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, n, func(p talostest.PodState) bool { return p.Running && p.ContainerID != old })
	n.RefreshPodStatus()
	current := n.Pod().ContainerID
	for i := range 12 {
		ev, err := diagnose.Gather(t.Context(), tc, nil, diagnose.Options{})
		if err != nil {
			t.Fatal(err)
		}
		logs := strings.Join(ev.Nodes[0].Logs, "\n")
		if !strings.Contains(logs, "container "+current) || strings.Contains(logs, "container "+old) {
			t.Fatalf("look %d: diagnose read another container's log:\n%s", i, logs)
		}
	}
}

// The status Talos publishes lags up to 15 s: planned right after another
// change replaced the pod, breakglass still sees the pod before that one.
// When the refresh then shows the intermediate pod (a new start time, but
// from before breakglass's change), the wait must not take it for its own.
// (Seen on the lab: recover right after the upgrade's pod replacement.)
func TestWaitIgnoresPodStartedBeforeTheChange(t *testing.T) {
	kubelet := fast
	kubelet.PollInterval, kubelet.StatusInterval = time.Hour, time.Hour // the test polls and refreshes
	c, tc, st := realNodes(t, 1, kubelet, nil)
	n := c.Nodes[0]
	waitRunning(t, n, func(p talostest.PodState) bool { return p.Running })
	n.RefreshPodStatus()
	first := n.Pod()
	// each pod in a second of its own: start times are whole seconds
	time.Sleep(time.Until(first.StartTime.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	upgrade := withExtraArgs(t, n, `event-ttl: 2h0m0s`)
	if _, err := tc.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: upgrade, Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	n.PollKubelet()
	waitRunning(t, n, func(p talostest.PodState) bool { return p.Running && p.UID != first.UID })
	intermediate := n.Pod()
	// breakglass's change comes in a later second than the intermediate pod's start
	time.Sleep(time.Until(intermediate.StartTime.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))

	p, err := planDisable(t.Context(), tc, st, AdmissionOptions{Wait: true, WaitTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.execute(t.Context(), tc, tc, st) }()
	for r, _ := n.Rendered(); r == nil || !talostest.FlagHas(*r, "disable-admission-plugins", "ValidatingAdmissionWebhook"); r, _ = n.Rendered() {
		time.Sleep(10 * time.Millisecond)
	}
	n.RefreshPodStatus() // now shows the intermediate pod
	select {
	case err := <-done:
		t.Fatalf("the wait ended on the pod started before the change (err %v)", err)
	case <-time.After(time.Second):
	}
	replaceAndSee(t, n, intermediate.UID, done)
}

// Talos refreshes the StaticPodStatus every 15 s, and the restore's old pod
// is as ready as the new one: the wait learns of the new pod from the node's
// container runtime instead, as soon as it runs. Here the status never
// changes after the first refresh (it still shows the first pod, ready), and
// disable and restore each end once the kubelet has started the new pod,
// naming its container.
func TestWaitSeesTheNewPodWithoutTheStatus(t *testing.T) {
	kubelet := fast
	kubelet.PollInterval, kubelet.StatusInterval = time.Hour, time.Hour // the test polls; the status stays
	c, tc, st := realNodes(t, 1, kubelet, nil)
	n := c.Nodes[0]
	waitRunning(t, n, func(p talostest.PodState) bool { return p.Running })
	n.RefreshPodStatus()
	n.FreezePodStatus(true)

	var mu sync.Mutex
	var said []string
	opts := AdmissionOptions{Wait: true, WaitTimeout: time.Minute, Progress: func(_, msg string) {
		mu.Lock()
		said = append(said, msg)
		mu.Unlock()
	}}
	for _, step := range []struct {
		name     string
		plan     func() (*AdmissionPlan, error)
		disabled bool
	}{
		{"disable", func() (*AdmissionPlan, error) { return planDisable(t.Context(), tc, st, opts) }, true},
		{"restore", func() (*AdmissionPlan, error) { return planRestore(t.Context(), tc, st, opts) }, false},
	} {
		before := n.Pod()
		p, err := step.plan()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.execute(t.Context(), tc, tc, st) }()
		for r, _ := n.Rendered(); r == nil || talostest.FlagHas(*r, "disable-admission-plugins", "ValidatingAdmissionWebhook") != step.disabled; r, _ = n.Rendered() {
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case err := <-done:
			t.Fatalf("%s: the wait ended before the kubelet replaced the pod (err %v)", step.name, err)
		case <-time.After(time.Second): // several looks at the old pod, still running
		}
		n.PollKubelet()
		waitRunning(t, n, func(p talostest.PodState) bool { return p.Running && p.UID != before.UID })
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the wait did not see the new pod with the status unchanged", step.name)
		}
		mu.Lock()
		last := said[len(said)-1]
		mu.Unlock()
		if want := "(container " + n.Pod().ContainerID[:12] + ")"; !strings.HasSuffix(last, want) {
			t.Errorf("%s: said %q, want the new pod's container %s", step.name, last, want)
		}
	}
	if status, err := tc.ReadAPIServerStatus(t.Context(), n.IP, n.Name); err != nil || !status.Ready {
		t.Fatalf("status %+v, %v", status, err)
	}
}
