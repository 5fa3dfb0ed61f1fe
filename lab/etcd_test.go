package lab

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// The lab's etcd with a small quota, filled by writes, seen and repaired through
// each node's Talos API (no kube-apiserver): every node answers from its own member
// (its ID, its size), the NOSPACE alarm is listed alike on each, defragmenting each
// member in turn and one disarm clear it, and a write goes through again.
func TestEtcdQuotaThroughTalos(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const quota = 1 << 20
	ips, err := NodeIPs(labFirstIP(), 2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c, err := talostest.NewCluster(ctx, talostest.ClusterOptions{ControlPlanes: 2, IPs: ips, Dir: filepath.Join(dir, "talos"), Etcd: &talostest.EtcdOptions{QuotaBytes: quota}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	path, err := c.Talosconfig(role.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := talos.Connect(ctx, talos.Options{Talosconfig: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	ca, err := etcdtest.LoadCA(c.EtcdCA().Crt, c.EtcdCA().Key)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEtcdCluster(c, ca)
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := (&Lab{Etcd: e}).etcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints[:1], TLS: tlsConf, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })

	ids := map[string]uint64{} // node -> its member's ID, from the node
	for _, ip := range ips[:2] {
		st, err := tc.EtcdStatus(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		ids[ip] = st.MemberID
	}
	members, err := tc.EtcdMembers(ctx, ips[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if i := slices.Index([]string{"cp-1", "cp-2"}, m.Hostname); i < 0 || ids[ips[i]] != m.ID {
			t.Errorf("member %s %s is not what node %s says of itself (%+v)", m.Hostname, talos.MemberIDString(m.ID), ips[max(i, 0)], ids)
		}
	}
	if len(members) != 2 || ids[ips[0]] == ids[ips[1]] {
		t.Fatalf("members %+v, node IDs %v: want two members, each node its own", members, ids)
	}

	value := strings.Repeat("x", 64<<10)
	var refusal error
	for range 200 {
		if _, refusal = kv.Put(ctx, "/registry/events/default/filler", value); refusal != nil {
			break
		}
	}
	if refusal == nil || !strings.Contains(refusal.Error(), "database space exceeded") {
		t.Fatalf("filling a %d-byte quota: %v, want database space exceeded", quota, refusal)
	}

	// Each member raises its own NOSPACE when it applies a write over its quota, so
	// a second alarm may come a moment after the refusal: the nodes agree once the
	// members have applied everything, checked after the defragmentation below.
	noSpace := func(ip string) []talos.EtcdAlarm {
		t.Helper()
		al, err := tc.EtcdAlarms(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		if len(al) == 0 || slices.ContainsFunc(al, func(a talos.EtcdAlarm) bool {
			return a.Type != "NOSPACE" || (a.MemberID != ids[ips[0]] && a.MemberID != ids[ips[1]])
		}) {
			t.Fatalf("node %s alarms: %+v, want NOSPACE raised by the members", ip, al)
		}
		return al
	}
	noSpace(ips[0])
	noSpace(ips[1])

	resp, err := kv.Get(ctx, "/registry/events/default/filler")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{ips[1], ips[0]} {
		full, err := tc.EtcdStatus(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.EtcdDefragment(ctx, ip); err != nil {
			t.Fatal(err)
		}
		after, err := tc.EtcdStatus(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		if full.DBSize < quota/2 || after.DBSize >= full.DBSize/2 {
			t.Errorf("node %s: %d bytes before defragmenting, %d after", ip, full.DBSize, after.DBSize)
		}
	}
	if _, err := kv.Put(ctx, "/probe", "x"); err == nil {
		t.Fatal("a write went through with the alarm still raised")
	}
	first := noSpace(ips[0])
	for deadline := time.Now().Add(10 * time.Second); ; {
		second := noSpace(ips[1])
		if slices.Equal(second, first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s lists %+v, node %s %+v: alarms are replicated", ips[1], second, ips[0], first)
		}
		time.Sleep(100 * time.Millisecond)
		first = noSpace(ips[0])
	}
	disarmed, err := tc.EtcdAlarmDisarm(ctx, ips[1])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(disarmed, first) {
		t.Errorf("disarmed %+v, want %+v", disarmed, first)
	}
	for _, ip := range ips[:2] {
		if al, err := tc.EtcdAlarms(ctx, ip); err != nil || len(al) != 0 {
			t.Errorf("node %s alarms after disarm: %+v, %v", ip, al, err)
		}
	}
	if _, err := kv.Put(ctx, "/probe", "x"); err != nil {
		t.Fatalf("a write after the way out: %v", err)
	}
}
