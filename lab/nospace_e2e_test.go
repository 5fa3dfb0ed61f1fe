package lab

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/etcd"
)

// The etcd-nospace scenario dies as described, and the way out by hand
// brings kube-apiserver back without a configuration change or a live key
// lost: the reference for the etcd-nospace runbook.
func TestEtcdNoSpaceByHand(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{1, 3} {
		name := "1-node"
		if nodes > 1 {
			name = fmt.Sprintf("%d-nodes", nodes)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testNoSpaceByHand(t, nodes)
		})
	}
}

func testNoSpaceByHand(t *testing.T, nodes int) {
	l := startLabWith(t, Options{Nodes: nodes, EtcdQuotaBytes: NoSpaceQuota})
	ctx := context.Background()
	tl := NewTimeline(testWriter{t})
	ev, err := RunScenario(ctx, l, ScenarioEtcdNoSpace, tl)
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	for _, d := range ev {
		if !d.NoSpace() || d.LogLines == 0 || !slices.Contains(d.FailingChecks, NoSpaceCheck) || !strings.Contains(d.LogSample, NoSpaceLogLine) {
			t.Errorf("node %s: evidence %+v", d.Node, d)
		}
	}
	tc, err := l.TalosClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	raised, err := tc.EtcdAlarms(ctx, l.Nodes()[0])
	if err != nil || len(raised) == 0 {
		t.Fatalf("alarms through the Talos API: %v %v", raised, err)
	}

	// It crash-loops: every node's NewVersion exits on the RBAC hook, never ready.
	exit := `PostStartHook "rbac/bootstrap-roles" failed`
	if err := tl.Step("kube-apiserver "+NewVersion+" exits on every node: "+exit, func() error {
		return waitRuns(ctx, l, 2*time.Minute, func(r ContainerRun) bool { return strings.Contains(r.LastLog, exit) })
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range l.Runs() {
		if strings.HasSuffix(r.Image, ":"+NewVersion) && !r.Ready.IsZero() {
			t.Fatalf("node %s: kube-apiserver %s was ready on the full etcd at %s", r.Node, NewVersion, r.Ready)
		}
	}

	hashes := configHashes(t, ctx, tc, l.Nodes())
	ec, err := l.EtcdClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	before, rev, err := EtcdKeys(ctx, ec)
	if err != nil {
		t.Fatal(err)
	}
	// The etcd package sees what filled it: the flood first, the status loop the most written.
	u, err := ec.Usage(ctx, etcd.UsageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := "/registry/configmaps/kube-system/" + StatusConfigMap
	if top := u.Top(1); len(top) == 0 || top[0].Resource != "events" || top[0].Namespace != FloodNamespace || len(u.MostWritten) == 0 || u.MostWritten[0].Key != status {
		t.Errorf("usage: top %v, most written %v", u.Top(1), u.MostWritten)
	}
	t.Logf("full etcd at revision %d: %d keys; %s; history %s", rev, len(before), u.Top(1)[0], etcd.FormatBytes(u.Space.History))

	var wo *WayOut
	if err := tl.Step("the way out by hand: compact (etcd), defragment each member through Talos (leader last), disarm NOSPACE, probe a write", func() error {
		wo, err = ClearNoSpaceByHand(ctx, l)
		return err
	}); err != nil {
		t.Fatalf("%v (done: %+v)", err, wo)
	}
	if len(wo.Defrag) != nodes || !wo.Defrag[nodes-1].Leader {
		t.Errorf("defragmented %+v, want every member, the leader last", wo.Defrag)
	}
	for _, s := range wo.Defrag {
		t.Logf("node %s member %s leader %v: database %s full, %s compacted, %s defragmented in %s", s.Node, s.MemberID, s.Leader,
			etcd.FormatBytes(s.Full), etcd.FormatBytes(s.Compacted), etcd.FormatBytes(s.Defragmented), round(s.Took))
		if s.Full < NoSpaceQuota*9/10 || s.Defragmented > s.Full/2 || s.Defragmented+2<<20 > NoSpaceQuota {
			t.Errorf("node %s: database %d bytes full, %d defragmented, quota %d", s.Node, s.Full, s.Defragmented, NoSpaceQuota)
		}
	}
	var want []etcd.Alarm
	for _, a := range raised {
		want = append(want, etcd.Alarm{MemberID: etcd.ID(a.MemberID), Type: a.Type})
	}
	for _, a := range want {
		if !slices.Contains(wo.Disarm.Disarmed, a) {
			t.Errorf("disarmed %v, raised %v", wo.Disarm.Disarmed, want)
		}
	}
	t.Logf("way out in %s: %s; %s; %s", round(wo.Elapsed), wo.Compaction, wo.Disarm, wo.Probe)

	start := time.Now()
	if err := tl.Step("kube-apiserver "+NewVersion+" ready on every node, no configuration changed", func() error {
		return l.WaitReadyVersion(ctx, NewVersion, 6*time.Minute)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("ready %s after the way out", round(time.Since(start)))
	if got := configHashes(t, ctx, tc, l.Nodes()); !maps.Equal(got, hashes) {
		t.Errorf("machine configs changed: %v, were %v", got, hashes)
	}
	for _, ip := range l.Nodes() {
		if al, err := tc.EtcdAlarms(ctx, ip); err != nil || len(al) != 0 {
			t.Errorf("node %s alarms after the way out: %v %v", ip, al, err)
		}
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "after-the-way-out", Namespace: "default"}}
	if err := kube.Do(ctx, "POST", "/api/v1/namespaces/default/configmaps", cm, nil); err != nil {
		t.Errorf("a write through kube-apiserver after the way out: %v", err)
	}

	// Not one live key lost; only kube-apiserver's own keys changed.
	after, _, err := EtcdKeys(ctx, ec)
	if err != nil {
		t.Fatal(err)
	}
	d := DiffKeys(before, after)
	if len(d.Gone) > 0 {
		t.Errorf("keys lost: %q", d.Gone)
	}
	for _, k := range d.Changed {
		if !APIServerWrites(k) {
			t.Errorf("key %q changed", k)
		}
	}
	for _, k := range d.Added {
		if !APIServerWrites(k) && k != "/registry/configmaps/default/"+cm.Name {
			t.Errorf("key %q appeared", k)
		}
	}
	t.Logf("changed %d keys (kube-apiserver's own): %q; added %d: %q", len(d.Changed), d.Changed, len(d.Added), d.Added)
	for _, ip := range l.Nodes() {
		if st, err := tc.EtcdStatus(ctx, ip); err == nil {
			t.Logf("node %s: database %s, in use %s", ip, etcd.FormatBytes(st.DBSize), etcd.FormatBytes(st.DBSizeInUse))
		}
	}
}

// waitRuns waits until every node has run kube-apiserver NewVersion to an
// exit that done accepts.
func waitRuns(ctx context.Context, l *Lab, timeout time.Duration, done func(ContainerRun) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		missing := slices.Clone(l.Nodes())
		for _, r := range l.Runs() {
			if strings.HasSuffix(r.Image, ":"+NewVersion) && !r.Exited.IsZero() && done(r) {
				missing = slices.DeleteFunc(missing, func(ip string) bool { return ip == r.Node })
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no such exit within %s on %s", timeout, strings.Join(missing, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
