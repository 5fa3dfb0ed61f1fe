package talostest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// podView is what a client reads of the StaticPodStatus over the API.
type podView struct {
	Found        bool
	Raw          map[string]any
	Phase        string
	StartTime    string
	Ready        bool
	ContainerID  string
	RestartCount int
	Running      bool
	Waiting      string
	WaitingMsg   string
	LastID       string // lastState.terminated.containerID
	LastExitCode int
}

// podStatus reads the StaticPodStatus of the node's kube-apiserver over the API.
func podStatus(t *testing.T, ctx context.Context, cl *client.Client, n *talostest.Node) podView {
	t.Helper()

	st, err := safe.StateGet[*k8s.StaticPodStatus](client.WithNode(ctx, n.IP), cl.COSI,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodStatusType, "kube-system/kube-apiserver-"+n.Name, resource.VersionUndefined))
	if state.IsNotFoundError(err) {
		return podView{}
	}

	if err != nil {
		t.Fatalf("get StaticPodStatus: %v", err)
	}

	ps := st.TypedSpec().PodStatus
	v := podView{Found: true, Raw: ps}
	v.Phase, _ = ps["phase"].(string)
	v.StartTime, _ = ps["startTime"].(string)

	conds, _ := ps["conditions"].([]any)
	for _, c := range conds {
		if cond := c.(map[string]any); cond["type"] == "Ready" {
			v.Ready = cond["status"] == "True"
		}
	}

	css, _ := ps["containerStatuses"].([]any)
	if len(css) == 0 {
		return v
	}

	cs := css[0].(map[string]any)
	v.ContainerID, _ = cs["containerID"].(string)
	v.RestartCount = toInt(cs["restartCount"])
	st0, _ := cs["state"].(map[string]any)
	_, v.Running = st0["running"]

	if w, ok := st0["waiting"].(map[string]any); ok {
		v.Waiting, _ = w["reason"].(string)
		v.WaitingMsg, _ = w["message"].(string)
	}

	if last, ok := cs["lastState"].(map[string]any)["terminated"].(map[string]any); ok {
		v.LastID, _ = last["containerID"].(string)
		v.LastExitCode = toInt(last["exitCode"])
	}

	return v
}

func toInt(v any) int {
	switch n := v.(type) { // numbers arrive as float64 over the API
	case float64:
		return int(n)
	case int64:
		return int(n)
	}

	return -1
}

// waitPod waits for the kubelet's live view of the pod to satisfy cond.
func waitPod(t *testing.T, n *talostest.Node, what string, cond func(talostest.PodState) bool) talostest.PodState {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	p, err := n.WaitPod(ctx, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v (pod %+v)", what, err, p)
	}

	return p
}

func running(p talostest.PodState) bool { return p.Running }

func startTime(p talostest.PodState) string { return p.StartTime.UTC().Format(time.RFC3339) }

// containerLogs reads a container's whole log through the Logs API.
func containerLogs(t *testing.T, ctx context.Context, cl *client.Client, n *talostest.Node, id string) string {
	t.Helper()

	b, err := readAll(cl.Logs(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI, id, false, -1))
	if err != nil {
		t.Fatalf("logs %s: %v", id, err)
	}

	return string(b)
}

func apiServerID(n *talostest.Node) string {
	return "kube-system/kube-apiserver-" + n.Name + ":kube-apiserver"
}

func TestCrashLoopBackOff(t *testing.T) {
	ctx := t.Context()
	runner := talostest.StandIn{
		ReadyAfter: 20 * time.Millisecond,
		Crash: func(c talostest.ContainerConfig) string {
			if talostest.FlagHas(c, "enable-admission-plugins", "Bogus") {
				return `admission plugin "Bogus" not found`
			}

			return ""
		},
	}
	// the first exit restarts at once; the back-off of the second outlasts the test
	c := newCluster(t, talostest.ClusterOptions{Runner: runner, Kubelet: talostest.KubeletOptions{TimeScale: 0.01, BackoffBase: time.Hour}})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	good := waitPod(t, n, "running", running)

	broken := withExtraArg(t, n.RunningConfig(), "enable-admission-plugins", "Bogus")
	if _, err := apply(ctx, cl, n.IP, broken, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	// Talos merges enable-admission-plugins additively onto NodeRestriction
	if !hasArg(staticPodCommand(t, ctx, cl, n.IP), "--enable-admission-plugins=NodeRestriction,Bogus") {
		t.Errorf("command: %v", staticPodCommand(t, ctx, cl, n.IP))
	}

	n.PollKubelet()

	p := waitPod(t, n, "CrashLoopBackOff", func(p talostest.PodState) bool { return p.Waiting == "CrashLoopBackOff" })
	if p.UID == good.UID || p.RestartCount != 1 || p.Running || p.Ready {
		t.Fatalf("crash-looping pod: %+v", p)
	}

	n.RefreshPodStatus()

	v := podStatus(t, ctx, cl, n)
	if v.Ready || v.Running || v.Waiting != "CrashLoopBackOff" || v.RestartCount != 1 || v.Phase != "Running" {
		t.Errorf("status: %+v", v)
	}

	if !strings.Contains(v.WaitingMsg, "back-off 1h0m0s restarting failed container=kube-apiserver pod=kube-apiserver-"+n.Name+"_kube-system("+p.UID+")") {
		t.Errorf("waiting message %q", v.WaitingMsg)
	}

	// the container that exited last: still the pod's containerID, and its lastState
	if v.ContainerID != "containerd://"+p.ContainerID || v.LastID != v.ContainerID || v.LastExitCode != 1 {
		t.Errorf("container %s, last state %s (exit %d), want both containerd://%s, exit 1", v.ContainerID, v.LastID, v.LastExitCode, p.ContainerID)
	}

	if v.StartTime != startTime(p) {
		t.Errorf("startTime %s, want %s", v.StartTime, startTime(p))
	}

	// the crash message is in that container's log
	if logs := containerLogs(t, ctx, cl, n, apiServerID(n)+":"+p.ContainerID[:12]); !strings.Contains(logs, ` stderr F E0000 admission plugin "Bogus" not found`) {
		t.Errorf("logs:\n%s", logs)
	}

	// fixing the config: a new pod, which runs
	if _, err := apply(ctx, cl, n.IP, c.ControlPlaneConfig, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	n.PollKubelet()

	fixed := waitPod(t, n, "the fixed pod", running)
	if fixed.UID == p.UID || fixed.RestartCount != 0 || talostest.FlagHas(fixed.Config, "enable-admission-plugins", "Bogus") {
		t.Fatalf("fixed pod: %+v", fixed)
	}

	n.RefreshPodStatus()

	if v := podStatus(t, ctx, cl, n); !v.Ready || v.RestartCount != 0 || v.LastID != "" || v.ContainerID != "containerd://"+fixed.ContainerID {
		t.Errorf("fixed pod's status: %+v", v)
	}
}

func TestHungContainerIsNeverRestarted(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{Runner: talostest.StandIn{Hang: func(talostest.ContainerConfig) bool { return true }}})
	cl := newClient(t, c, role.Reader)
	n := c.Nodes[0]

	first := waitPod(t, n, "running", running)

	waitFor(t, "the hang in the log", func() bool {
		return strings.Contains(containerLogs(t, ctx, cl, n, apiServerID(n)), "start-up blocked")
	})

	for range 3 {
		n.PollKubelet()
		n.RefreshPodStatus()
	}

	// no probes: the pod is ready whenever its container runs
	v := podStatus(t, ctx, cl, n)
	if !v.Ready || !v.Running || v.RestartCount != 0 || v.ContainerID != "containerd://"+first.ContainerID {
		t.Errorf("hung pod's status: %+v", v)
	}

	if p := n.Pod(); p.ContainerID != first.ContainerID || p.RestartCount != 0 {
		t.Errorf("hung container replaced: %+v", p)
	}
}

func TestHungContainerGivesUp(t *testing.T) {
	ctx := t.Context()
	runner := talostest.StandIn{ReadyAfter: time.Millisecond, Hang: func(talostest.ContainerConfig) bool { return true }, GiveUpAfter: 20 * time.Millisecond}
	c := newCluster(t, talostest.ClusterOptions{Runner: runner, Kubelet: talostest.KubeletOptions{TimeScale: 0.01, BackoffBase: time.Hour}})
	cl := newClient(t, c, role.Reader)
	n := c.Nodes[0]

	// it exits by itself: restarted at once, then it exits again and backs off
	p := waitPod(t, n, "CrashLoopBackOff", func(p talostest.PodState) bool { return p.Waiting == "CrashLoopBackOff" })
	if p.RestartCount != 1 {
		t.Errorf("restart count %d", p.RestartCount)
	}

	if logs := containerLogs(t, ctx, cl, n, apiServerID(n)+":"+p.ContainerID); !strings.Contains(logs, `PostStartHook "rbac/bootstrap-roles" failed`) {
		t.Errorf("logs:\n%s", logs)
	}

	// the kubelet keeps one exited container per container: the sandbox and the newest
	resp, err := cl.Containers(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI)
	if err != nil {
		t.Fatal(err)
	}

	ctrs := resp.Messages[0].Containers
	if len(ctrs) != 2 || ctrs[0].Status != "SANDBOX_READY" || ctrs[1].InternalId != p.ContainerID || ctrs[1].Status != "CONTAINER_EXITED" {
		t.Errorf("containers: %v", ctrs)
	}
}

// echo is a PodRunner that logs its container ID, then runs until stopped.
type echo struct{}

func (echo) Run(ctx context.Context, c talostest.Container, logs io.Writer) error {
	fmt.Fprintf(logs, "container %s\n", c.ID)
	<-ctx.Done()

	return nil
}

func TestKubeletNoticesAChangeAtItsPoll(t *testing.T) {
	ctx := t.Context()
	// the test decides when the kubelet polls; the old container stops only when killed
	cl, n := polledByHand(t, talostest.StandIn{ReadyAfter: time.Millisecond, ShutdownDelay: time.Hour},
		talostest.KubeletOptions{TerminationGrace: time.Hour})

	first := waitPod(t, n, "running", running)
	n.RefreshPodStatus()

	edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	// the manifest changed at once; the kubelet has not fetched it
	if !hasArg(staticPodCommand(t, ctx, cl, n.IP), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Fatal("static pod not re-rendered")
	}

	if p := n.Pod(); p.UID != first.UID || p.ContainerID != first.ContainerID || talostest.FlagHas(p.Config, "disable-admission-plugins", "ValidatingAdmissionWebhook") {
		t.Fatalf("the kubelet acted before its poll: %+v", p)
	}

	// the poll: the old pod gets SIGTERM, the new one waits for it
	n.PollKubelet()

	p := n.Pod()
	if !p.Present || p.UID == first.UID || !p.StartTime.IsZero() || !p.Terminating || p.ContainerID != "" || p.Running {
		t.Fatalf("pod while the old one stops: %+v", p)
	}

	n.RefreshPodStatus()

	if v := podStatus(t, ctx, cl, n); !v.Found || len(v.Raw) != 1 || v.Phase != "Pending" {
		t.Errorf("status of the pod waiting to start: %v", v.Raw)
	}

	oldLog := apiServerID(n) + ":" + first.ContainerID

	waitFor(t, "SIGTERM in the old container's log", func() bool {
		return strings.Contains(containerLogs(t, ctx, cl, n, oldLog), "received SIGTERM")
	})

	// the old container dies: the new pod starts
	if err := n.CrashContainer(); err != nil {
		t.Fatal(err)
	}

	p = waitPod(t, n, "the new pod", running)
	if p.Terminating || p.RestartCount != 0 || !p.StartTime.After(first.StartTime) || !talostest.FlagHas(p.Config, "disable-admission-plugins", "ValidatingAdmissionWebhook") {
		t.Errorf("new pod: %+v", p)
	}

	n.RefreshPodStatus()

	if v := podStatus(t, ctx, cl, n); !v.Ready || v.StartTime != startTime(p) || v.RestartCount != 0 || v.LastID != "" || v.ContainerID != "containerd://"+p.ContainerID {
		t.Errorf("new pod's status: %+v", v)
	}

	// killed, it did not finish its shutdown; its log stays readable by ID
	if logs := containerLogs(t, ctx, cl, n, oldLog); strings.Contains(logs, "stopped") {
		t.Errorf("old container's log:\n%s", logs)
	}
}

func TestTerminationGrace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shutdown time.Duration
		grace    time.Duration
		killed   bool
	}{
		{"exits within the grace period", 10 * time.Millisecond, time.Hour, false},
		{"killed after the grace period", time.Hour, 50 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			cl, n := polledByHand(t, talostest.StandIn{ReadyAfter: time.Millisecond, ShutdownDelay: tc.shutdown},
				talostest.KubeletOptions{TerminationGrace: tc.grace})
			first := waitPod(t, n, "running", running)

			edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
			if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
				t.Fatal(err)
			}

			polled := time.Now()

			n.PollKubelet()
			waitPod(t, n, "the new pod", func(p talostest.PodState) bool { return p.Running && p.UID != first.UID })

			if took := time.Since(polled); took < min(tc.shutdown, tc.grace) {
				t.Errorf("new pod after %s, before the old one could stop", took)
			}

			logs := containerLogs(t, ctx, cl, n, apiServerID(n)+":"+first.ContainerID)
			if strings.Contains(logs, "stand-in kube-apiserver: stopped") == tc.killed {
				t.Errorf("old container's log (killed %v):\n%s", tc.killed, logs)
			}
		})
	}
}

func TestPodStatusLagsAndFreezes(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{Runner: talostest.StandIn{ReadyAfter: time.Millisecond},
		Kubelet: talostest.KubeletOptions{TimeScale: 0.01, StatusInterval: time.Hour, BackoffBase: time.Hour}})
	cl := newClient(t, c, role.Reader)
	n := c.Nodes[0]

	first := waitPod(t, n, "running", running)

	// Talos has not asked the kubelet yet
	if v := podStatus(t, ctx, cl, n); v.Found {
		t.Fatalf("status before Talos's first refresh: %v", v.Raw)
	}

	n.RefreshPodStatus()

	v := podStatus(t, ctx, cl, n)
	if !v.Ready || !v.Running || v.RestartCount != 0 || v.ContainerID != "containerd://"+first.ContainerID || v.StartTime != startTime(first) || v.LastID != "" {
		t.Fatalf("status: %+v", v)
	}

	// a restart of the same pod: same UID and startTime, new container, one more restart
	if err := n.CrashContainer(); err != nil {
		t.Fatal(err)
	}

	p := n.Pod()
	if p.UID != first.UID || !p.StartTime.Equal(first.StartTime) || p.ContainerID == first.ContainerID || p.RestartCount != 1 || !p.Running {
		t.Fatalf("after a crash: %+v", p)
	}

	// the status lags until the next refresh
	if lag := podStatus(t, ctx, cl, n); lag.ContainerID != v.ContainerID || lag.RestartCount != 0 {
		t.Errorf("status refreshed without a refresh: %+v", lag)
	}

	n.RefreshPodStatus()

	v = podStatus(t, ctx, cl, n)
	if !v.Ready || v.RestartCount != 1 || v.ContainerID != "containerd://"+p.ContainerID || v.StartTime != startTime(first) ||
		v.LastID != "containerd://"+first.ContainerID || v.LastExitCode != 1 {
		t.Errorf("status after a restart: %+v", v)
	}

	// frozen: the status keeps its last values whatever happens
	n.FreezePodStatus(true)

	if err := n.CrashContainer(); err != nil { // the second exit backs off
		t.Fatal(err)
	}

	if p := n.Pod(); p.Waiting != "CrashLoopBackOff" {
		t.Fatalf("after a second crash: %+v", p)
	}

	n.RefreshPodStatus()

	if frozen := podStatus(t, ctx, cl, n); frozen.Waiting != "" || !frozen.Ready || frozen.ContainerID != v.ContainerID {
		t.Errorf("frozen status changed: %+v", frozen)
	}

	n.FreezePodStatus(false)
	n.RefreshPodStatus()

	if v := podStatus(t, ctx, cl, n); v.Ready || v.Waiting != "CrashLoopBackOff" || v.RestartCount != 1 {
		t.Errorf("status after the freeze: %+v", v)
	}
}

func TestContainersAndLogs(t *testing.T) {
	ctx := t.Context()
	cl, n := polledByHand(t, echo{}, talostest.KubeletOptions{GCInterval: time.Hour})

	first := waitPod(t, n, "running", running)

	if err := n.CrashContainer(); err != nil { // restarted at once, in the same pod
		t.Fatal(err)
	}

	second := n.Pod()
	ids := map[string]string{first.ContainerID: "CONTAINER_EXITED", second.ContainerID: "CONTAINER_RUNNING"}

	// every call lists the sandbox, then both containers in some order
	orders := map[string]bool{}

	for i := 0; i < 200 && len(orders) < 2; i++ {
		resp, err := cl.Containers(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI)
		if err != nil {
			t.Fatal(err)
		}

		ctrs := resp.Messages[0].Containers
		if len(ctrs) != 3 || ctrs[0].Status != "SANDBOX_READY" || ctrs[0].Uid != first.UID || ctrs[0].Id != "kube-system/kube-apiserver-"+n.Name {
			t.Fatalf("containers: %v", ctrs)
		}

		for _, ct := range ctrs[1:] {
			if ids[ct.InternalId] != ct.Status || ct.Id != apiServerID(n)+":"+ct.InternalId[:12] || ct.PodId != ctrs[0].Id {
				t.Fatalf("container %v, want one of %v", ct, ids)
			}
		}

		orders[ctrs[1].InternalId] = true
	}

	if len(orders) != 2 {
		t.Error("Containers always lists the containers in the same order")
	}

	// without an ID, Logs reads the first container the runtime lists: either
	logged := func(id string) string {
		_, after, _ := strings.Cut(strings.TrimSpace(containerLogs(t, ctx, cl, n, id)), " stderr F container ")

		return after
	}

	seen := map[string]bool{}

	for i := 0; i < 200 && len(seen) < 2; i++ {
		seen[logged(apiServerID(n))] = true
	}

	if !seen[first.ContainerID] || !seen[second.ContainerID] {
		t.Errorf("logs without an ID came from %v", seen)
	}

	// with an ID (the listed 12 digits, or the full ID), exactly that container's
	for suffix, want := range map[string]string{first.ContainerID[:12]: first.ContainerID, second.ContainerID: second.ContainerID} {
		if got := logged(apiServerID(n) + ":" + suffix); got != want {
			t.Errorf("logs of %s came from %s", suffix, got)
		}
	}

	// an unknown ID: machined's plain error, gRPC Unknown
	_, err := readAll(cl.Logs(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI, apiServerID(n)+":nothex", false, -1))
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), `container "`+apiServerID(n)+`:nothex" not found`) {
		t.Errorf("unknown container ID: %v", err)
	}

	// a replaced pod: its sandbox is stopped, its containers are not listed, and
	// Logs still finds them until the garbage collection
	edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	n.PollKubelet()

	third := waitPod(t, n, "the new pod", func(p talostest.PodState) bool { return p.Running && p.UID != first.UID })

	resp, err := cl.Containers(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI)
	if err != nil {
		t.Fatal(err)
	}

	if ctrs := resp.Messages[0].Containers; len(ctrs) != 2 || ctrs[0].Uid != third.UID || ctrs[1].InternalId != third.ContainerID {
		t.Errorf("containers after the replacement: %v", ctrs)
	}

	if logs := containerLogs(t, ctx, cl, n, apiServerID(n)+":"+second.ContainerID); !strings.Contains(logs, second.ContainerID) {
		t.Errorf("old pod's container log:\n%s", logs)
	}

	old := false
	for i := 0; i < 200 && !old; i++ {
		old = !strings.Contains(containerLogs(t, ctx, cl, n, apiServerID(n)), third.ContainerID)
	}

	if !old {
		t.Error("logs without an ID never came from the old pod")
	}

	talostest.CollectGarbage(n)

	_, err = readAll(cl.Logs(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI, apiServerID(n)+":"+second.ContainerID, false, -1))
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("old pod's container after garbage collection: %v", err)
	}

	if logs := containerLogs(t, ctx, cl, n, apiServerID(n)); !strings.Contains(logs, third.ContainerID) {
		t.Errorf("logs without an ID after garbage collection:\n%s", logs)
	}
}

func TestEtcdUnhealthyHoldsTheStaticPod(t *testing.T) {
	ctx := t.Context()
	cl, n := polledByHand(t, nil, talostest.KubeletOptions{})

	first := waitPod(t, n, "running", running)
	before := staticPodCommand(t, ctx, cl, n.IP)

	n.SetEtcdHealthy(false)

	edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	// the config is applied; the static pod is not rendered
	if !bytes.Equal(machineConfig(t, ctx, cl, n.IP), edited) {
		t.Error("running config not applied")
	}

	if after := staticPodCommand(t, ctx, cl, n.IP); !slicesEqual(after, before) {
		t.Errorf("static pod re-rendered while etcd is unhealthy: %v", after)
	}

	if r, _ := n.Rendered(); talostest.FlagHas(*r, "disable-admission-plugins", "ValidatingAdmissionWebhook") {
		t.Error("Rendered shows the pending render")
	}

	n.PollKubelet()

	if p := n.Pod(); p.UID != first.UID || p.ContainerID != first.ContainerID {
		t.Errorf("the kubelet replaced the pod: %+v", p)
	}

	// etcd back: the pending render happens, the kubelet takes it at its next poll
	n.SetEtcdHealthy(true)

	if !hasArg(staticPodCommand(t, ctx, cl, n.IP), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Fatal("static pod not rendered once etcd is healthy")
	}

	n.PollKubelet()

	p := waitPod(t, n, "the new pod", func(p talostest.PodState) bool { return p.Running && p.UID != first.UID })
	if !talostest.FlagHas(p.Config, "disable-admission-plugins", "ValidatingAdmissionWebhook") {
		t.Errorf("new pod: %+v", p)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func TestKubeletOptionsResolved(t *testing.T) {
	real := talostest.KubeletOptions{}.Resolved()
	if real.PollInterval != 20*time.Second || real.TerminationGrace != 30*time.Second || real.BackoffBase != 10*time.Second ||
		real.BackoffCap != 5*time.Minute || real.StatusInterval != 15*time.Second || real.GCInterval != time.Minute || real.TimeScale != 1 {
		t.Errorf("real times: %+v", real)
	}

	fast := talostest.KubeletOptions{TimeScale: 0.01, BackoffBase: time.Hour}.Resolved()
	if fast.PollInterval != 200*time.Millisecond || fast.StatusInterval != 150*time.Millisecond || fast.BackoffBase != time.Hour || fast.BackoffCap != 3*time.Second {
		t.Errorf("scaled times: %+v", fast)
	}
}

// ticker is a PodRunner that logs a numbered line every 20ms.
type ticker struct{}

func (ticker) Run(ctx context.Context, _ talostest.Container, logs io.Writer) error {
	for i := 0; ; i++ {
		fmt.Fprintf(logs, "tick %d\n", i)

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestLogsFollow(t *testing.T) {
	c := newCluster(t, talostest.ClusterOptions{Runner: ticker{}})
	cl := newClient(t, c, role.Reader)
	n := c.Nodes[0]

	waitPod(t, n, "running", running)
	waitFor(t, "a few lines", func() bool {
		return strings.Count(containerLogs(t, t.Context(), cl, n, apiServerID(n)), "\n") >= 3
	})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	stream, err := cl.Logs(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI, apiServerID(n), true, 1)
	if err != nil {
		t.Fatal(err)
	}

	// tail 1: exactly one old line, then new lines as they come
	var lines []string

	for len(lines) < 4 {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}

		if len(lines) == 0 && bytes.Count(msg.Bytes, []byte("\n")) != 1 {
			t.Fatalf("tail 1 sent %q", msg.Bytes)
		}

		lines = append(lines, strings.Split(strings.TrimSpace(string(msg.Bytes)), "\n")...)
	}

	for i := 1; i < len(lines); i++ {
		var a, b int

		fmt.Sscanf(lines[i-1][strings.Index(lines[i-1], "tick"):], "tick %d", &a) //nolint:errcheck
		fmt.Sscanf(lines[i][strings.Index(lines[i], "tick"):], "tick %d", &b)     //nolint:errcheck

		if b != a+1 || !strings.Contains(lines[i], " stderr F tick ") {
			t.Fatalf("lines not consecutive CRI lines: %q", lines)
		}
	}

	cancel()

	// wrong namespace/driver are refused like on a node
	_, err = readAll(cl.Logs(client.WithNode(t.Context(), n.IP), "", common.ContainerDriver_CRI, "x", false, 1))
	wantCode(t, err, codes.InvalidArgument)

	_, err = readAll(cl.Logs(client.WithNode(t.Context(), n.IP), "k8s.io", common.ContainerDriver_CRI, "kube-system/nope:nope", false, 1))
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown container: %v", err)
	}
}

func readAll(stream machine.MachineService_LogsClient, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}

	r, err := client.ReadStream(stream)
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer

	_, err = io.Copy(&buf, r)

	return buf.Bytes(), errors.Join(err, r.Close())
}

// A static pod's UID is the hash of its whole manifest, and the manifest
// carries the APIServerConfig's version: a change and its undo before the
// kubelet's poll make a manifest whose container is the one running, but it
// is still a new pod, which replaces the running one.
func TestKubeletReplacesThePodOnANewManifestWithTheSameContainer(t *testing.T) {
	ctx := t.Context()
	cl, n := polledByHand(t, talostest.StandIn{ReadyAfter: time.Millisecond}, talostest.KubeletOptions{})
	original := n.RunningConfig()
	first := waitPod(t, n, "running", running)

	disabled := withExtraArg(t, original, "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, disabled, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}
	n.PollKubelet()
	second := waitPod(t, n, "the disabled flags' pod", func(p talostest.PodState) bool { return p.Running && p.UID != first.UID })

	// undone and done again, the kubelet polling only at the end
	for _, cfg := range [][]byte{original, disabled} {
		if _, err := apply(ctx, cl, n.IP, cfg, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
			t.Fatal(err)
		}
	}
	n.PollKubelet()
	third := waitPod(t, n, "a new pod", func(p talostest.PodState) bool { return p.Running && p.UID != second.UID })
	if !slices.Equal(third.Config.Command, second.Config.Command) {
		t.Errorf("the new pod runs %v, want the same container as before %v", third.Config.Command, second.Config.Command)
	}

	// and a poll with no change since keeps it
	n.PollKubelet()
	if p := n.Pod(); p.UID != third.UID || !p.Running {
		t.Errorf("a poll without a change replaced the pod: %+v", p)
	}
}
