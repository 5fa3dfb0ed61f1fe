package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// The cluster lock keeps two engineers from changing the same cluster at
// once. It lives in the cluster's own etcd, outside kube-apiserver's prefix,
// on a lease: a holder that dies releases it when the lease runs out. Like
// every other etcd request of this package, its failures are typed
// (unreachable, conflict).
const (
	lockKey = "/breakglass/lock"
	lockTTL = 30 // seconds
)

// LockHolder says who holds the lock.
type LockHolder struct {
	By       string    `json:"by"`
	Since    time.Time `json:"since"`
	Incident string    `json:"incident,omitempty"`
	Command  string    `json:"command"`
}

// LockHeldError is returned when someone else holds the lock.
type LockHeldError struct{ Holder LockHolder }

func (e *LockHeldError) Error() string {
	incident := e.Holder.Incident
	if incident == "" {
		incident = "-"
	}
	return fmt.Sprintf("another breakglass run holds the cluster lock: %s, %s since %s (incident %s)", e.Holder.By, e.Holder.Command, e.Holder.Since.Local().Format(time.RFC3339), incident)
}
func (e *LockHeldError) Unwrap() error { return failure.Conflict }
func (e *LockHeldError) Hints() []string {
	return []string{
		"coordinate with " + e.Holder.By + "; see what they do with: breakglass admission status",
		"if that run is dead and cannot release it, break the lock deliberately: breakglass lock break",
	}
}

// UnreadableLockError is a lock whose value breakglass cannot read.
type UnreadableLockError struct{ Err error }

func (e *UnreadableLockError) Error() string {
	return "the cluster lock holds a value breakglass cannot read"
}
func (e *UnreadableLockError) Unwrap() []error { return []error{e.Err, failure.Conflict} }

// Lock is a held cluster lock; Release gives it back.
type Lock struct {
	c      *Client
	lease  clientv3.LeaseID
	cancel context.CancelFunc
}

// AcquireLock takes the cluster lock or says who holds it.
func (c *Client) AcquireLock(ctx context.Context, holder LockHolder) (*Lock, error) {
	val, err := json.Marshal(holder)
	if err != nil {
		return nil, err
	}
	lease, err := c.kv.Grant(ctx, lockTTL)
	if err != nil {
		return nil, fmt.Errorf("take the cluster lock: %w", c.wrap(err))
	}
	resp, err := c.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lockKey), "=", 0)).
		Then(clientv3.OpPut(lockKey, string(val), clientv3.WithLease(lease.ID))).
		Else(clientv3.OpGet(lockKey)).
		Commit()
	if err != nil {
		_, _ = c.kv.Revoke(context.WithoutCancel(ctx), lease.ID)
		return nil, fmt.Errorf("take the cluster lock: %w", c.wrap(err))
	}
	if !resp.Succeeded {
		_, _ = c.kv.Revoke(context.WithoutCancel(ctx), lease.ID)
		var other LockHolder
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			_ = json.Unmarshal(kvs[0].Value, &other)
		}
		return nil, &LockHeldError{Holder: other}
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ka, err := c.kv.KeepAlive(kctx, lease.ID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("keep the cluster lock: %w", c.wrap(err))
	}
	go func() {
		for range ka { // drain: the client needs its answers read
		}
	}()
	return &Lock{c: c, lease: lease.ID, cancel: cancel}, nil
}

// Release gives the lock back at once (revoking the lease deletes the key).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.cancel()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := l.c.kv.Revoke(rctx, l.lease)
	return l.c.wrap(err)
}

// ReadLock says who holds the lock, or nil.
func (c *Client) ReadLock(ctx context.Context) (*LockHolder, error) {
	h, _, err := c.readLock(ctx)
	return h, err
}

func (c *Client) readLock(ctx context.Context) (*LockHolder, int64, error) {
	resp, err := c.kv.Get(ctx, lockKey)
	if err != nil {
		return nil, 0, c.wrap(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	var h LockHolder
	if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil {
		return nil, 0, &UnreadableLockError{Err: err}
	}
	return &h, resp.Kvs[0].ModRevision, nil
}

// BreakLock removes the lock whoever holds it: for a holder that is gone
// but whose lease is somehow kept alive, or a lock left without a lease.
func (c *Client) BreakLock(ctx context.Context) (*LockHolder, error) {
	h, err := c.ReadLock(ctx)
	if err != nil || h == nil {
		return h, err
	}
	_, err = c.kv.Delete(ctx, lockKey)
	return h, c.wrap(err)
}

// TakeOverLock removes the lock only if it is still holder's incident's, by
// the same user: a transaction on the key's revision, so a lock someone else
// took meanwhile is left alone.
func (c *Client) TakeOverLock(ctx context.Context, holder LockHolder) error {
	cur, rev, err := c.readLock(ctx)
	if err != nil || cur == nil {
		return err
	}
	if cur.Incident != holder.Incident || cur.By != holder.By {
		return &LockHeldError{Holder: *cur}
	}
	_, err = c.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(lockKey), "=", rev)).
		Then(clientv3.OpDelete(lockKey)).
		Commit()
	return c.wrap(err)
}
