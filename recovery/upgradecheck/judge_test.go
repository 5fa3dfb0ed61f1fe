package upgradecheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/startupwrites"
)

// members builds n voting members, the first the leader, member i on
// 10.5.0.(2+i) named cp-(i+1); down are the indexes without a status.
func members(n int, down ...int) []*memberFacts {
	var out []*memberFacts
	for i := range n {
		m := &memberFacts{ID: etcd.ID(i + 1), Name: fmt.Sprintf("cp-%d", i+1), ClientURLs: []string{fmt.Sprintf("https://10.5.0.%d:2379", 2+i)}}
		if slices.Contains(down, i) {
			m.StatusErr = m.ClientURLs[0] + " did not answer: context deadline exceeded"
		} else {
			m.Status = &etcd.MemberStatus{MemberID: m.ID, Leader: 1, IsLeader: i == 0, Version: "3.6.5", DBSize: 40 << 20, DBSizeInUse: 30 << 20, Quota: 2 << 30}
		}
		out = append(out, m)
	}
	return out
}

// onControlPlanes is a cluster of n control planes (10.5.0.2.., cp-1..)
// whose members are ms, matched to them as the gate matches them.
func onControlPlanes(n int, ms []*memberFacts) *facts {
	f := &facts{membership: membership{members: ms, membersFrom: "the Talos API of 10.5.0.2"}}
	for i := range n {
		f.nodes = append(f.nodes, &nodeFacts{Addr: fmt.Sprintf("10.5.0.%d", 2+i), Name: fmt.Sprintf("cp-%d", i+1), ControlPlane: true, Found: foundByContext})
	}
	f.matchMembers()
	return f
}

// The quorum margin, counted on the control planes: a control plane
// without a voting member, a learner and a member down each count as not
// healthy. No margin with three or more is a no-go, two cannot lose either
// by design (a warning), one is the cluster.
func TestJudgeMembers(t *testing.T) {
	learner := func(voters, cps int) *facts {
		ms := members(voters)
		ms = append(ms, &memberFacts{ID: 9, Name: fmt.Sprintf("cp-%d", voters+1), Learner: true, PeerURLs: []string{fmt.Sprintf("https://10.5.0.%d:2380", 2+voters)}})
		return onControlPlanes(cps, ms)
	}
	stray := members(3)
	stray = append(stray, &memberFacts{ID: 7, Name: "old", ClientURLs: []string{"https://10.9.9.9:2379"}, Status: &etcd.MemberStatus{MemberID: 7, Leader: 1}})
	for _, tc := range []struct {
		name string
		f    *facts
		want Verdict
		says string
	}{
		{"one", onControlPlanes(1, members(1)), Go, "one member"},
		{"three", onControlPlanes(3, members(3)), Go, "3 of 3 members healthy, one on each control plane, one leader; 1 can fail"},
		{"three, one down", onControlPlanes(3, members(3, 2)), NoGo, "no margin"},
		{"three, two down", onControlPlanes(3, members(3, 1, 2)), NoGo, "lost quorum"},
		{"five, one down", onControlPlanes(5, members(5, 4)), Warn, "margin of 1"},
		{"five, two down", onControlPlanes(5, members(5, 3, 4)), NoGo, "no margin"},
		{"three control planes, two members", onControlPlanes(3, members(2)), NoGo, "control plane cp-3 (10.5.0.4) has no etcd member"},
		{"three control planes, two voters and a learner", learner(2, 3), NoGo, "member 9 (cp-3) on 10.5.0.4 is a learner"},
		{"five control planes, a learner joining", learner(4, 5), Warn, "learner, not voting yet; quorum holds with a margin of 1"},
		{"two control planes", onControlPlanes(2, members(2)), Warn, "cannot lose either"},
		{"two control planes, one member", onControlPlanes(2, members(1)), NoGo, "not both healthy voting members: control plane cp-2 (10.5.0.3) has no etcd member"},
		{"a member on no control plane", onControlPlanes(3, stray), Warn, "etcd member 7 (old) runs on no control plane the gate could read"},
		{"no list, no leader", &facts{membership: membership{membersErr: errors.New("etcdserver: no leader"), quorumLost: true, quorumWhy: "no control plane's member knows a leader"}}, NoGo, "lost quorum"},
	} {
		c := judgeMembers(tc.f)
		if c.Verdict != tc.want || !strings.Contains(c.Summary, tc.says) {
			t.Errorf("%s: %s (%s), want %s saying %q\n%s", tc.name, c.Verdict, c.Summary, tc.want, tc.says, strings.Join(c.Evidence, "\n"))
		}
	}
	// Two leaders known: electing or split.
	split := members(3)
	split[2].Status.Leader = 3
	if c := judgeMembers(onControlPlanes(3, split)); c.Verdict != NoGo {
		t.Errorf("split leadership: %s", c.Verdict)
	}
	if c := judgeMembers(&facts{membership: membership{membersErr: errors.New("boom")}}); c.Verdict != NoGo || !c.NotChecked {
		t.Errorf("unreadable: %+v", c)
	}
}

// The room the upgrade needs: what the pair's target wrote when recorded
// (per control plane) and etcd's largest request.
func TestJudgeSpace(t *testing.T) {
	rec := &startupwrites.Recording{From: "v1.33.13", To: "v1.34.4", EtcdBytes: 14237}
	cp := []*nodeFacts{{Addr: "10.5.0.2", ControlPlane: true}, {Addr: "10.5.0.3", ControlPlane: true}, {Addr: "10.5.0.4", ControlPlane: true}}
	needed := int64(3*14237 + requestMargin)
	for _, tc := range []struct {
		name         string
		size, quota  int64
		configQuota  int64
		want         Verdict
		says, quotaB string
	}{
		{"plenty", 40 << 20, 2 << 30, 0, Go, "every member has room", ""},
		{"just enough", 6<<20 - needed, 6 << 20, 0, Warn, "80%", ""},
		{"a byte short", 6<<20 - needed + 1, 6 << 20, 0, NoGo, "less room", ""},
		{"over", 7 << 20, 6 << 20, 0, NoGo, "less room", ""},
		{"quota from the machine config", 7 << 20, 0, 6 << 20, NoGo, "less room", "cluster.etcd.extraArgs"},
		{"etcd's default", 3 << 20, 0, 0, Go, "every member", "etcd's default"},
	} {
		ms := members(1)
		ms[0].Status.DBSize, ms[0].Status.DBSizeInUse, ms[0].Status.Quota = tc.size, tc.size/2, tc.quota
		nodes := append([]*nodeFacts(nil), cp...)
		nodes[0] = &nodeFacts{Addr: "10.5.0.2", ControlPlane: true, EtcdQuota: tc.configQuota}
		c := judgeSpace(&facts{membership: membership{members: ms}, nodes: nodes, recorded: rec})
		ev := strings.Join(c.Evidence, "\n")
		if c.Verdict != tc.want || !strings.Contains(c.Summary, tc.says) || !strings.Contains(ev, tc.quotaB) {
			t.Errorf("%s: %s (%s)\n%s", tc.name, c.Verdict, c.Summary, ev)
		}
		if !strings.Contains(ev, "x 3 control plane(s)") {
			t.Errorf("%s: the writes are not per control plane: %s", tc.name, ev)
		}
	}
}

func TestJudgeUpgradePath(t *testing.T) {
	cp := func(minor int) *nodeFacts {
		return &nodeFacts{Addr: "10.5.0.2", ControlPlane: true, Image: "registry.k8s.io/kube-apiserver:v1." + itoa(minor) + ".4", Minor: Minor(minor)}
	}
	noTag := &nodeFacts{Addr: "10.5.0.2", ControlPlane: true, Image: "kube-apiserver"}
	for _, tc := range []struct {
		name  string
		nodes []*nodeFacts
		to    int
		given string // --from
		want  Verdict
		says  string
	}{
		{"one minor", []*nodeFacts{cp(33)}, 34, "", Go, "one minor"},
		{"a patch", []*nodeFacts{cp(34)}, 34, "", Go, "patch"},
		{"skips", []*nodeFacts{cp(32)}, 34, "", NoGo, "skips 1.33"},
		{"downgrade", []*nodeFacts{cp(35)}, 34, "", NoGo, "downgrade"},
		{"unknown", []*nodeFacts{noTag}, 34, "", NoGo, "cannot tell"},
		{"too old", []*nodeFacts{cp(31)}, 32, "", NoGo, "outside what breakglass knows"},
		{"half done", []*nodeFacts{cp(33), cp(34)}, 34, "", Warn, "did not finish"},
		{"--from agrees", []*nodeFacts{cp(34)}, 35, "1.34.2", Go, "one minor"},
		{"--from where no image says", []*nodeFacts{noTag}, 34, "1.33", Go, "one minor"},
		{"--from contradicts the images", []*nodeFacts{cp(34)}, 36, "1.35", NoGo, "--from 1.35 contradicts what the control planes run: the lowest kube-apiserver image of the control planes (10.5.0.2 v1.34.4)"},
		{"--from above a half-done upgrade", []*nodeFacts{cp(33), cp(34)}, 35, "1.34", NoGo, "contradicts"},
	} {
		f := &facts{nodes: tc.nodes, to: Minor(tc.to)}
		var given Minor
		if tc.given != "" {
			given = minor(tc.given)
		}
		f.setFrom(given)
		c := judgeUpgradePath(f)
		if c.Verdict != tc.want || !strings.Contains(c.Summary, tc.says) {
			t.Errorf("%s: %s (%s)", tc.name, c.Verdict, c.Summary)
		}
	}
}

func itoa(n int) string { return string(rune('0'+n/10)) + string(rune('0'+n%10)) }

// Kubelets may be up to three minors older than kube-apiserver, never newer.
func TestJudgeKubeletSkew(t *testing.T) {
	node := &nodeFacts{Addr: "10.5.0.2", ControlPlane: true, Talos: "v1.13.8"}
	for _, tc := range []struct {
		kubelets []string
		want     Verdict
	}{
		{[]string{"v1.34.4", "v1.33.2"}, Go},
		{[]string{"v1.31.0"}, Go},
		{[]string{"v1.30.9"}, NoGo},
		{[]string{"v1.35.0"}, NoGo},
	} {
		var kn []etcd.NodeInfo
		for i, v := range tc.kubelets {
			kn = append(kn, etcd.NodeInfo{Name: "w" + itoa(i), KubeletVersion: v, OSImage: "Talos (v1.13.8)", InternalIP: "10.5.1." + itoa(i)})
		}
		c := judgeTalosSupport(&facts{nodes: []*nodeFacts{node}, to: 34, kubeNodes: kn, usage: &etcd.Usage{}})
		if c.Verdict != tc.want {
			t.Errorf("%v: %s (%s)", tc.kubelets, c.Verdict, c.Summary)
		}
	}
	// A worker the talosconfig does not name is judged by its kubelet's OS image.
	c := judgeTalosSupport(&facts{nodes: []*nodeFacts{node}, to: 34, usage: &etcd.Usage{}, kubeNodes: []etcd.NodeInfo{{Name: "old", InternalIP: "10.5.1.9", KubeletVersion: "v1.33.1", OSImage: "Talos (v1.10.2)"}}})
	if c.Verdict != NoGo || !strings.Contains(strings.Join(c.Evidence, "\n"), "node old (10.5.1.9): Talos v1.10.2 (its kubelet's OS image in etcd)") {
		t.Errorf("worker by OS image: %s %v", c.Verdict, c.Evidence)
	}
	// A Talos newer than the table: not known, a warning.
	c = judgeTalosSupport(&facts{nodes: []*nodeFacts{{Addr: "10.5.0.2", Talos: "v1.14.1"}}, to: 34, usage: &etcd.Usage{}})
	if c.Verdict != Warn {
		t.Errorf("Talos 1.14: %s (%s)", c.Verdict, c.Summary)
	}
	// The Node objects not read (etcd without quorum): never "within the skew".
	c = judgeTalosSupport(&facts{nodes: []*nodeFacts{node}, to: 34, membership: membership{quorumLost: true}})
	if c.Verdict != NoGo || strings.Contains(c.Summary, "within the skew") || !strings.Contains(c.Summary, "kubelets' versions were not read") {
		t.Errorf("kubelets not read: %s (%s)", c.Verdict, c.Summary)
	}
}

func TestJudgeRollback(t *testing.T) {
	o := &Options{MaxSnapshotAge: DefaultMaxSnapshotAge}
	copyOf := &etcd.CopyFacts{SnapshotInfo: etcd.SnapshotInfo{Path: "/b/s", Size: 4096, SHA256: "ab"}, Snapshot: true, Revision: 812, ClusterUID: "0b8d6f2e"}
	foreign := &etcd.ForeignCopyError{Path: "/b/t", Reason: "it is another cluster's data"}
	for _, tc := range []struct {
		name string
		s    *snapshotFacts
		want Verdict
		says string
	}{
		{"none", nil, Warn, "no rollback point"},
		{"taken", &snapshotFacts{Taken: true, Path: "/b/s", Copy: copyOf}, Go, "a verified snapshot of this cluster taken now"},
		{"taking failed", &snapshotFacts{Taken: true, Err: errors.New("disk full")}, NoGo, "could not be taken: disk full"},
		{"taken, of another cluster", &snapshotFacts{Taken: true, Path: "/b/s", Copy: copyOf, Err: foreign}, NoGo, "no rollback point: /b/t is not a copy of this cluster"},
		{"fresh", &snapshotFacts{Path: "/b/s", Copy: copyOf, Age: time.Hour, Candidates: 2}, Go, "a verified snapshot of this cluster, 1h0m0s old"},
		{"old", &snapshotFacts{Path: "/b/s", Copy: copyOf, Age: 3 * 24 * time.Hour}, Warn, "72h0m0s old"},
		{"a newer one passed over", &snapshotFacts{Path: "/b/s", Copy: copyOf, Age: time.Hour, Passed: []string{"/b/u: cut short"}}, Warn, "passed over"},
		{"corrupt", &snapshotFacts{Path: "/b/s", Err: errors.New("sha256 mismatch")}, NoGo, "the newest, /b/s: sha256 mismatch"},
		{"another cluster's", &snapshotFacts{Path: "/b/t", Err: foreign}, NoGo, "another cluster's data"},
		{"none found", &snapshotFacts{Err: errors.New("no etcd snapshot")}, NoGo, "no snapshot named could be used"},
	} {
		if c := judgeRollback(&facts{snapshot: tc.s, to: 34}, o); c.Verdict != tc.want || !strings.Contains(c.Summary, tc.says) {
			t.Errorf("%s: %s (%s)", tc.name, c.Verdict, c.Summary)
		}
	}
}

// What could not be checked is a no-go; the report lists the no-gos
// first; --strict makes a warning one.
func TestReportOrderAndStrict(t *testing.T) {
	f := &facts{cluster: "prod", talosErr: errors.New("no such context")}
	r := &Report{Checks: judge(f, &Options{})}
	r.finish(false)
	if r.Verdict != NoGo || r.Checks[0].ID != CheckAccess {
		t.Fatalf("%s %+v", r.Verdict, r.Checks)
	}
	for _, c := range r.Checks[1:] {
		if !c.NotChecked || c.Verdict != NoGo {
			t.Errorf("%s: %+v", c.ID, c)
		}
	}
	r = &Report{Checks: []Check{{ID: CheckRollbackPoint, Verdict: Warn}, {ID: CheckAccess, Verdict: Go}, {ID: CheckEtcdSpace, Verdict: NoGo}, {ID: CheckAdmission, Verdict: Warn}}}
	r.finish(false)
	var order []string
	for _, c := range r.Checks {
		order = append(order, c.ID)
	}
	if strings.Join(order, ",") != "etcd-space,admission,rollback-point,access" || r.Verdict != NoGo {
		t.Errorf("order %v, verdict %s", order, r.Verdict)
	}
	r = &Report{Checks: []Check{{ID: CheckRollbackPoint, Verdict: Warn}, {ID: CheckAccess, Verdict: Go}}}
	if r.finish(false); r.Verdict != Warn {
		t.Errorf("warn: %s", r.Verdict)
	}
	if r.finish(true); r.Verdict != NoGo {
		t.Errorf("strict: %s", r.Verdict)
	}
	fl := &Fleet{Verdict: NoGo}
	if fl.Err() == nil || (&Fleet{Verdict: Warn}).Err() != nil {
		t.Error("Fleet.Err")
	}
}
