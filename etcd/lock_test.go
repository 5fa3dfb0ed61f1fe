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

// asLost is err as a *LockLostError of category conflict, or fails.
func asLost(t *testing.T, err error) *LockLostError {
	t.Helper()
	var lost *LockLostError
	if !errors.As(err, &lost) || !errors.Is(err, failure.Conflict) {
		t.Fatalf("Lost = %v (%T), want a *LockLostError of category conflict", err, err)
	}
	return lost
}

// waitKnown waits until the lock's watch or keep-alives have found, by
// themselves, that it is lost: the outcome, not its timing, is what is
// checked (the deadline is far beyond any answer).
func waitKnown(t *testing.T, l *Lock) *LockLostError {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.known() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the lock never found by itself that it was lost")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return asLost(t, l.known())
}

// heldLock is alice's lock on a fresh etcd, and another client of it.
func heldLock(t *testing.T) (*Lock, *Client) {
	t.Helper()
	srv := etcdtest.StartTLS(t)
	l, err := connectTo(t, srv).AcquireLock(context.Background(), alice)
	if err != nil {
		t.Fatal(err)
	}
	return l, connectTo(t, srv)
}

var alice = LockHolder{By: "alice@laptop", Incident: "20260101-000000-abcd", Command: "recover"}

// Issue 21, case 7: a lease revoked mid-run (the way etcd ends it after 30 s
// without keep-alives, or an operator with etcdctl lease revoke) is seen as
// lost, and the error says how to continue. On main, the keep-alive's end
// was drained and ignored: the run went on without the lock.
func TestLockLostWhenLeaseRevoked(t *testing.T) {
	ctx := context.Background()
	l, other := heldLock(t)
	if err := l.Lost(t.Context()); err != nil {
		t.Fatalf("a lock just taken: Lost() = %v", err)
	}
	resp, err := other.KV().Get(ctx, lockKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the lock: %v %v", resp, err)
	}
	if _, err := other.KV().Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	// Asked right after (before the next change), etcd says so; and the
	// lock finds it by itself too, without being asked.
	lost := asLost(t, l.Lost(t.Context()))
	if !strings.Contains(lost.Reason, "revoked or expired") {
		t.Errorf("reason %q does not say the lease ended", lost.Reason)
	}
	waitKnown(t, l)
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
	if l.Lost(t.Context()) == nil {
		t.Fatal("lost, then bob took it: Lost() = nil")
	}
	if bob.Lost(t.Context()) != nil {
		t.Fatalf("bob's lock: Lost() = %v", bob.Lost(t.Context()))
	}
}

// A lock broken with `breakglass lock break` while its holder's lease is
// still kept alive: the keep-alives alone would never tell.
func TestLockLostWhenBroken(t *testing.T) {
	ctx := context.Background()
	l, other := heldLock(t)
	if _, err := other.BreakLock(ctx); err != nil {
		t.Fatal(err)
	}
	if lost := asLost(t, l.Lost(t.Context())); !strings.Contains(lost.Reason, "breakglass lock break") {
		t.Errorf("reason %q does not say it was broken", lost.Reason)
	}
	if lost := waitKnown(t, l); !strings.Contains(lost.Reason, "breakglass lock break") {
		t.Errorf("found by itself: reason %q does not say it was broken", lost.Reason)
	}
}

// etcd stops answering. For as long as the lease lasts the lock is still
// held (etcd gives it to nobody else before the lease runs out): a blip is
// no loss. Once the lease's TTL has passed without a keep-alive answer it
// is lost, and when the client certificate has expired meanwhile (a minted
// one lasts an hour) the reason says that no reconnect can succeed.
func TestLockLostWhenEtcdStopsAnswering(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	mine := connectTo(t, srv)
	l, err := mine.AcquireLock(t.Context(), alice)
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	l.mu.Lock()
	l.answered = time.Now() // its last renewal: just before etcd went silent
	l.mu.Unlock()
	if err := l.Lost(t.Context()); err != nil {
		t.Errorf("etcd silent for a moment, the lease (%s) still running: Lost = %v", lockTTL, err)
	}

	defer func(ttl time.Duration) { lockTTL = ttl }(lockTTL)
	lockTTL = 2 * time.Second
	srv = etcdtest.StartTLS(t)
	mine = connectTo(t, srv)
	if l, err = mine.AcquireLock(t.Context(), alice); err != nil {
		t.Fatal(err)
	}
	mine.certNotAfter = time.Now().Add(-time.Minute)
	srv.Close()
	lost := waitKnown(t, l)
	for _, want := range []string{"did not answer its keep-alives for 2s", "client certificate expired at"} {
		if !strings.Contains(lost.Reason, want) {
			t.Errorf("reason %q does not say %q", lost.Reason, want)
		}
	}
	if err := l.Lost(t.Context()); err != lost {
		t.Errorf("Lost = %v, want what the keep-alives found", err)
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
	if err := l.Lost(t.Context()); err == nil || !strings.Contains(err.Error(), "released") {
		t.Fatalf("after release: Lost() = %v", err)
	}
	var none *Lock
	if err := none.Lost(t.Context()); err != nil {
		t.Fatalf("nil lock: Lost() = %v", err)
	}
}
