package recovery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Two engineers at once: the second is refused with the first one's name;
// once released, or broken, the lock can be taken again.
func TestClusterLock(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	ctx := context.Background()
	connect := func() *etcd.Client {
		ec, err := ConnectEtcd(ctx, nil, EtcdOptions{Endpoints: srv.Endpoints, CACert: srv.CAFile, Cert: srv.CertFile, Key: srv.KeyFile})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ec.Close() })
		return ec
	}
	alice, bob := connect(), connect()
	first, err := alice.AcquireLock(ctx, etcd.LockHolder{By: "alice@laptop", Since: time.Now(), Incident: "inc-1", Command: "recover"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.AcquireLock(ctx, etcd.LockHolder{By: "bob@desk", Since: time.Now(), Command: "admission disable"})
	var held *etcd.LockHeldError
	if !errors.As(err, &held) || held.Holder.By != "alice@laptop" || held.Holder.Incident != "inc-1" || !errors.Is(err, failure.Conflict) {
		t.Fatalf("second lock: %v, want held by alice", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := bob.AcquireLock(ctx, etcd.LockHolder{By: "bob@desk", Since: time.Now(), Command: "recover"})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	// bob's process dies without releasing: alice breaks the lock deliberately.
	h, err := alice.BreakLock(ctx)
	if err != nil || h == nil || h.By != "bob@desk" {
		t.Fatalf("break: holder %+v, err %v", h, err)
	}
	if h, err := alice.ReadLock(ctx); err != nil || h != nil {
		t.Fatalf("after break: holder %+v, err %v", h, err)
	}
	_ = second.Release(ctx) // its key is gone already; revoking the lease still works
	if _, err := alice.AcquireLock(ctx, etcd.LockHolder{By: "alice@laptop", Since: time.Now(), Command: "recover"}); err != nil {
		t.Fatalf("after break: %v", err)
	}
}
