package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

func connectTo(t *testing.T, srv *etcdtest.Server) *Client {
	t.Helper()
	c, err := Connect(context.Background(), Config{Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitLost waits for the lock to say it is lost: the outcome, not its
// timing, is what is checked (the deadline is far beyond any answer).
func waitLost(t *testing.T, l *Lock) *LockLostError {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.Lost() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the lock never said it was lost")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var lost *LockLostError
	if err := l.Lost(); !errors.As(err, &lost) || !errors.Is(err, failure.Conflict) {
		t.Fatalf("Lost() = %v (%T), want a *LockLostError of category conflict", err, err)
	}
	return lost
}

var alice = LockHolder{By: "alice@laptop", Incident: "20260101-000000-abcd", Command: "recover"}

// Issue 21, case 7: a lease revoked mid-run (the way etcd ends it after 30 s
// without keep-alives, or an operator with etcdctl lease revoke) is seen as
// lost, and the error says how to continue. On main, the keep-alive's end
// was drained and ignored: the run went on without the lock.
func TestLockLostWhenLeaseRevoked(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	mine, other := connectTo(t, srv), connectTo(t, srv)
	ctx := context.Background()
	l, err := mine.AcquireLock(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Lost(); err != nil {
		t.Fatalf("a lock just taken: Lost() = %v", err)
	}
	resp, err := other.KV().Get(ctx, lockKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the lock: %v %v", resp, err)
	}
	if _, err := other.KV().Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	lost := waitLost(t, l)
	if !strings.Contains(lost.Reason, "revoked or expired") {
		t.Errorf("reason %q does not say the lease ended", lost.Reason)
	}
	hints := strings.Join(lost.Hints(), "\n")
	if !strings.Contains(hints, "breakglass lock status") || !strings.Contains(hints, "breakglass resume "+alice.Incident) {
		t.Errorf("hints do not say how to continue:\n%s", hints)
	}
	// Someone else can take it now, and this run's lock stays lost.
	bob, err := other.AcquireLock(ctx, LockHolder{By: "bob@desk", Command: "recover"})
	if err != nil {
		t.Fatalf("bob after the revoke: %v", err)
	}
	defer bob.Release(ctx)
	if l.Lost() == nil {
		t.Fatal("lost, then bob took it: Lost() = nil")
	}
	if bob.Lost() != nil {
		t.Fatalf("bob's lock: Lost() = %v", bob.Lost())
	}
}

// A lock broken with `breakglass lock break` while its holder's lease is
// still kept alive: the keep-alives alone would never tell.
func TestLockLostWhenBroken(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	mine, other := connectTo(t, srv), connectTo(t, srv)
	ctx := context.Background()
	l, err := mine.AcquireLock(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.BreakLock(ctx); err != nil {
		t.Fatal(err)
	}
	if lost := waitLost(t, l); !strings.Contains(lost.Reason, "breakglass lock break") {
		t.Errorf("reason %q does not say it was broken", lost.Reason)
	}
}

// etcd stops answering: once the lease's TTL has passed without a
// keep-alive answer the lock is lost, and when the client certificate has
// expired meanwhile (a minted one lasts an hour) the reason says that no
// reconnect can succeed.
func TestLockLostWhenEtcdStopsAnswering(t *testing.T) {
	defer func(ttl time.Duration) { lockTTL = ttl }(lockTTL)
	lockTTL = 2 * time.Second
	srv := etcdtest.StartTLS(t)
	mine := connectTo(t, srv)
	ctx := context.Background()
	l, err := mine.AcquireLock(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	mine.certNotAfter = time.Now().Add(-time.Minute)
	srv.Close()
	lost := waitLost(t, l)
	for _, want := range []string{"did not answer its keep-alives for 2s", "client certificate expired at"} {
		if !strings.Contains(lost.Reason, want) {
			t.Errorf("reason %q does not say %q", lost.Reason, want)
		}
	}
}

// Released on purpose, the lock is not held either, but that is no loss to
// report while the run went on: Lost says it was released, and a nil lock
// (none was taken) is never lost.
func TestLockReleasedIsNotHeld(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	mine := connectTo(t, srv)
	ctx := context.Background()
	l, err := mine.AcquireLock(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Lost(); err == nil || !strings.Contains(err.Error(), "released") {
		t.Fatalf("after release: Lost() = %v", err)
	}
	var none *Lock
	if err := none.Lost(); err != nil {
		t.Fatalf("nil lock: Lost() = %v", err)
	}
}
