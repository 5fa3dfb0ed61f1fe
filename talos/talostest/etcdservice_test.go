package talostest_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// etcdCluster is control planes each running machined's etcd service around a real
// member, at a hundredth of the real times.
func etcdCluster(t *testing.T, nodes int) *talostest.Cluster {
	t.Helper()

	return newCluster(t, talostest.ClusterOptions{ControlPlanes: nodes, Etcd: &talostest.EtcdOptions{}})
}

// nodeClient talks to the node through its own API only (talosctl -e IP -n IP): a
// reset of another node cannot take it away.
func nodeClient(t *testing.T, c *talostest.Cluster, n *talostest.Node) (context.Context, *client.Client) {
	t.Helper()

	cfg, err := c.TalosconfigWith(role.MakeSet(role.Admin), []string{n.Addr}, []string{n.IP})
	if err != nil {
		t.Fatal(err)
	}

	return client.WithNode(t.Context(), n.IP), connect(t, cfg)
}

// etcdClient is a client of the members, with a certificate from the cluster's etcd CA.
func etcdClient(t *testing.T, c *talostest.Cluster, nodes ...*talostest.Node) *clientv3.Client {
	t.Helper()

	ca, err := etcdtest.LoadCA(c.EtcdCA().Crt, c.EtcdCA().Key)
	if err != nil {
		t.Fatal(err)
	}

	crt, key, err := ca.IssueClient("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.EtcdCA().Crt)

	var endpoints []string
	for _, n := range nodes {
		endpoints = append(endpoints, n.EtcdEndpoint())
	}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { cli.Close() }) //nolint:errcheck

	return cli
}

func memberList(t *testing.T, ctx context.Context, cl *client.Client) []*machine.EtcdMember {
	t.Helper()

	resp, err := cl.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{QueryLocal: true})
	if err != nil {
		t.Fatalf("member list: %v", err)
	}

	return resp.Messages[0].Members
}

func memberID(t *testing.T, members []*machine.EtcdMember, name string) uint64 {
	t.Helper()

	for _, m := range members {
		if m.Hostname == name {
			return m.Id
		}
	}

	t.Fatalf("no member %s in %v", name, members)

	return 0
}

func waitEtcd(t *testing.T, n *talostest.Node, what string, cond func(talostest.EtcdServiceState) bool) talostest.EtcdServiceState {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	st, err := n.WaitEtcd(ctx, cond)
	if err != nil {
		for _, m := range n.Cluster().Nodes {
			t.Logf("%s machined:\n%s\n%s etcd (last 40 lines):\n%s", m.IP, strings.Join(m.SystemLog(), ""), m.IP, strings.Join(lastLines(m.EtcdLog(), 40), ""))
		}

		t.Fatalf("%s: etcd never %s: %v (%+v)", n.IP, what, err, st)
	}

	return st
}

func lastLines(lines []string, k int) []string {
	return lines[max(0, len(lines)-k):]
}

func etcdHealthy(st talostest.EtcdServiceState) bool {
	return st.State == talostest.ServiceRunning && st.HealthKnown && st.Healthy
}

func restarting(st talostest.EtcdServiceState) bool {
	return st.State == talostest.ServiceWaiting && strings.Contains(st.LastEvent, "going to restart")
}

// resetEphemeral is talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL.
func resetEphemeral(ctx context.Context, cl *client.Client) error {
	return cl.ResetGeneric(ctx, &machine.ResetRequest{
		Reboot:                 true,
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}},
	})
}

func readFile(ctx context.Context, cl *client.Client, path string) ([]byte, error) {
	r, err := cl.Read(ctx, path)
	if err != nil {
		return nil, err
	}

	b, err := io.ReadAll(r)

	return b, errors.Join(err, r.Close())
}

// removeMember removes the member through the node's API. etcd refuses the removal
// as "unhealthy cluster" until the peers have been connected for 5 s: it is tried
// again. Through the removed member's own endpoint (machined picks one at random) the
// removal is applied and answered "server stopped": the member list tells.
func removeMember(t *testing.T, ctx context.Context, cl *client.Client, id uint64) {
	t.Helper()

	deadline := time.Now().Add(time.Minute)

	for {
		err := cl.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: id})
		if err == nil {
			return
		}

		if strings.Contains(err.Error(), rpctypes.ErrStopped.Error()) && !slices.ContainsFunc(memberList(t, ctx, cl), func(m *machine.EtcdMember) bool { return m.Id == id }) {
			return
		}

		if !strings.Contains(err.Error(), rpctypes.ErrUnhealthy.Error()) || time.Now().After(deadline) {
			t.Fatal(err)
		}

		time.Sleep(500 * time.Millisecond)
	}
}

// A member whose disk is lost restarts again and again (its arguments have no
// initial cluster: the data was there when the service started), and its node's
// kube-apiserver pod goes; the documented way back: remove the member from a healthy
// node, reset the node's EPHEMERAL; it comes back as a new member, promoted once it
// caught up, and its pod runs again.
func TestEtcdMemberLostRejoins(t *testing.T) {
	c := etcdCluster(t, 3)
	cp1, cp3 := c.Nodes[0], c.Nodes[2]
	ctx1, cl1 := nodeClient(t, c, cp1)
	ctx3, cl3 := nodeClient(t, c, cp3)

	if _, err := cp3.WaitPod(t.Context(), func(p talostest.PodState) bool { return p.Running }); err != nil {
		t.Fatal(err)
	}

	if err := cp3.DestroyEtcdData(); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, cp3, "restarting without its data", func(st talostest.EtcdServiceState) bool {
		return restarting(st) && strings.Contains(st.LastEvent, `couldn't find local name`)
	})

	if _, err := cp3.WaitPod(t.Context(), func(p talostest.PodState) bool { return !p.Present && !p.Terminating }); err != nil {
		t.Fatalf("kube-apiserver pod of a node whose etcd does not run: %v", err)
	}

	_, err := cl3.COSI.Get(ctx3, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID).Metadata())
	if !state.IsNotFoundError(err) {
		t.Errorf("static pod of a node whose etcd does not run: %v", err)
	}

	lost := memberID(t, memberList(t, ctx1, cl1), cp3.Name)

	removeMember(t, ctx1, cl1, lost)

	err = cl1.EtcdRemoveMemberByID(ctx1, &machine.EtcdRemoveMemberByIDRequest{MemberId: lost})
	wantCode(t, err, codes.NotFound)

	before, err := readFile(ctx3, cl3, "/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}

	if err := resetEphemeral(ctx3, cl3); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, cp3, "healthy after the reset", etcdHealthy)

	after, err := readFile(ctx3, cl3, "/proc/sys/kernel/random/boot_id")
	if err != nil || bytes.Equal(before, after) {
		t.Errorf("boot ID %q, then %q (%v): no reboot", before, after, err)
	}

	members := memberList(t, ctx1, cl1)
	if len(members) != 3 || memberID(t, members, cp3.Name) == lost {
		t.Errorf("members after the rejoin: %v", members)
	}

	for _, m := range members {
		if m.IsLearner {
			t.Errorf("still a learner: %v", m)
		}
	}

	if _, err := cp3.WaitPod(t.Context(), func(p talostest.PodState) bool { return p.Running }); err != nil {
		t.Fatalf("kube-apiserver pod after the rejoin: %v", err)
	}
}

// A member that rejoined and then loses its disk panics at every start (etcd's raft:
// "tocommit(N) is out of range [lastIndex(0)]", its arguments still those of the
// join), as etcd on a node does. Each member is a process of its own, as in its
// container: the panic ends that member alone; its service reports the exit and
// restarts it every 5 s, as machined does, and the other nodes, their etcd and their
// kube-apiserver pods, go on. With the members embedded in one process, the first
// panic ended the whole process (the test binary, or breakglass-lab with every node).
func TestEtcdMemberPanicsAlone(t *testing.T) {
	c := etcdCluster(t, 3)
	cp1, cp2, cp3 := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	ctx1, cl1 := nodeClient(t, c, cp1)
	ctx3, cl3 := nodeClient(t, c, cp3)

	// lost, removed, reset: cp-3 rejoins as a new member
	if err := cp3.DestroyEtcdData(); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, cp3, "restarting without its data", restarting)
	removeMember(t, ctx1, cl1, memberID(t, memberList(t, ctx1, cl1), cp3.Name))

	if err := resetEphemeral(ctx3, cl3); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, cp3, "healthy after the rejoin", etcdHealthy)

	pods := map[*talostest.Node]talostest.PodState{}
	for _, n := range []*talostest.Node{cp1, cp2} {
		pods[n] = waitPod(t, n, "running", running)
	}

	// its disk lost again: the member panics at every start
	if err := cp3.DestroyEtcdData(); err != nil {
		t.Fatal(err)
	}

	panicked := func(st talostest.EtcdServiceState) bool {
		return restarting(st) && strings.Contains(st.LastEvent, `failed: exit code 2 `) && strings.Contains(st.LastEvent, "out of range")
	}

	first := waitEtcd(t, cp3, "panicked", panicked)

	// restarted 5 s later (50 ms here), and panicking again: two processes
	pids := map[string]bool{}

	waitEtcd(t, cp3, "restarted and panicked again", func(st talostest.EtcdServiceState) bool {
		if pid, ok := strings.CutPrefix(st.LastEvent, "Started task etcd (PID "); ok {
			pids[pid] = true
		}

		return len(pids) >= 2 && panicked(st)
	})

	ctx3, cl3 = nodeClient(t, c, cp3)

	services, err := cl3.ServiceInfo(ctx3, "etcd")
	if err != nil {
		t.Fatal(err)
	}

	if svc := services[0].Service; svc.GetState() != talostest.ServiceWaiting || svc.GetHealth().GetHealthy() || !strings.Contains(svc.GetEvents().GetEvents()[len(svc.GetEvents().GetEvents())-1].GetMsg(), "Error running Containerd(etcd), going to restart forever") {
		t.Errorf("talosctl service etcd on the node that panicked: %v", svc)
	}

	// the others go on: their members keep the quorum and take writes, their pods run on
	kv := etcdClient(t, c, cp1, cp2)
	if _, err := kv.Put(t.Context(), "/registry/after-the-panic", first.LastEvent); err != nil {
		t.Fatalf("a write to the two others: %v", err)
	}

	for _, n := range []*talostest.Node{cp1, cp2} {
		if st := n.EtcdState(); !etcdHealthy(st) {
			t.Errorf("%s: etcd %+v", n.Name, st)
		}

		if p := n.Pod(); !p.Running || p.ContainerID != pods[n].ContainerID {
			t.Errorf("%s: kube-apiserver pod %+v, was %+v", n.Name, p, pods[n])
		}
	}
}

// A member removed while its node keeps its data is refused by the others at every
// restart ("the member has been permanently removed from the cluster"): etcd's own
// refusal, reproduced, until its EPHEMERAL is reset.
func TestEtcdRemovedMemberKeepsItsDataRefused(t *testing.T) {
	c := etcdCluster(t, 3)
	cp1, cp3 := c.Nodes[0], c.Nodes[2]
	ctx1, cl1 := nodeClient(t, c, cp1)

	id := memberID(t, memberList(t, ctx1, cl1), cp3.Name)

	removeMember(t, ctx1, cl1, id)

	const refused = "the member has been permanently removed from the cluster"

	// once when it is removed, then at each start with its old data
	starts := 0

	waitEtcd(t, cp3, "refused twice", func(st talostest.EtcdServiceState) bool {
		if strings.HasPrefix(st.LastEvent, "Started task etcd") {
			starts++
		}

		n := 0
		for _, l := range cp3.EtcdLog() {
			if strings.Contains(l, refused) && strings.Contains(l, "server error") {
				n++
			}
		}

		return n >= 2 && starts >= 1
	})

	ctx3, cl3 := nodeClient(t, c, cp3)
	if err := resetEphemeral(ctx3, cl3); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, cp3, "healthy after the reset", etcdHealthy)

	if got := memberList(t, ctx1, cl1); len(got) != 3 {
		t.Errorf("members: %v", got)
	}
}

// Two of three members lost: the survivor runs without a quorum (its health check
// fails, its static pod stays); its snapshot, every node's EPHEMERAL reset, a bootstrap
// of one from the snapshot, the others joining: every key is back at the snapshot's
// revision, byte for byte.
func TestEtcdQuorumLostRecoveredFromSnapshot(t *testing.T) {
	c := etcdCluster(t, 3)
	cp1 := c.Nodes[0]
	ctx1, cl1 := nodeClient(t, c, cp1)
	kv := etcdClient(t, c, c.Nodes...)

	for _, k := range []string{"/registry/a", "/registry/b"} {
		if _, err := kv.Put(t.Context(), k, "value of "+k); err != nil {
			t.Fatal(err)
		}
	}

	before, err := kv.Get(t.Context(), "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	for _, n := range c.Nodes[1:] {
		if err := n.DestroyEtcdData(); err != nil {
			t.Fatal(err)
		}
	}

	waitEtcd(t, cp1, "unhealthy without a quorum", func(st talostest.EtcdServiceState) bool {
		return st.State == talostest.ServiceRunning && st.HealthKnown && !st.Healthy
	})

	snap, err := readSnapshot(ctx1, cl1, cp1.IP)
	if err != nil {
		t.Fatal(err)
	}

	for _, n := range c.Nodes {
		ctx, cl := nodeClient(t, c, n)
		if err := resetEphemeral(ctx, cl); err != nil {
			t.Fatal(err)
		}
	}

	for _, n := range c.Nodes {
		waitEtcd(t, n, "waiting for bootstrap", talostest.EtcdServiceState.WaitingForBootstrap)
	}

	ctx1, cl1 = nodeClient(t, c, cp1)

	if _, err := cl1.EtcdRecover(ctx1, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}

	// uploaded, and nothing else: the service still waits
	if got, err := readFile(ctx1, cl1, "/var/lib/etcd.snapshot"); err != nil || !bytes.Equal(got, snap) {
		t.Fatalf("the uploaded snapshot: %d bytes, %v", len(got), err)
	}

	if st := cp1.EtcdState(); !st.WaitingForBootstrap() {
		t.Fatalf("after the upload alone: %+v", st)
	}

	if err := cl1.Bootstrap(ctx1, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}

	for _, n := range c.Nodes {
		waitEtcd(t, n, "healthy", etcdHealthy)
	}

	if members := memberList(t, ctx1, cl1); len(members) != 3 {
		t.Errorf("members: %v", members)
	}

	kv = etcdClient(t, c, c.Nodes...)

	after, err := kv.Get(t.Context(), "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	if len(after.Kvs) != len(before.Kvs) {
		t.Fatalf("%d keys after, %d before", len(after.Kvs), len(before.Kvs))
	}

	for i, k := range before.Kvs {
		a := after.Kvs[i]
		if !bytes.Equal(a.Key, k.Key) || !bytes.Equal(a.Value, k.Value) || a.ModRevision != k.ModRevision {
			t.Errorf("key %s: %q at %d, was %q at %d", k.Key, a.Value, a.ModRevision, k.Value, k.ModRevision)
		}
	}

	if _, err := c.Nodes[2].WaitPod(t.Context(), func(p talostest.PodState) bool { return p.Running }); err != nil {
		t.Fatalf("kube-apiserver pod after the recovery: %v", err)
	}
}

// What a node refuses, as machined does, and what it does not do.
func TestEtcdRecoveryRefusals(t *testing.T) {
	c := etcdCluster(t, 1)
	n := c.Nodes[0]
	ctx, cl := nodeClient(t, c, n)

	err := cl.Bootstrap(ctx, &machine.BootstrapRequest{})
	wantCode(t, err, codes.AlreadyExists)

	if _, err := cl.ServiceStop(ctx, "etcd"); err == nil || !strings.Contains(err.Error(), `service "etcd" doesn't support stop operation via API`) {
		t.Errorf("service etcd stop: %v", err)
	}

	if _, err := cl.ServiceRestart(ctx, "etcd"); err == nil || !strings.Contains(err.Error(), `service "etcd" doesn't support restart operation via API`) {
		t.Errorf("service etcd restart: %v", err)
	}

	if _, err := cl.ServiceStart(ctx, "etcd"); err != nil {
		t.Errorf("service etcd start while it runs (nothing to do): %v", err)
	}

	// etcd refuses to remove the last member
	id := memberID(t, memberList(t, ctx, cl), n.Name)
	if err := cl.EtcdRemoveMemberByID(ctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: id}); err == nil || !strings.Contains(err.Error(), "re-configuration failed due to not enough started members") {
		t.Errorf("removing the last member: %v", err)
	}

	for _, req := range []*machine.ResetRequest{
		{Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "STATE", Wipe: true}}},
		{Reboot: false, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}}},
		{Reboot: true},
	} {
		wantCode(t, cl.ResetGeneric(ctx, req), codes.Unimplemented)
	}

	if err := cl.ResetGeneric(ctx, &machine.ResetRequest{Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "NOPE", Wipe: true}}}); err == nil || !strings.Contains(err.Error(), `failed to get volume status with label "NOPE"`) {
		t.Errorf("reset of an unknown label: %v", err)
	}

	// a copy of the database file has no hash: refused unless the check is skipped
	db := copyFile(t, ctx, cl, "/var/lib/etcd/member/snap/db")

	if err := resetEphemeral(ctx, cl); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, n, "waiting for bootstrap", talostest.EtcdServiceState.WaitingForBootstrap)

	ctx, cl = nodeClient(t, c, n)

	if _, err := cl.EtcdRecover(ctx, bytes.NewReader(db)); err != nil {
		t.Fatal(err)
	}

	if err := cl.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("bootstrap (it fails later, in the service): %v", err)
	}

	st := waitEtcd(t, n, "failed", func(st talostest.EtcdServiceState) bool { return st.State == talostest.ServiceFailed })
	if !strings.Contains(st.LastEvent, "snapshot missing hash but --skip-hash-check=false") {
		t.Errorf("recover from a copied file without skipping the hash check: %+v", st)
	}

	// the failed restore left its files: the next bootstrap is refused until a reset
	wantCode(t, cl.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true, RecoverSkipHashCheck: true}), codes.AlreadyExists)

	if err := resetEphemeral(ctx, cl); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, n, "waiting for bootstrap", talostest.EtcdServiceState.WaitingForBootstrap)

	ctx, cl = nodeClient(t, c, n)

	if _, err := cl.EtcdRecover(ctx, bytes.NewReader(db)); err != nil {
		t.Fatal(err)
	}

	if err := cl.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true, RecoverSkipHashCheck: true}); err != nil {
		t.Fatal(err)
	}

	waitEtcd(t, n, "healthy", etcdHealthy)
}

// copyFile is talosctl cp of one file: the .tar.gz Copy streams, unpacked.
func copyFile(t *testing.T, ctx context.Context, cl *client.Client, path string) []byte {
	t.Helper()

	r, err := cl.Copy(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() //nolint:errcheck

	files, err := untarGz(r)
	if err != nil {
		t.Fatal(err)
	}

	name := path[strings.LastIndex(path, "/")+1:]
	if len(files) != 1 || files[name] == nil {
		t.Fatalf("copy of %s: %v", path, files)
	}

	return files[name]
}

// untarGz reads a .tar.gz into its regular files, by name.
func untarGz(r io.Reader) (map[string][]byte, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}

	files := map[string][]byte{}
	tr := tar.NewReader(zr)

	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}

		if err != nil {
			return nil, err
		}

		if hdr.Typeflag == tar.TypeReg {
			if files[hdr.Name], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
}

// Leadership moves on request, and a node that leaves takes its member and its data
// with it; its service stays stopped (the API cannot start etcd again).
func TestEtcdForfeitAndLeave(t *testing.T) {
	c := etcdCluster(t, 3)
	kv := etcdClient(t, c, c.Nodes...)

	var leader, follower *talostest.Node

	for _, n := range c.Nodes {
		st, err := kv.Status(t.Context(), n.EtcdEndpoint())
		if err != nil {
			t.Fatal(err)
		}

		if st.Leader == st.Header.MemberId {
			leader = n
		} else {
			follower = n
		}
	}

	ctx, cl := nodeClient(t, c, follower)

	resp, err := cl.EtcdForfeitLeadership(ctx, &machine.EtcdForfeitLeadershipRequest{})
	if err != nil || resp.Messages[0].Member != "" {
		t.Errorf("a follower forfeits: %v, %v", resp, err)
	}

	ctx, cl = nodeClient(t, c, leader)

	resp, err = cl.EtcdForfeitLeadership(ctx, &machine.EtcdForfeitLeadershipRequest{})
	if err != nil || resp.Messages[0].Member == "" || resp.Messages[0].Member == leader.Name {
		t.Fatalf("the leader forfeits: %v, %v", resp, err)
	}

	if st, err := kv.Status(t.Context(), leader.EtcdEndpoint()); err != nil || st.Leader == st.Header.MemberId {
		t.Errorf("still the leader: %v, %v", st, err)
	}

	if err := cl.EtcdLeaveCluster(ctx, &machine.EtcdLeaveClusterRequest{}); err != nil {
		t.Fatal(err)
	}

	if st := leader.EtcdState(); st.State != talostest.ServiceFinished {
		t.Errorf("service after leaving: %+v", st)
	}

	_, err = readFile(ctx, cl, "/var/lib/etcd/member/snap/db")
	wantCode(t, err, codes.NotFound)

	if _, err := cl.ServiceStart(ctx, "etcd"); err == nil || !strings.Contains(err.Error(), `service "etcd" doesn't support start operation via API`) {
		t.Errorf("service etcd start after leaving: %v", err)
	}

	fctx, fcl := nodeClient(t, c, follower)
	if got := memberList(t, fctx, fcl); len(got) != 2 {
		t.Errorf("members after the leave: %v", got)
	}
}

// talosctl reset follows the node's events and returns once it sees the task
// stopAllServices: the API goes away then. Every stream open before the reset gets
// that event and then ends (machined's handler returns at its shutdown), never cut
// before it: a watcher that misses it waits for ever, as a real talosctl did once on
// a loaded CI machine.
func TestResetEventsReachEveryWatcher(t *testing.T) {
	c := etcdCluster(t, 1)
	n := c.Nodes[0]
	ctx, cl := nodeClient(t, c, n)

	const watchers = 8

	chans := make([]chan client.EventResult, watchers)
	for i := range chans {
		chans[i] = make(chan client.EventResult)
		if err := cl.EventsWatchV2(ctx, chans[i]); err != nil {
			t.Fatal(err)
		}
	}

	if err := resetEphemeral(ctx, cl); err != nil {
		t.Fatal(err)
	}

	for i, ch := range chans {
		sawStop := false

		for res := range ch {
			if res.Error != nil {
				if !errors.Is(res.Error, io.EOF) {
					t.Errorf("watcher %d: the stream was cut (%v), not ended", i, res.Error)
				}

				break
			}

			if task, ok := res.Event.Payload.(*machine.TaskEvent); ok && task.GetTask() == "stopAllServices" && task.GetAction() == machine.TaskEvent_START {
				sawStop = true
			}
		}

		if !sawStop {
			t.Errorf("watcher %d: the stream ended without the task stopAllServices", i)
		}
	}
}
