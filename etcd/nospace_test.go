package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// fullEtcd is an embedded TLS etcd with client-certificate auth and a
// small quota, and a model of every live key written to it.
type fullEtcd struct {
	srv  *etcdtest.Server
	c    *etcd.Client
	live map[string]string
}

const testQuota = 8 << 20

func newFullEtcd(t *testing.T) *fullEtcd {
	t.Helper()
	srv := etcdtest.StartTLS(t, etcdtest.WithQuota(testQuota), etcdtest.WithoutFsync())
	c, err := etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &fullEtcd{srv: srv, c: c, live: map[string]string{}}
}

// putAll writes kvs in one transaction, and into the model if it went through.
func (f *fullEtcd) putAll(kvs map[string]string) error {
	ops := make([]clientv3.Op, 0, len(kvs))
	for k, v := range kvs {
		ops = append(ops, clientv3.OpPut(k, v))
	}
	if _, err := f.c.KV().Txn(ctx).Then(ops...).Commit(); err != nil {
		return err
	}
	maps.Copy(f.live, kvs)
	return nil
}

// value is a value of about size bytes that looks like what kube-apiserver
// stores (protobuf magic, then text), distinct per key and write.
func value(size int, key string, n int) string {
	head := fmt.Sprintf("k8s\x00%s#%d ", key, n)
	return head + strings.Repeat("x", max(size-len(head), 0))
}

// fill does what fills real clusters: a cluster's ordinary objects, an
// event flood in one namespace, a lease renewed over and over, and a
// controller rewriting one custom resource's status in a loop, until etcd
// refuses with NOSPACE; it returns that refusal and how many times the
// status was written. The write that crosses the quota is refused but may
// have been applied all the same (etcd applies it, then answers NOSPACE):
// the model follows etcd there.
func (f *fullEtcd) fill(t *testing.T) (statusWrites int, refusal error) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	base := map[string]string{
		"compact_rev_key": "1",
		"/registry/apiregistration.k8s.io/apiservices/v1.apps":                         value(600, "apps", 0),
		"/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com": value(3000, "crd", 0),
		"/registry/widgets-without-a-name":                                             "odd",
		"/registry/\x1b[31mred/a/b/c":                                                  "odd too",
	}
	for _, ns := range []string{"default", "kube-system", "flood", "team-a"} {
		base["/registry/namespaces/"+ns] = value(300, ns, 0)
	}
	for i := range 5 {
		k := fmt.Sprintf("/registry/pods/default/web-%d", i)
		base[k] = value(2500, k, 0)
	}
	for i := range 20 {
		k := fmt.Sprintf("/registry/events/default/web-%d.17a2b3c4d5e6f7%02d", i, i)
		base[k] = value(1000, k, 0)
	}
	must(f.putAll(base))
	// The flood: 3000 events of about 1 KiB, 100 to a transaction.
	for b := range 30 {
		batch := map[string]string{}
		for i := range 100 {
			k := fmt.Sprintf("/registry/events/flood/crashing-%04d.17a2b3c4d5e6f708", b*100+i)
			batch[k] = value(1000+i%50, k, 0)
		}
		must(f.putAll(batch))
	}
	// A lease renewed 200 times.
	lease := "/registry/leases/kube-system/kube-scheduler"
	for i := range 200 {
		must(f.putAll(map[string]string{lease: value(400, lease, i)}))
	}
	// The status loop, until etcd is full.
	w := "/registry/example.com/widgets/team-a/w1"
	for i := range 100_000 {
		v := value(16<<10, w, i)
		if err := f.putAll(map[string]string{w: v}); err != nil {
			resp, gerr := f.c.KV().Get(ctx, w)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if string(resp.Kvs[0].Value) == v {
				f.live[w] = v
				i++
			}
			return i, err
		}
	}
	t.Fatal("etcd never filled up")
	return 0, nil
}

// everything reads every key and value in etcd.
func (f *fullEtcd) everything(t *testing.T) map[string]string {
	t.Helper()
	resp, err := f.c.KV().Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func (f *fullEtcd) revision(t *testing.T) int64 {
	t.Helper()
	info, err := f.c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.Revision
}

func (f *fullEtcd) alarms(t *testing.T) []etcd.Alarm {
	t.Helper()
	as, err := f.c.Alarms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// sum is the keys and bytes (key + value) of the model's keys starting with prefix.
func (f *fullEtcd) sum(prefix string) etcd.UsageCount {
	var c etcd.UsageCount
	for k, v := range f.live {
		if strings.HasPrefix(k, prefix) {
			c.Keys++
			c.Bytes += int64(len(k) + len(v))
		}
	}
	return c
}

// The whole way out of a full etcd, against a real one: it fills the way
// clusters fill, refuses a write with NOSPACE (classified), the report
// names the flood first with exact numbers, a snapshot is taken, the dry
// runs change nothing, disarming before defragmentation is refused,
// compaction + defragmentation + disarm clear it, the probe then writes,
// and not one live key or value changed.
func TestNoSpaceWayOut(t *testing.T) {
	f := newFullEtcd(t)
	statusWrites, refusal := f.fill(t)

	// The refusal is etcd's NOSPACE; through this package, typed, with its category.
	if !etcd.IsNoSpace(refusal) || !etcd.IsNoSpace(errors.New("relayed: etcdserver: mvcc: database space exceeded")) || etcd.IsNoSpace(errors.New("etcdserver: request timed out")) {
		t.Fatalf("refusal not recognised as NOSPACE: %v", refusal)
	}
	var ns *etcd.NoSpaceError
	_, err := f.c.ProbeWrite(ctx, etcd.RealWriter(f.c))
	if !errors.As(err, &ns) || failure.Code(err) != int(failure.Refused) || !etcd.IsNoSpace(err) {
		t.Fatalf("probe of a full etcd: %v (exit code %d)", err, failure.Code(err))
	}
	if !strings.Contains(ns.Error(), "database space exceeded") || len(failure.Hints(err)) == 0 {
		t.Errorf("error %q, hints %q", ns, failure.Hints(err))
	}
	member := f.srv.Etcd.Server.MemberID()
	if got := f.alarms(t); !slices.Equal(got, []etcd.Alarm{{MemberID: etcd.ID(member), Type: etcd.AlarmNoSpace}}) {
		t.Fatalf("alarms %v", got)
	}
	before := f.everything(t)
	if !maps.Equal(before, f.live) {
		for k, v := range before {
			if f.live[k] != v {
				t.Errorf("%q: etcd holds %.60q, the test wrote %.60q", k, v, f.live[k])
			}
		}
		t.Fatalf("etcd holds %d keys, the test wrote %d live ones (refusal %v)", len(before), len(f.live), refusal)
	}

	// The report: the flood first, exact counts and bytes, the loop on top of the most written.
	u, err := f.c.Usage(ctx, etcd.UsageOptions{PageBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ns1, cl1, odd, out := etcd.ScopeNamespaced, etcd.ScopeCluster, etcd.ScopeOdd, etcd.ScopeOutside
	want := []etcd.UsageGroup{
		{Resource: "events", Namespace: "flood", Scope: ns1, UsageCount: f.sum("/registry/events/flood/")},
		{Resource: "events", Namespace: "default", Scope: ns1, UsageCount: f.sum("/registry/events/default/")},
		{Resource: "example.com/widgets", Namespace: "team-a", Scope: ns1, UsageCount: f.sum("/registry/example.com/widgets/team-a/")},
		{Resource: "pods", Namespace: "default", Scope: ns1, UsageCount: f.sum("/registry/pods/default/")},
		{Resource: "apiextensions.k8s.io/customresourcedefinitions", Scope: cl1, UsageCount: f.sum("/registry/apiextensions.k8s.io/")},
		{Resource: "namespaces", Scope: cl1, UsageCount: f.sum("/registry/namespaces/")},
		{Resource: "apiregistration.k8s.io/apiservices", Scope: cl1, UsageCount: f.sum("/registry/apiregistration.k8s.io/")},
		{Resource: "leases", Namespace: "kube-system", Scope: ns1, UsageCount: f.sum("/registry/leases/kube-system/")},
		{Resource: "\x1b[31mred", Scope: odd, UsageCount: f.sum("/registry/\x1b"), Examples: []string{"/registry/\x1b[31mred/a/b/c"}},
		{Resource: "widgets-without-a-name", Scope: odd, UsageCount: f.sum("/registry/widgets-"), Examples: []string{"/registry/widgets-without-a-name"}},
		{Resource: "compact_rev_key", Scope: out, UsageCount: f.sum("compact_rev_key")},
	}
	all := f.sum("")
	got := slices.Clone(u.Groups)
	for i := range got {
		if want := float64(got[i].Bytes) * 100 / float64(all.Bytes); got[i].Share != want {
			t.Errorf("group %s: share %v, want %v", got[i], got[i].Share, want)
		}
		got[i].Share = 0
	}
	slices.SortStableFunc(want, func(a, b etcd.UsageGroup) int { return int(b.Bytes - a.Bytes) })
	if !slices.EqualFunc(got, want, func(a, b etcd.UsageGroup) bool {
		return fmt.Sprint(a) == fmt.Sprint(b) && slices.Equal(a.Examples, b.Examples)
	}) {
		t.Errorf("groups:\n%s\nwant:\n%s", groupLines(got), groupLines(want))
	}
	if got := u.Top(1)[0].String(); !strings.HasPrefix(got, "events in namespace flood: 3000 keys, ") {
		t.Errorf("top writer %q", got)
	}
	if want := f.sum("/registry/"); u.Total != want || u.Outside != f.sum("compact_rev_key") {
		t.Errorf("totals %+v outside %+v, want %+v", u.Total, u.Outside, want)
	}
	if u.Resources[0].Resource != "events" || u.Resources[0].Namespaces != 2 || u.Resources[0].UsageCount != f.sum("/registry/events/") {
		t.Errorf("resources[0] = %+v", u.Resources[0])
	}
	if len(u.MostWritten) != 2 || u.MostWritten[0].Key != "/registry/example.com/widgets/team-a/w1" || u.MostWritten[0].Version != int64(statusWrites) ||
		u.MostWritten[1].Key != "/registry/leases/kube-system/kube-scheduler" || u.MostWritten[1].Version != 200 {
		t.Errorf("most written %v (status written %d times)", u.MostWritten, statusWrites)
	}
	if len(u.Largest) != 10 || u.Largest[0].Key != "/registry/example.com/widgets/team-a/w1" || u.Largest[1].Key != "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com" {
		t.Errorf("largest %v", u.Largest)
	}
	if !u.Consistent || u.Cluster.Revision != f.revision(t) || u.Prefix != "/registry" {
		t.Errorf("read at %+v, consistent %v", u.Cluster, u.Consistent)
	}
	sp := u.Space
	if len(sp.Members) != 1 || sp.Fullest != f.srv.Endpoints[0] || sp.Quota != testQuota || !sp.Members[0].Full() ||
		sp.Live != all.Bytes || sp.History != sp.DBSizeInUse-sp.AfterDefrag || sp.Reclaimable != sp.DBSize-sp.AfterDefrag || sp.DBSizeInUse > sp.DBSize ||
		!slices.Contains(sp.Members[0].Errors, "memberID:"+fmt.Sprint(uint64(member))+" alarm:NOSPACE ") {
		t.Errorf("space %+v", sp)
	}
	// History is what the loop left behind: at least its overwritten values.
	if overwritten := int64(statusWrites-1) * 16 << 10; sp.History < overwritten*8/10 {
		t.Errorf("history %d, the status loop overwrote %d bytes", sp.History, overwritten)
	}
	var text bytes.Buffer
	if err := u.WriteText(&text, 5); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", text.String())
	if s := text.String(); strings.Contains(s, "\x1b") || !strings.Contains(s, `\x1b[31mred`) || !strings.Contains(s, "(6 more groups)") {
		t.Errorf("report:\n%s", s)
	}

	// A snapshot still streams and verifies from a full etcd.
	if _, err := f.c.Snapshot(ctx, filepath.Join(t.TempDir(), "full.db"), etcd.RealWriter(f.c)); err != nil {
		t.Fatalf("snapshot of a full etcd: %v", err)
	}

	// Dry runs: the same guards, nothing changed.
	rev := f.revision(t)
	dry := etcd.DryRunWriter(f.c)
	if p, err := f.c.ProbeWrite(ctx, dry); err != nil || !p.DryRun || !strings.HasPrefix(p.String(), "would write /breakglass/probe/") {
		t.Errorf("dry probe: %v %v", p, err)
	}
	cr, err := f.c.Compact(ctx, 0, dry)
	if err != nil || !cr.DryRun || cr.Revision != rev || !strings.HasPrefix(cr.String(), "would compact") {
		t.Errorf("dry compact: %v %v", cr, err)
	}
	if _, err := f.c.KV().Get(ctx, "/registry/example.com/widgets/team-a/w1", clientv3.WithRev(rev-1)); err != nil {
		t.Errorf("history gone after a dry-run compaction: %v", err)
	}
	var sf *etcd.StillFullError
	if _, err := f.c.DisarmNoSpace(ctx, dry); !errors.As(err, &sf) {
		t.Errorf("dry disarm of a full etcd: %v", err)
	}
	if f.revision(t) != rev || len(f.alarms(t)) != 1 {
		t.Fatal("a dry run changed etcd")
	}

	// The cluster lock cannot be taken on a full etcd (its lease grant and
	// put are writes): a runbook for NOSPACE takes it once etcd writes again.
	if _, err := f.c.AcquireLock(ctx, oncall); !errors.As(err, &ns) || failure.Code(err) != int(failure.Refused) {
		t.Errorf("lock on a full etcd: %v", err)
	}

	// Still full: disarming is refused.
	if _, err := f.c.DisarmNoSpace(ctx, etcd.RealWriter(f.c)); !errors.As(err, &sf) || failure.Code(err) != int(failure.Refused) || !strings.Contains(err.Error(), "nothing disarmed") {
		t.Errorf("disarm of a full etcd: %v", err)
	}

	// Compaction frees the history inside the file; the file stays full.
	cr, err = f.c.Compact(ctx, 0, etcd.RealWriter(f.c))
	if err != nil || cr.DryRun || cr.Revision != rev || cr.AlreadyCompacted {
		t.Fatalf("compact: %v %v", cr, err)
	}
	if _, err := f.c.KV().Get(ctx, "/registry/example.com/widgets/team-a/w1", clientv3.WithRev(rev-1)); err == nil {
		t.Error("history still readable after compaction")
	}
	if cr, err := f.c.Compact(ctx, rev, etcd.RealWriter(f.c)); err != nil || !cr.AlreadyCompacted {
		t.Errorf("compacting again: %v %v", cr, err)
	}
	st, err := f.c.Status(ctx)
	if err != nil || !st[0].Full() {
		t.Fatalf("after compaction %+v %v", st, err)
	}
	if _, err := f.c.DisarmNoSpace(ctx, etcd.RealWriter(f.c)); !errors.As(err, &sf) {
		t.Errorf("disarm before defragmentation: %v", err)
	}

	// Defragmentation (the product asks Talos for it) gives the space back.
	if _, err := f.c.KV().Defragment(ctx, f.srv.Endpoints[0]); err != nil {
		t.Fatal(err)
	}
	st, _ = f.c.Status(ctx)
	if st[0].Full() || st[0].DBSize > sp.Live*3/2 {
		t.Fatalf("after defragmentation %+v", st[0])
	}
	t.Logf("live %d bytes in %d keys; database %d bytes (in use %d) before, %d after compaction and defragmentation, estimated %d",
		sp.Live, all.Keys, sp.DBSize, sp.DBSizeInUse, st[0].DBSize, sp.AfterDefrag)
	if d := float64(sp.AfterDefrag)/float64(st[0].DBSize) - 1; d > 0.05 || d < -0.05 {
		t.Errorf("estimated %d bytes after defragmentation, %d in fact", sp.AfterDefrag, st[0].DBSize)
	}

	// Disarm: a dry run says what it would do, then the real one.
	dr, err := f.c.DisarmNoSpace(ctx, dry)
	if err != nil || !dr.DryRun || len(dr.Disarmed) != 1 || !strings.HasPrefix(dr.String(), "would disarm NOSPACE on member") || len(f.alarms(t)) != 1 {
		t.Errorf("dry disarm: %v %v", dr, err)
	}
	dr, err = f.c.DisarmNoSpace(ctx, etcd.RealWriter(f.c))
	if err != nil || dr.DryRun || len(dr.Disarmed) != 1 || len(dr.Remaining) != 0 || len(dr.Unchecked) != 0 || len(f.alarms(t)) != 0 {
		t.Fatalf("disarm: %v %v, alarms %v", dr, err, f.alarms(t))
	}
	if dr, err := f.c.DisarmNoSpace(ctx, etcd.RealWriter(f.c)); err != nil || len(dr.Disarmed) != 0 {
		t.Errorf("disarm again: %v %v", dr, err)
	}

	// The probe writes, then leaves nothing behind.
	p, err := f.c.ProbeWrite(ctx, etcd.RealWriter(f.c))
	if err != nil || p.DryRun || p.PutRevision <= rev || p.DeleteRevision <= p.PutRevision || !strings.HasPrefix(p.Key, "/breakglass/probe/") {
		t.Fatalf("probe: %+v %v", p, err)
	}

	l, err := f.c.AcquireLock(ctx, oncall)
	if err != nil {
		t.Fatalf("lock once etcd writes again: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Not one live key lost or changed.
	after := f.everything(t)
	if !maps.Equal(before, after) {
		for k := range before {
			if before[k] != after[k] {
				t.Errorf("%q changed", k)
			}
		}
		for k := range after {
			if _, ok := before[k]; !ok {
				t.Errorf("%q appeared", k)
			}
		}
	}
}

var oncall = etcd.LockHolder{By: "oncall@laptop", Command: "recover", Since: time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)}

func groupLines(gs []etcd.UsageGroup) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "  %s %v\n", g, g.Examples)
	}
	return b.String()
}

// DisarmNoSpace disarms NOSPACE alarms only: a CORRUPT alarm stays raised
// and is reported; the writer refuses a request that would disarm all.
func TestDisarmNoSpaceLeavesCorrupt(t *testing.T) {
	f := newFullEtcd(t)
	member := uint64(f.srv.Etcd.Server.MemberID())
	mc := etcdserverpb.NewMaintenanceClient(f.c.KV().ActiveConnection())
	// A member this client cannot ask (as when given one endpoint of three).
	const other = 0x1234
	for _, a := range []*etcdserverpb.AlarmRequest{
		{MemberID: member, Alarm: etcdserverpb.AlarmType_NOSPACE},
		{MemberID: member, Alarm: etcdserverpb.AlarmType_CORRUPT},
		{MemberID: other, Alarm: etcdserverpb.AlarmType_NOSPACE},
	} {
		a.Action = etcdserverpb.AlarmRequest_ACTIVATE
		if _, err := mc.Alarm(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	dr, err := f.c.DisarmNoSpace(ctx, etcd.RealWriter(f.c))
	corrupt := []etcd.Alarm{{MemberID: etcd.ID(member), Type: etcd.AlarmCorrupt}}
	nospace := []etcd.Alarm{{MemberID: other, Type: etcd.AlarmNoSpace}, {MemberID: etcd.ID(member), Type: etcd.AlarmNoSpace}}
	if err != nil || !slices.Equal(dr.Disarmed, nospace) || !slices.Equal(dr.Remaining, corrupt) || !slices.Equal(dr.Unchecked, []etcd.ID{other}) {
		t.Fatalf("disarm: %+v %v", dr, err)
	}
	if s := dr.String(); !strings.Contains(s, "still raised: CORRUPT on member") || !strings.Contains(s, "member 1234 was not checked") {
		t.Errorf("%q", s)
	}
	if got := f.alarms(t); !slices.Equal(got, corrupt) {
		t.Errorf("alarms after %v", got)
	}
	for _, a := range []etcd.Alarm{{Type: etcd.AlarmCorrupt}, {MemberID: etcd.ID(member), Type: "NONE"}, {MemberID: etcd.ID(member), Type: "nospace"}} {
		if err := etcd.RealWriter(f.c).DisarmAlarm(ctx, a); err == nil {
			t.Errorf("disarmed %+v", a)
		}
	}
	if got := f.alarms(t); !slices.Equal(got, corrupt) {
		t.Errorf("alarms after refused disarms %v", got)
	}
}

// The probe's key can never fall under kube-apiserver's prefix.
func TestProbeRefusesToWriteUnderThePrefix(t *testing.T) {
	srv := etcdtest.StartPlain(t)
	c, err := etcd.Connect(context.Background(), etcd.Config{Endpoints: srv.Endpoints, Prefix: "/breakglass"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rev, _ := c.Cluster(ctx)
	var ce *etcd.ConfigError
	if _, err := c.ProbeWrite(ctx, etcd.RealWriter(c)); !errors.As(err, &ce) {
		t.Fatalf("probe under the prefix: %v", err)
	}
	if now, _ := c.Cluster(ctx); now.Revision != rev.Revision {
		t.Fatal("something was written")
	}
}
