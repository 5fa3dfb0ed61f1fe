package talostest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

func serviceMap(t *testing.T, ctx context.Context, cl *client.Client, node string) map[string]*machine.ServiceInfo {
	t.Helper()

	resp, err := cl.ServiceList(client.WithNode(ctx, node))
	if err != nil {
		t.Fatalf("ServiceList on %s: %v", node, err)
	}

	if len(resp.Messages) != 1 {
		t.Fatalf("ServiceList on %s: %d messages", node, len(resp.Messages))
	}

	out := map[string]*machine.ServiceInfo{}

	var ids []string

	for _, s := range resp.Messages[0].Services {
		out[s.Id] = s
		ids = append(ids, s.Id)
	}

	if !slices.IsSorted(ids) {
		t.Errorf("services not sorted by ID: %v", ids)
	}

	return out
}

func lastEvent(s *machine.ServiceInfo) string {
	evs := s.GetEvents().GetEvents()
	if len(evs) == 0 {
		return ""
	}

	return evs[len(evs)-1].Msg
}

func TestServicesOnNodes(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 1, Workers: 1})
	cl := newClient(t, c, role.Reader) // any role may list services
	cp, w := c.Nodes[0], c.Nodes[1]

	svcs := serviceMap(t, ctx, cl, cp.IP)

	for _, id := range []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "trustd", "udevd"} {
		s := svcs[id]
		if s == nil {
			t.Fatalf("control plane: no service %s in %v", id, svcs)
		}

		if s.State != "Running" || !s.Health.Healthy || s.Health.Unknown {
			t.Errorf("%s: state %s health %+v", id, s.State, s.Health)
		}

		if lastEvent(s) != "Health check successful" {
			t.Errorf("%s: last event %q", id, lastEvent(s))
		}
	}

	if h := svcs["dashboard"].GetHealth(); h == nil || !h.Unknown {
		t.Errorf("dashboard has no health check, got %+v", h)
	}

	if !slices.ContainsFunc(svcs["etcd"].Events.Events, func(e *machine.ServiceEvent) bool {
		return e.State == "Running" && strings.HasPrefix(e.Msg, "Started task etcd (PID ")
	}) {
		t.Errorf("etcd events: %v", svcs["etcd"].Events.Events)
	}

	ws := serviceMap(t, ctx, cl, w.IP)
	if ws["etcd"] != nil || ws["trustd"] != nil || ws["kubelet"] == nil || ws["apid"] == nil {
		t.Errorf("worker services: %v", slices.Sorted(maps.Keys(ws)))
	}

	// talosctl service etcd filters ServiceList: a worker has none
	infos, err := cl.ServiceInfo(client.WithNode(ctx, w.IP), "etcd")
	if err != nil || len(infos) != 0 {
		t.Errorf("worker etcd: %v %v", infos, err)
	}

	infos, err = cl.ServiceInfo(client.WithNode(ctx, cp.IP), "kubelet")
	if err != nil || len(infos) != 1 || infos[0].Service.State != "Running" {
		t.Errorf("control plane kubelet: %v %v", infos, err)
	}
}

func TestServicesEtcdHealth(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 1})
	cl := newClient(t, c, role.Operator)
	n := c.Nodes[0]

	n.SetEtcdHealthy(false)

	svcs := serviceMap(t, ctx, cl, n.IP)

	etcd := svcs["etcd"]
	if etcd.State != "Running" || etcd.Health.Healthy || etcd.Health.Unknown || etcd.Health.LastMessage != "context deadline exceeded" {
		t.Errorf("unhealthy etcd: state %s health %+v", etcd.State, etcd.Health)
	}

	if lastEvent(etcd) != "Health check failed: context deadline exceeded" {
		t.Errorf("unhealthy etcd last event %q", lastEvent(etcd))
	}

	if !svcs["kubelet"].Health.Healthy {
		t.Error("kubelet turned unhealthy with etcd")
	}

	n.SetEtcdHealthy(true)

	etcd = serviceMap(t, ctx, cl, n.IP)["etcd"]
	if !etcd.Health.Healthy || lastEvent(etcd) != "Health check successful" {
		t.Errorf("etcd back: health %+v, last event %q", etcd.Health, lastEvent(etcd))
	}

	evs := etcd.Events.Events
	if len(evs) < 2 || evs[len(evs)-2].Msg != "Health check failed: context deadline exceeded" {
		t.Errorf("etcd history lost the failure: %v", evs)
	}
}

func etcdMembers(ctx context.Context, cl *client.Client, node string, local bool) ([]*machine.EtcdMember, error) {
	resp, err := cl.EtcdMemberList(client.WithNode(ctx, node), &machine.EtcdMemberListRequest{QueryLocal: local})
	if err != nil {
		return nil, err
	}

	return resp.Messages[0].Members, nil
}

func etcdStatus(ctx context.Context, cl *client.Client, node string) (*machine.EtcdMemberStatus, error) {
	resp, err := cl.EtcdStatus(client.WithNode(ctx, node))
	if err != nil {
		return nil, err
	}

	return resp.Messages[0].MemberStatus, nil
}

func TestEtcdMembersAndStatus(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 3, Workers: 1})
	cl := newClient(t, c, role.EtcdBackup)
	cps := c.ControlPlanes()

	ids := map[string]uint64{} // node name -> member ID

	for _, n := range cps {
		for _, local := range []bool{true, false} {
			members, err := etcdMembers(ctx, cl, n.IP, local)
			if err != nil {
				t.Fatalf("members from %s (local %v): %v", n.Name, local, err)
			}

			if len(members) != 3 || !slices.IsSortedFunc(members, func(a, b *machine.EtcdMember) int { return cmp.Compare(a.Id, b.Id) }) {
				t.Fatalf("members from %s: %v", n.Name, members)
			}

			for _, m := range members {
				if old, ok := ids[m.Hostname]; ok && old != m.Id {
					t.Errorf("member %s changed ID %x -> %x", m.Hostname, old, m.Id)
				}

				ids[m.Hostname] = m.Id

				ip := c.Node(m.Hostname).IP
				if !slices.Equal(m.PeerUrls, []string{"https://" + ip + ":2380"}) || !slices.Equal(m.ClientUrls, []string{"https://" + ip + ":2379"}) || m.IsLearner {
					t.Errorf("member %s: %+v", m.Hostname, m)
				}
			}
		}
	}

	if len(ids) != 3 || ids["cp-1"] == ids["cp-2"] || ids["cp-2"] == ids["cp-3"] || ids["cp-1"] == ids["cp-3"] {
		t.Fatalf("member IDs: %v", ids)
	}

	for _, n := range cps {
		st, err := etcdStatus(ctx, cl, n.IP)
		if err != nil {
			t.Fatalf("status on %s: %v", n.Name, err)
		}

		if st.MemberId != ids[n.Name] || st.Leader != ids["cp-1"] || len(st.Errors) != 0 || st.ProtocolVersion == "" ||
			st.DbSize < 1<<20 || st.DbSizeInUse <= 0 || st.DbSizeInUse > st.DbSize || st.RaftIndex == 0 || st.RaftTerm == 0 {
			t.Errorf("status on %s: %+v", n.Name, st)
		}
	}

	// a worker runs no etcd
	w := c.Nodes[3]

	_, err := etcdMembers(ctx, cl, w.IP, true)
	wantCode(t, err, codes.Unimplemented)

	_, err = etcdStatus(ctx, cl, w.IP)
	wantCode(t, err, codes.Unimplemented)
}

// An unhealthy etcd does not answer: the calls wait for the caller's deadline, as
// etcd's client waits for a connection on a node.
func TestEtcdDown(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 3})
	cl := newClient(t, c, role.Reader)
	cp1, cp2, cp3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]

	members, err := etcdMembers(ctx, cl, cp1.IP, true)
	if err != nil {
		t.Fatal(err)
	}

	id := map[string]uint64{}
	for _, m := range members {
		id[m.Hostname] = m.Id
	}

	cp1.SetEtcdHealthy(false)

	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		t.Cleanup(cancel)

		return c
	}

	_, err = etcdStatus(short(), cl, cp1.IP)
	wantCode(t, err, codes.DeadlineExceeded)

	_, err = etcdMembers(short(), cl, cp1.IP, true)
	wantCode(t, err, codes.DeadlineExceeded)

	// the cluster still has a quorum: asked through every member, cp-1 answers; the leader moved
	if members, err := etcdMembers(ctx, cl, cp1.IP, false); err != nil || len(members) != 3 {
		t.Errorf("members through the cluster: %v %v", members, err)
	}

	st, err := etcdStatus(ctx, cl, cp2.IP)
	if err != nil || st.Leader != id["cp-2"] || len(st.Errors) != 0 {
		t.Errorf("status on cp-2: %+v %v", st, err)
	}

	// without a quorum the remaining member has no leader
	cp2.SetEtcdHealthy(false)

	st, err = etcdStatus(ctx, cl, cp3.IP)
	if err != nil || st.Leader != 0 || !slices.Equal(st.Errors, []string{"etcdserver: no leader"}) {
		t.Errorf("status on cp-3 without quorum: %+v %v", st, err)
	}

	_, err = etcdMembers(ctx, cl, cp3.IP, true)
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "etcdserver: no leader") {
		t.Errorf("members without quorum: %v", err)
	}

	// back up: answers again
	cp1.SetEtcdHealthy(true)
	cp2.SetEtcdHealthy(true)

	if st, err := etcdStatus(ctx, cl, cp1.IP); err != nil || st.Leader != id["cp-1"] {
		t.Errorf("status on cp-1 back up: %+v %v", st, err)
	}
}

var kmsgFormat = regexp.MustCompile(`^(kern|user): +[a-z]+: \[\d{4}-\d\d-\d\dT[0-9:.]+Z\]: .*\n$`)

// readDmesg reads records until the stream ends or until returns true.
func readDmesg(stream machine.MachineService_DmesgClient, until func(string) bool) ([]string, error) {
	var lines []string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return lines, nil
		}

		if err != nil {
			return lines, err
		}

		line := string(msg.Bytes)
		if !kmsgFormat.MatchString(line) {
			return lines, fmt.Errorf("dmesg record %q", line)
		}

		lines = append(lines, line)

		if until != nil && until(line) {
			return lines, nil
		}
	}
}

func TestDmesg(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 1})
	admin := newClient(t, c, role.Admin)
	cl := newClient(t, c, role.Reader)
	n := c.Nodes[0]

	if _, err := apply(ctx, admin, n.IP, withExtraArg(t, n.RunningConfig(), "audit-log-maxage", `"3"`), machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	stream, err := cl.Dmesg(client.WithNode(ctx, n.IP), false, false)
	if err != nil {
		t.Fatal(err)
	}

	lines, err := readDmesg(stream, nil)
	if err != nil {
		t.Fatal(err)
	}

	all := strings.Join(lines, "")

	for _, want := range []string{
		"kern:  notice: [",
		"]: Linux version ",
		"user: warning: [",
		"]: [talos] service[etcd](Running): Health check successful\n",
		"]: [talos] apply config request: mode no_reboot\n",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("dmesg lacks %q:\n%s", want, all)
		}
	}

	// --follow --tail: only what machined logs from now on, until the caller stops
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()

	stream, err = cl.Dmesg(client.WithNode(fctx, n.IP), true, true)
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		lines []string
		err   error
	}

	done := make(chan result, 1)

	go func() {
		lines, err := readDmesg(stream, func(l string) bool { return strings.Contains(l, "apply config request: mode staged") })
		done <- result{lines, err}
	}()

	// an apply logged before the node subscribed the stream is not sent: apply until one is seen
	var got *result

	for i := 0; got == nil; i++ {
		cfg := withExtraArg(t, c.ControlPlaneConfig, "audit-log-maxage", fmt.Sprintf(`"%d"`, 4+i))
		if _, err := apply(ctx, admin, n.IP, cfg, machine.ApplyConfigurationRequest_STAGED, false, 0); err != nil {
			t.Fatal(err)
		}

		select {
		case r := <-done:
			got = &r
		case <-time.After(100 * time.Millisecond):
		}
	}

	if got.err != nil {
		t.Fatal(got.err)
	}

	lines = got.lines

	for _, l := range lines {
		if strings.Contains(l, "Linux version") || strings.Contains(l, "mode no_reboot") {
			t.Errorf("--tail replayed an old line: %q", l)
		}
	}
}

func TestApplyWarnings(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 1})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	patch := func(p string) []byte {
		t.Helper()

		patches, err := configpatcher.LoadPatches([]string{p})
		if err != nil {
			t.Fatal(err)
		}

		out, err := configpatcher.Apply(configpatcher.WithBytes(n.RunningConfig()), patches)
		if err != nil {
			t.Fatal(err)
		}

		b, err := out.Bytes()
		if err != nil {
			t.Fatal(err)
		}

		return b
	}

	// a custom CNI without manifests: Validate warns (a .cluster change: applies live)
	cni := patch("cluster:\n  network:\n    cni:\n      name: custom\n")
	cniWarning := `"urls" field should not be empty for "custom" CNI`

	// machined builds a dry run's reply before it adds the warnings
	resp, err := apply(ctx, cl, n.IP, cni, machine.ApplyConfigurationRequest_TRY, true, 0)
	if err != nil || len(resp.Messages[0].Warnings) != 0 {
		t.Fatalf("dry run: %v %v", resp, err)
	}

	resp, err = apply(ctx, cl, n.IP, cni, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	if err != nil || !slices.Equal(resp.Messages[0].Warnings, []string{cniWarning}) {
		t.Fatalf("apply: %v %v", resp, err)
	}

	// install.extensions: deprecated for both Validate and RuntimeValidate, so twice
	ext := patch("machine:\n  install:\n    extensions:\n      - image: ghcr.io/siderolabs/gvisor:20231214.0-v1.6.1\n")

	resp, err = apply(ctx, cl, n.IP, ext, machine.ApplyConfigurationRequest_STAGED, false, 0)
	if err != nil {
		t.Fatal(err)
	}

	w := resp.Messages[0].Warnings
	if len(w) != 3 || w[0] != cniWarning || w[1] != w[2] || !strings.HasPrefix(w[1], ".machine.install.extensions is deprecated") {
		t.Errorf("warnings: %q", w)
	}

	// a config without warnings has none
	resp, err = apply(ctx, cl, n.IP, c.ControlPlaneConfig, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	if err != nil || len(resp.Messages[0].Warnings) != 0 {
		t.Errorf("clean config: %v %v", resp, err)
	}
}
