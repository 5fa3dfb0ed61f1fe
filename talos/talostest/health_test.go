package talostest_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// health runs the server-side health check as talosctl health does (nodes
// metadata with the one node) and returns its lines and how it ended.
func health(ctx context.Context, cl *client.Client, node string, wait time.Duration) ([]string, error) {
	stream, err := cl.ClusterHealthCheck(client.WithNodes(ctx, node), wait, &clusterapi.ClusterInfo{})
	if err != nil {
		return nil, err
	}

	if err := stream.CloseSend(); err != nil {
		return nil, err
	}

	var lines []string

	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return lines, nil
		}

		if err != nil {
			return lines, err
		}

		if e := msg.GetMetadata().GetError(); e != "" {
			return lines, fmt.Errorf("healthcheck error: %s", e)
		}

		lines = append(lines, msg.GetMessage())
	}
}

// The health check passes what the nodes really show, says which checks it cannot do,
// and stops at Kubernetes, which does not answer here; a failing etcd is named.
func TestHealthCheck(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 2, Workers: 1})
	cl := newClient(t, c, role.Reader)
	cp1, cp2, worker := c.Nodes[0], c.Nodes[1], c.Nodes[2]

	// apid carries a node's failure in the message metadata of a one-to-many call
	lines, err := health(ctx, cl, cp1.IP, 5*time.Second) // ample for the checks before Kubernetes, which never passes here
	wantError(t, err, "healthcheck error: context deadline exceeded")

	for _, want := range []string{
		fmt.Sprintf("discovered nodes: %q", []string{cp1.IP, cp2.IP, worker.IP}),
		"waiting for etcd to be healthy: OK",
		"waiting for etcd members to be consistent across nodes: OK",
		"waiting for etcd members to be control plane nodes: OK",
		"waiting for apid to be ready: OK",
		"waiting for all nodes memory sizes: not checked by the emulator",
		"waiting for no diagnostics: not checked by the emulator",
		"waiting for kubelet to be healthy: OK",
		"waiting for all nodes to finish boot sequence: OK",
		"waiting for all k8s nodes to report: ...",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in\n%s", want, strings.Join(lines, "\n"))
		}
	}

	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "waiting for all k8s nodes to report: Get ") || !strings.Contains(last, "connection refused") {
		t.Errorf("last line %q, want kube-apiserver refusing the node list", last)
	}

	if slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "waiting for all k8s nodes to report: OK") }) {
		t.Error("the Kubernetes node list passed without a kube-apiserver")
	}

	cp2.SetEtcdHealthy(false)

	lines, err = health(ctx, cl, cp1.IP, time.Second)
	wantError(t, err, "healthcheck error: context deadline exceeded")

	if want := "127.0.0.12: service is not healthy: etcd"; !slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "waiting for etcd to be healthy: ") && strings.Contains(l, want)
	}) {
		t.Errorf("no failing etcd health line naming %q in\n%s", want, strings.Join(lines, "\n"))
	}

	_, err = health(ctx, cl, worker.IP, time.Second)
	wantError(t, err, "healthcheck error: rpc error: code = Unimplemented desc = cluster health check is only available on control plane nodes")

	_, err = health(ctx, newClient(t, c, role.EtcdBackup), cp1.IP, time.Second)
	wantError(t, err, "healthcheck error: rpc error: code = PermissionDenied desc = not authorized")
}

func wantError(t *testing.T, err error, want string) {
	t.Helper()

	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// Every node lists the cluster's members as discovery does, and its MachineStatus: running,
// not ready while its etcd is not healthy, and never ready for want of a Kubernetes Node.
func TestMembersAndMachineStatus(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 2, Workers: 1})
	cl := newClient(t, c, role.Reader)

	for _, n := range c.Nodes {
		list, err := safe.StateListAll[*cluster.Member](client.WithNode(ctx, n.IP), cl.COSI)
		if err != nil {
			t.Fatal(err)
		}

		var got []string
		for m := range list.All() {
			s := m.TypedSpec()
			got = append(got, fmt.Sprintf("%s %s %s %v %s %v", m.Metadata().ID(), s.Hostname, s.MachineType, s.Addresses, s.OperatingSystem, s.ControlPlane != nil))

			if len(s.NodeID) < 40 {
				t.Errorf("member %s: node ID %q", m.Metadata().ID(), s.NodeID)
			}
		}

		want := []string{
			"cp-1 cp-1 controlplane [127.0.0.11] Talos (v1.13.8) true",
			"cp-2 cp-2 controlplane [127.0.0.12] Talos (v1.13.8) true",
			"worker-1 worker-1 worker [127.0.0.13] Talos (v1.13.8) false",
		}
		if !slices.Equal(got, want) {
			t.Errorf("node %s members:\n%s\nwant\n%s", n.IP, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	status := func(n *talostest.Node) *runtime.MachineStatus {
		ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, n.IP), cl.COSI, runtime.MachineStatusID)
		if err != nil {
			t.Fatal(err)
		}

		return ms
	}

	cp := c.Nodes[0]

	ms := status(cp)
	if ms.TypedSpec().Stage != runtime.MachineStageRunning || ms.TypedSpec().Status.Ready {
		t.Errorf("machine status %+v", ms.TypedSpec())
	}

	unmet := func(ms *runtime.MachineStatus) map[string]string {
		out := map[string]string{}
		for _, u := range ms.TypedSpec().Status.UnmetConditions {
			out[u.Name] = u.Reason
		}

		return out
	}

	if u := unmet(ms); u["nodeReady"] != `node "cp-1" status is not available yet` || u["services"] != "" {
		t.Errorf("unmet conditions %v", u)
	}

	cp.SetEtcdHealthy(false)

	if u := unmet(status(cp)); u["services"] != "etcd not healthy" {
		t.Errorf("unmet conditions with etcd down: %v", u)
	}

	cp.SetEtcdHealthy(true)

	if u := unmet(status(cp)); u["services"] != "" {
		t.Errorf("unmet conditions with etcd back: %v", u)
	}

	if c.Nodes[2].Type != machine.TypeWorker || unmet(status(c.Nodes[2]))["nodeReady"] == "" {
		t.Errorf("worker status %v", status(c.Nodes[2]).TypedSpec())
	}
}
