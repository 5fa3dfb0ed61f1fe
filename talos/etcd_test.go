package talos

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// etcdQuota is small enough to fill in a few writes, large enough for etcd's own
// buckets and one value after a defragmentation.
const etcdQuota = 1 << 20

// memberCluster is one emulated control plane whose etcd calls go to a real embedded
// member with a small space quota, and one worker.
func memberCluster(t *testing.T) (*talostest.Cluster, *etcdtest.Server, *clientv3.Client) {
	t.Helper()
	srv := etcdtest.StartTLS(t, etcdtest.WithQuota(etcdQuota))
	tlsConf := memberTLS(t, srv)
	c, err := talostest.NewCluster(t.Context(), talostest.ClusterOptions{
		ControlPlanes: 1, Workers: 1, Dir: t.TempDir(),
		EtcdMember: func(*talostest.Node) (talostest.EtcdAccess, error) {
			return talostest.EtcdAccess{Endpoint: srv.Endpoints[0], TLS: tlsConf}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kv, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, TLS: tlsConf, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	return c, srv, kv
}

func memberTLS(t *testing.T, srv *etcdtest.Server) *tls.Config {
	t.Helper()
	tlsConf, err := srv.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return tlsConf
}

func connectRole(t *testing.T, c *talostest.Cluster, r role.Role) *Client {
	t.Helper()
	path, err := c.Talosconfig(r)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Connect(t.Context(), Options{Talosconfig: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// fill writes new revisions of one key until etcd refuses with NOSPACE, and
// returns that refusal.
func fill(t *testing.T, ctx context.Context, kv *clientv3.Client) error {
	t.Helper()
	value := strings.Repeat("x", 64<<10)
	for i := range 200 {
		if _, err := kv.Put(ctx, "/registry/events/default/filler", value); err != nil {
			if i == 0 {
				t.Fatalf("the first write failed: %v", err)
			}
			return err
		}
	}
	t.Fatal("200 writes of 64 KiB and no NOSPACE with a 1 MiB quota")
	return nil
}

// The way out of a full etcd through the Talos API, on a real member: the
// node reports the NOSPACE alarm raised by its member, and its size over the
// quota; after a compaction, the node's defragmentation shrinks the file and
// its disarm clears the alarm; then a write goes through again.
func TestEtcdNoSpaceCycle(t *testing.T) {
	c, _, kv := memberCluster(t)
	ctx := t.Context()
	cp := c.ControlPlanes()[0].IP
	admin := connectRole(t, c, role.Admin)

	before, err := admin.EtcdStatus(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if before.MemberID == 0 || !before.IsLeader() || before.DBSize <= 0 || before.DBSizeInUse <= 0 || before.DBSizeInUse > before.DBSize {
		t.Fatalf("status of a healthy single member: %+v", before)
	}
	if al, err := admin.EtcdAlarms(ctx, cp); err != nil || len(al) != 0 {
		t.Fatalf("alarms before: %v, %v", al, err)
	}

	refusal := fill(t, ctx, kv)
	if !strings.Contains(refusal.Error(), "database space exceeded") {
		t.Fatalf("etcd refused with %v, want database space exceeded", refusal)
	}

	al, err := admin.EtcdAlarms(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if len(al) != 1 || al[0].Type != "NOSPACE" || al[0].MemberID != before.MemberID {
		t.Fatalf("alarms after filling: %+v, want one NOSPACE of member %s", al, MemberIDString(before.MemberID))
	}
	full, err := admin.EtcdStatus(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if full.DBSize < etcdQuota*3/4 || !strings.Contains(strings.Join(full.Errors, ";"), "NOSPACE") {
		t.Fatalf("status of the full member: size %d of quota %d, errors %q", full.DBSize, etcdQuota, full.Errors)
	}

	// The alarm alone refuses writes even once space is free: compaction is etcd's own call.
	resp, err := kv.Get(ctx, "/registry/events/default/filler")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "/probe", "x"); err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("a write with the alarm still raised: %v, want database space exceeded", err)
	}

	if err := admin.EtcdDefragment(ctx, cp); err != nil {
		t.Fatal(err)
	}
	defragged, err := admin.EtcdStatus(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if defragged.DBSize >= full.DBSize/2 {
		t.Fatalf("defragmentation left %d bytes of %d", defragged.DBSize, full.DBSize)
	}

	t.Logf("db size: %d before, %d full (errors %q), %d after defragment", before.DBSize, full.DBSize, full.Errors, defragged.DBSize)

	disarmed, err := admin.EtcdAlarmDisarm(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if len(disarmed) != 1 || disarmed[0].Type != "NOSPACE" || disarmed[0].MemberID != before.MemberID {
		t.Fatalf("disarmed %+v, want the NOSPACE alarm", disarmed)
	}
	if al, err := admin.EtcdAlarms(ctx, cp); err != nil || len(al) != 0 {
		t.Fatalf("alarms after disarm: %v, %v", al, err)
	}
	if _, err := kv.Put(ctx, "/probe", "x"); err != nil {
		t.Fatalf("a write after the way out: %v", err)
	}

	members, err := admin.EtcdMembers(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || members[0].ID != before.MemberID || members[0].Hostname != "etcdtest" || len(members[0].ClientURLs) != 1 {
		t.Fatalf("members: %+v", members)
	}
}

// Who may do what (machined's role table), and a worker's refusal.
func TestEtcdCallsRefused(t *testing.T) {
	c, _, _ := memberCluster(t)
	ctx := t.Context()
	cp, worker := c.ControlPlanes()[0].IP, c.Nodes[1].IP

	reader := connectRole(t, c, role.Reader)
	if _, err := reader.EtcdStatus(ctx, cp); err != nil {
		t.Errorf("reader status: %v", err)
	}
	if _, err := reader.EtcdAlarms(ctx, cp); err != nil {
		t.Errorf("reader alarms: %v", err)
	}
	for name, call := range map[string]func() error{
		"defragment": func() error { return reader.EtcdDefragment(ctx, cp) },
		"disarm":     func() error { _, err := reader.EtcdAlarmDisarm(ctx, cp); return err },
	} {
		err := call()
		var ne *NodeError
		if !errors.Is(err, ErrPermission) || !errors.As(err, &ne) || len(ne.Hints()) == 0 || !strings.Contains(ne.Hints()[0], "needs os:admin or os:operator") {
			t.Errorf("reader %s: %v (hints %v), want permission denied naming admin or operator", name, err, ne.Hints())
		}
	}

	backup := connectRole(t, c, role.EtcdBackup)
	if _, err := backup.EtcdAlarms(ctx, cp); err != nil {
		t.Errorf("etcd:backup alarms: %v", err)
	}
	operator := connectRole(t, c, role.Operator)
	if err := operator.EtcdDefragment(ctx, cp); err != nil {
		t.Errorf("operator defragment: %v", err)
	}

	admin := connectRole(t, c, role.Admin)
	for name, call := range map[string]func() error{
		"status":     func() error { _, err := admin.EtcdStatus(ctx, worker); return err },
		"alarms":     func() error { _, err := admin.EtcdAlarms(ctx, worker); return err },
		"disarm":     func() error { _, err := admin.EtcdAlarmDisarm(ctx, worker); return err },
		"defragment": func() error { return admin.EtcdDefragment(ctx, worker) },
		"members":    func() error { _, err := admin.EtcdMembers(ctx, worker); return err },
	} {
		if err := call(); !errors.Is(err, ErrNotControlPlane) || !strings.Contains(err.Error(), "node "+worker) {
			t.Errorf("%s on the worker: %v, want not a control-plane node", name, err)
		}
	}
}
