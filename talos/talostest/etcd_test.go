package talostest_test

import (
	"crypto/sha256"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// Without a member to act on, the maintenance calls fail as a node's do when its etcd
// client cannot work, never with a made-up success; on a worker they are refused.
func TestEtcdMaintenanceWithoutMember(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 1, Workers: 1})
	cl := newClient(t, c, role.Admin)
	cp, worker := c.Nodes[0].IP, c.Nodes[1].IP

	_, err := cl.EtcdAlarmList(client.WithNode(ctx, cp))
	if err == nil || !strings.Contains(err.Error(), "failed to create etcd client: etcd is not running on this emulated node") {
		t.Errorf("alarm list: %v", err)
	}

	_, err = cl.EtcdAlarmDisarm(client.WithNode(ctx, cp))
	if err == nil || !strings.Contains(err.Error(), "failed to create etcd client") {
		t.Errorf("alarm disarm: %v", err)
	}

	_, err = cl.EtcdDefragment(client.WithNode(ctx, cp))
	if err == nil || !strings.Contains(err.Error(), "failed to create etcd client") {
		t.Errorf("defragment: %v", err)
	}

	for api, call := range map[string]func() error{
		"etcd alarm list":   func() error { _, err := cl.EtcdAlarmList(client.WithNode(ctx, worker)); return err },
		"etcd alarm disarm": func() error { _, err := cl.EtcdAlarmDisarm(client.WithNode(ctx, worker)); return err },
		"etcd defragment":   func() error { _, err := cl.EtcdDefragment(client.WithNode(ctx, worker)); return err },
	} {
		err := call()
		wantCode(t, err, codes.Unimplemented)

		if !strings.Contains(err.Error(), api+" is only available on control plane nodes") {
			t.Errorf("%s on a worker: %v", api, err)
		}
	}

	// machined's role table: disarm and defragment change etcd
	reader := newClient(t, c, role.Reader)
	_, err = reader.EtcdAlarmList(client.WithNode(ctx, worker))
	wantCode(t, err, codes.Unimplemented) // allowed, then refused by the worker

	_, err = reader.EtcdDefragment(client.WithNode(ctx, cp))
	wantCode(t, err, codes.PermissionDenied)

	_, err = newClient(t, c, role.EtcdBackup).EtcdAlarmDisarm(client.WithNode(ctx, cp))
	wantCode(t, err, codes.PermissionDenied)
}

// With a member, status and members are etcd's own answers and a snapshot is the
// member's: a valid bbolt file with etcd's sha256 trailer.
func TestEtcdMemberAnswers(t *testing.T) {
	ctx := t.Context()
	srv := etcdtest.StartTLS(t)

	tlsConf, err := srv.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}

	acc := talostest.EtcdAccess{Endpoint: srv.Endpoints[0], TLS: tlsConf}

	c := newCluster(t, talostest.ClusterOptions{EtcdMember: func(*talostest.Node) (talostest.EtcdAccess, error) { return acc, nil }})
	cl := newClient(t, c, role.EtcdBackup)
	node := c.Nodes[0].IP

	st, err := etcdStatus(ctx, cl, node)
	if err != nil {
		t.Fatal(err)
	}

	id := uint64(srv.Etcd.Server.MemberID())
	if st.MemberId != id || st.Leader != id || st.DbSize <= 0 || st.StorageVersion == "" || st.ProtocolVersion == "" {
		t.Errorf("status %v, want the member %x", st, id)
	}

	for _, local := range []bool{true, false} {
		members, err := etcdMembers(ctx, cl, node, local)
		if err != nil {
			t.Fatal(err)
		}

		if len(members) != 1 || members[0].Id != id || members[0].Hostname != "etcdtest" || members[0].ClientUrls[0] != srv.Endpoints[0] {
			t.Errorf("members (local %v): %v", local, members)
		}
	}

	al, err := cl.EtcdAlarmList(client.WithNode(ctx, node))
	if err != nil || len(al.GetMessages()) != 1 || len(al.GetMessages()[0].GetMemberAlarms()) != 0 {
		t.Errorf("alarms of a healthy member: %v, %v", al, err)
	}

	snap, err := readSnapshot(ctx, cl, node)
	if err != nil {
		t.Fatal(err)
	}

	if len(snap)%512 != sha256.Size {
		t.Fatalf("snapshot of %d bytes: not a bbolt file with its sha256 trailer", len(snap))
	}

	if sum := sha256.Sum256(snap[:len(snap)-sha256.Size]); string(sum[:]) != string(snap[len(snap)-sha256.Size:]) {
		t.Fatal("snapshot trailer does not match its content")
	}
}
