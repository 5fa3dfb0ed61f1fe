package talostest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// podStatus reads the StaticPodStatus of the node's kube-apiserver over the API.
func podStatus(t *testing.T, ctx context.Context, cl *client.Client, n *talostest.Node) (ready bool, restarts int64, waiting string) {
	t.Helper()

	id := "kube-system/kube-apiserver-" + n.Name

	st, err := safe.StateGet[*k8s.StaticPodStatus](client.WithNode(ctx, n.IP), cl.COSI,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodStatusType, id, resource.VersionUndefined))
	if err != nil {
		t.Fatalf("get StaticPodStatus: %v", err)
	}

	ps := st.TypedSpec().PodStatus

	for _, c := range ps["conditions"].([]any) {
		cond := c.(map[string]any)
		if cond["type"] == "Ready" {
			ready = cond["status"] == "True"
		}
	}

	cs := ps["containerStatuses"].([]any)[0].(map[string]any)
	switch v := cs["restartCount"].(type) { // numbers arrive as float64 over the API
	case float64:
		restarts = int64(v)
	case int64:
		restarts = v
	}

	if w, ok := cs["state"].(map[string]any)["waiting"].(map[string]any); ok {
		waiting, _ = w["reason"].(string)
	}

	return ready, restarts, waiting
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
	c := newCluster(t, talostest.ClusterOptions{Runner: runner})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	waitFor(t, "ready", func() bool { ready, _, _ := podStatus(t, ctx, cl, n); return ready })

	broken := withExtraArg(t, n.RunningConfig(), "enable-admission-plugins", "Bogus")
	if _, err := apply(ctx, cl, n.IP, broken, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	// Talos merges enable-admission-plugins additively onto NodeRestriction
	if !hasArg(staticPodCommand(t, ctx, cl, n.IP), "--enable-admission-plugins=NodeRestriction,Bogus") {
		t.Errorf("command: %v", staticPodCommand(t, ctx, cl, n.IP))
	}

	sawBackoff := false

	waitFor(t, "three restarts", func() bool {
		ready, restarts, waiting := podStatus(t, ctx, cl, n)
		if ready && restarts > 0 { // the old pod may still be ready until the kubelet replaces it
			t.Fatal("crashing pod reported ready")
		}

		sawBackoff = sawBackoff || waiting == "CrashLoopBackOff"

		return restarts >= 3
	})

	if !sawBackoff {
		t.Error("never saw CrashLoopBackOff")
	}

	// the crash message is in the container's log
	var logs bytes.Buffer

	stream, err := cl.Logs(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI, "kube-system/kube-apiserver-"+n.Name+":kube-apiserver", false, -1)
	if err != nil {
		t.Fatal(err)
	}

	r, err := client.ReadStream(stream)
	if err != nil {
		t.Fatal(err)
	}

	io.Copy(&logs, r) //nolint:errcheck

	if !strings.Contains(logs.String(), ` stderr F E0000 admission plugin "Bogus" not found`) {
		t.Errorf("logs:\n%s", logs.String())
	}

	// fixing the config starts a new pod that becomes ready
	if _, err := apply(ctx, cl, n.IP, c.ControlPlaneConfig, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "recovered", func() bool { ready, restarts, _ := podStatus(t, ctx, cl, n); return ready && restarts == 0 })
}

func TestLivenessRestart(t *testing.T) {
	ctx := t.Context()
	runner := talostest.StandIn{
		Hang: func(c talostest.ContainerConfig) bool {
			return !talostest.FlagHas(c, "disable-admission-plugins", "ValidatingAdmissionWebhook")
		},
	}
	c := newCluster(t, talostest.ClusterOptions{Runner: runner})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	first := n.Pod().ContainerID

	waitFor(t, "liveness restarts", func() bool { _, restarts, _ := podStatus(t, ctx, cl, n); return restarts >= 2 })

	if ready, _, _ := podStatus(t, ctx, cl, n); ready {
		t.Error("hung pod reported ready")
	}

	// containers: the sandbox, the current and the previous container
	resp, err := cl.Containers(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI)
	if err != nil {
		t.Fatal(err)
	}

	ctrs := resp.Messages[0].Containers
	if len(ctrs) != 3 || ctrs[1].InternalId == first {
		t.Fatalf("containers: %v", ctrs)
	}

	// the previous container's log is still readable by its id, and tells why it died
	prev := ctrs[2]

	stream, err := cl.Logs(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI, prev.Id, false, 1)
	if err != nil {
		t.Fatal(err)
	}

	r, _ := client.ReadStream(stream)

	last, _ := io.ReadAll(r)
	if !strings.Contains(string(last), "Liveness probe failed") || bytes.Count(last, []byte("\n")) != 1 {
		t.Errorf("last line of previous container: %q", last)
	}

	fixed := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, fixed, machine.ApplyConfigurationRequest_TRY, false, time.Minute); err != nil {
		t.Fatal(err)
	}

	// watch until ready, as the tool does
	_, err = cl.COSI.WatchFor(client.WithNode(ctx, n.IP),
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodStatusType, "kube-system/kube-apiserver-"+n.Name, resource.VersionUndefined),
		state.WithCondition(func(r resource.Resource) (bool, error) {
			ps := r.(*k8s.StaticPodStatus).TypedSpec().PodStatus
			for _, c := range ps["conditions"].([]any) {
				if c.(map[string]any)["type"] == "Ready" && c.(map[string]any)["status"] == "True" {
					return true, nil
				}
			}

			return false, nil
		}))
	if err != nil {
		t.Fatal(err)
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

	waitFor(t, "a few lines", func() bool { return n.Pod().Running })
	time.Sleep(100 * time.Millisecond) //nolint:forbidigo // let it log a few lines

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	stream, err := cl.Logs(client.WithNode(ctx, n.IP), "k8s.io", common.ContainerDriver_CRI, "kube-system/kube-apiserver-"+n.Name+":kube-apiserver", true, 1)
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
