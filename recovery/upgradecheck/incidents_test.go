package upgradecheck

// Incident notes: each test is a way the gate once said go for what it had
// not read (issue 35), reproduced on emulated Talos nodes whose control
// planes each run a real etcd member, and what it must say instead.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// edit applies a change to a node's machine config, as talosctl
// apply-config --mode no-reboot does.
func (tc *testCluster) edit(t *testing.T, n *talostest.Node, change func(cfg string) string) {
	t.Helper()
	cl, err := talos.Connect(t.Context(), talos.Options{Talosconfig: tc.talosconfig, Nodes: []string{n.IP}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := string(n.RunningConfig())
	changed := change(cfg)
	if changed == cfg {
		t.Fatalf("node %s: the edit changed nothing", n.IP)
	}
	if _, err := cl.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: []byte(changed), Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
}

// contextOf is a talosconfig whose context names one node, through that
// node's endpoint only: the usual on-call context after
// `talosctl config endpoint X; talosctl config node X`.
func (tc *testCluster) contextOf(t *testing.T, n *talostest.Node) string {
	t.Helper()
	cfg, err := tc.cluster.TalosconfigWith(role.MakeSet(role.Admin), []string{n.Addr}, []string{n.IP})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func lockedGate(cfg string) string {
	return strings.Replace(cfg, "\n    apiServer:\n", "\n    apiServer:\n        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=false\n", 1)
}

// The on-call context names one control plane of three. A flag 1.34
// refuses on the second and a half-done upgrade on the third were never
// read: exit 0, while etcd's own member list, read in the same run, named
// three. The gate reads every control plane the membership names.
func TestEveryControlPlaneIsRead(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{controlPlanes: 3})
	cps := tc.cluster.ControlPlanes()
	tc.edit(t, cps[1], lockedGate)
	tc.edit(t, cps[2], func(cfg string) string {
		return strings.Replace(cfg, "kube-apiserver:v1.33.13", "kube-apiserver:v1.34.4", 1)
	})
	o := tc.options("1.34")
	o.Talos.Talosconfig = tc.contextOf(t, cps[0])
	r := Run(t.Context(), o)
	for _, n := range cps {
		if !slices.Contains(r.Nodes, n.IP) {
			t.Errorf("control plane %s not read: the report names %v", n.IP, r.Nodes)
		}
	}
	if c := mustCheck(t, r, CheckAPIServerFlags); c.Verdict != NoGo || !strings.Contains(strings.Join(c.Evidence, "\n"), cps[1].IP) {
		t.Errorf("flags on %s: %s (%s) %v", cps[1].IP, c.Verdict, c.Summary, c.Evidence)
	}
	if c := mustCheck(t, r, CheckUpgradePath); c.Verdict == Go || !strings.Contains(c.Summary, "different minors") {
		t.Errorf("the half-done upgrade on %s: %s (%s)", cps[2].IP, c.Verdict, c.Summary)
	}
	if r.Verdict != NoGo {
		t.Errorf("verdict %s", r.Verdict)
	}
	// A control plane the context does not name, whose Talos API does not
	// answer: a no-go of access that names it, not a go for the others.
	cps[2].Stop()
	if c := mustCheck(t, Run(t.Context(), o), CheckAccess); c.Verdict != NoGo || !strings.Contains(c.Summary, cps[2].IP+" did not answer") {
		t.Errorf("control plane %s away: access %s (%s)", cps[2].IP, c.Verdict, c.Summary)
	}
}

// Three control planes and two etcd members (the third removed and not
// back): "2 of 2 members healthy, 0 can fail" was a go. Then the third
// back as a learner that never caught up: a warning. Both are no-gos: the
// cluster cannot lose a control plane.
func TestMarginCountsControlPlanes(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{controlPlanes: 3})
	third := tc.cluster.ControlPlanes()[2]
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	list, err := tc.kv.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	var peer []string
	for _, m := range list.Members {
		if m.Name == third.Name {
			id, peer = m.ID, m.PeerURLs
		}
	}
	if id == 0 {
		t.Fatalf("no member named %s in %v", third.Name, list.Members)
	}
	tc.removeMember(t, id)
	r := Run(t.Context(), tc.options("1.34"))
	c := mustCheck(t, r, CheckEtcdMembers)
	if c.Verdict != NoGo || !strings.Contains(c.Summary, third.IP) {
		t.Errorf("a control plane without its member: %s (%s)\n%s", c.Verdict, c.Summary, strings.Join(c.Evidence, "\n"))
	}
	if _, err := tc.kv.MemberAddAsLearner(ctx, peer); err != nil {
		t.Fatal(err)
	}
	c = mustCheck(t, Run(t.Context(), tc.options("1.34")), CheckEtcdMembers)
	if c.Verdict != NoGo || !strings.Contains(c.Summary, "learner") {
		t.Errorf("two voters and a learner: %s (%s)\n%s", c.Verdict, c.Summary, strings.Join(c.Evidence, "\n"))
	}
}

// removeMember removes a member, as talosctl etcd remove-member does. etcd
// refuses until the others have been connected for a while (its strict
// reconfiguration check); the member removed may answer "server stopped"
// when the request went to it.
func (tc *testCluster) removeMember(t *testing.T, id uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		_, err := tc.kv.MemberRemove(ctx, id)
		if err != nil && ctx.Err() != nil {
			t.Fatalf("remove member %x: %v", id, err)
		}
		list, lerr := tc.kv.MemberList(ctx)
		if lerr == nil && !slices.ContainsFunc(list.Members, func(m *etcdserverpb.Member) bool { return m.ID == id }) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// --from 1.35 --to 1.36 on control planes whose images all say v1.34.4
// was a go: the gate trusted the flag over what it read.
func TestFromAgainstTheImages(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{kubernetes: "1.34.4"})
	o := tc.options("1.36")
	o.From = minor("1.35")
	c := mustCheck(t, Run(t.Context(), o), CheckUpgradePath)
	if c.Verdict != NoGo || !strings.Contains(c.Summary, "--from 1.35") || !strings.Contains(c.Summary, "v1.34.4") {
		t.Errorf("%s: %s", c.Verdict, c.Summary)
	}
}

// --etcd-endpoints of another cluster's etcd (another cluster ID, no
// member in common with those the Talos API reports) was a go, and the
// fail-closed webhook in the real cluster's etcd was never seen.
func TestAnotherClustersEtcd(t *testing.T) {
	t.Parallel()
	tc, other := newTestCluster(t, clusterSpec{}), newTestCluster(t, clusterSpec{})
	b, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook("policy-engine", "https://127.0.0.1:1/validate"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	tc.put(t, "/registry/validatingwebhookconfigurations/policy-engine", b)
	o := tc.options("1.34")
	o.Etcd = recovery.EtcdOptions{Endpoints: []string{other.cluster.ControlPlanes()[0].EtcdEndpoint()}}
	r := Run(t.Context(), o)
	a := mustCheck(t, r, CheckAccess)
	if r.Verdict != NoGo || a.Verdict != NoGo || !strings.Contains(a.Summary, "not this cluster's") {
		t.Errorf("another cluster's etcd: %s, access %s (%s)", r.Verdict, a.Verdict, a.Summary)
	}
	if c := mustCheck(t, r, CheckAdmission); c.Verdict == Go {
		t.Errorf("admission judged on another cluster's etcd: %s", c.Summary)
	}
	// Its own etcd, named: the same cluster, go on.
	o.Etcd = recovery.EtcdOptions{Endpoints: []string{tc.cluster.ControlPlanes()[0].EtcdEndpoint()}}
	if c := mustCheck(t, Run(t.Context(), o), CheckAdmission); c.Verdict != NoGo || !strings.Contains(c.Summary, "policy-engine") {
		t.Errorf("its own etcd named: admission %s (%s)", c.Verdict, c.Summary)
	}
}

// --last-snapshot of 1 KiB of random bytes followed by their own sha256
// "verified": go; so did another cluster's verified snapshot. And a
// checksum file beside the snapshot was "the newest snapshot", a no-go.
func TestRollbackPointIsThisClustersSnapshot(t *testing.T) {
	t.Parallel()
	tc, other := newTestCluster(t, clusterSpec{}), newTestCluster(t, clusterSpec{})
	dir := t.TempDir()
	take := func(c *testCluster, path string) {
		t.Helper()
		o := c.options("1.34")
		o.Snapshot = path
		if rb := mustCheck(t, Run(t.Context(), o), CheckRollbackPoint); rb.Verdict != Go {
			t.Fatalf("snapshot %s: %s (%s)", path, rb.Verdict, rb.Summary)
		}
	}
	mine, theirs := filepath.Join(dir, "mine.snapshot"), filepath.Join(t.TempDir(), "theirs.snapshot")
	take(tc, mine)
	take(other, theirs)
	junk := make([]byte, 1024)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(junk)
	forged := filepath.Join(t.TempDir(), "forged.snapshot")
	if err := os.WriteFile(forged, append(junk, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	last := func(paths ...string) Check {
		t.Helper()
		o := tc.options("1.34")
		o.LastSnapshots = paths
		return mustCheck(t, Run(t.Context(), o), CheckRollbackPoint)
	}
	if c := last(forged); c.Verdict != NoGo {
		t.Errorf("random bytes under their own sha256: %s (%s)", c.Verdict, c.Summary)
	}
	if c := last(theirs); c.Verdict != NoGo || !strings.Contains(c.Summary, "another cluster") {
		t.Errorf("another cluster's snapshot: %s (%s)", c.Verdict, c.Summary)
	}
	// A checksum file, newer than the snapshot, beside it.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(mine+".sha256", []byte("0123abcd  mine.snapshot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := last(dir); c.Verdict != Go || !strings.Contains(c.Summary, "mine.snapshot") {
		t.Errorf("a checksum file beside the snapshot: %s (%s)", c.Verdict, c.Summary)
	}
}

// A lost quorum (two members of three lost their data): the gate sat on
// "reading etcd" for its whole 10-minute cluster timeout, then said "etcd
// reached" and "kubelets within the skew" for what it could not read.
func TestLostQuorumIsANoGoWithin30s(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{controlPlanes: 3})
	cps := tc.cluster.ControlPlanes()
	for _, n := range cps[1:] {
		if err := n.DestroyEtcdData(); err != nil {
			t.Fatal(err)
		}
	}
	o := tc.options("1.34")
	o.Timeout = 10 * time.Minute // the command's default --cluster-timeout
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	r := Run(ctx, o)
	took := time.Since(start)
	t.Logf("no-go after %s", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("the gate took %s on a lost quorum", took.Round(time.Second))
	}
	m := mustCheck(t, r, CheckEtcdMembers)
	if r.Verdict != NoGo || m.Verdict != NoGo || !strings.Contains(m.Summary, "quorum") {
		t.Errorf("%s; etcd-members %s (%s)", r.Verdict, m.Verdict, m.Summary)
	}
	for _, c := range r.Checks {
		if strings.Contains(c.Summary, "etcd reached") || strings.Contains(c.Summary, "kubelets within the skew") {
			t.Errorf("%s says what it could not read: %s", c.ID, c.Summary)
		}
	}
	for _, id := range []string{CheckAdmission, CheckStoredVersions, CheckEtcdSpace} {
		if c := mustCheck(t, r, id); !c.NotChecked {
			t.Errorf("%s judged without quorum: %s (%s)", id, c.Verdict, c.Summary)
		}
	}
}
