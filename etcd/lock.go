package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
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
	return fmt.Sprintf("another breakglass run holds the cluster lock: %s, %s since %s (incident %s)", termsafe.String(e.Holder.By), termsafe.String(e.Holder.Command), e.Holder.Since.Local().Format(time.RFC3339), termsafe.String(incident))
}
func (e *LockHeldError) Unwrap() error { return failure.Conflict }
func (e *LockHeldError) Hints() []string {
	return []string{
		"coordinate with " + termsafe.String(e.Holder.By) + "; see what they do with: breakglass admission status",
		"if that run is dead and cannot release it, break the lock deliberately: breakglass lock break",
	}
}

// UnreadableLockError is a lock whose value breakglass cannot read: not
// written by breakglass, or by a version that wrote it differently. Raw is
// the value as stored; show it with termsafe, it is not ours.
type UnreadableLockError struct {
	Raw []byte
	Err error
}

// maxRawShown keeps a huge foreign value from flooding the terminal.
const maxRawShown = 200

func (e *UnreadableLockError) Error() string {
	return "the cluster lock " + lockKey + " holds a value breakglass cannot read: " + e.Shown()
}

// Shown is the raw value made safe for a terminal, cut at 200 bytes.
func (e *UnreadableLockError) Shown() string {
	raw, more := e.Raw, ""
	if len(raw) > maxRawShown {
		raw, more = raw[:maxRawShown], fmt.Sprintf("... (%d bytes)", len(e.Raw))
	}
	return termsafe.Bytes(raw) + more
}

func (e *UnreadableLockError) Unwrap() []error { return []error{e.Err, failure.Conflict} }
func (e *UnreadableLockError) Hints() []string {
	return []string{
		"see it with: breakglass lock status",
		"if no breakglass run holds it, break it (you are asked to confirm): breakglass lock break",
	}
}

// parseHolder reads a lock value; one without a holder's name or command
// is not breakglass's.
func parseHolder(raw []byte) (*LockHolder, error) {
	var h LockHolder
	err := json.Unmarshal(raw, &h)
	if err == nil && (h.By == "" || h.Command == "") {
		err = errors.New("no holder named in it")
	}
	if err != nil {
		return nil, &UnreadableLockError{Raw: raw, Err: err}
	}
	return &h, nil
}

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
		var raw []byte
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			raw = kvs[0].Value
		}
		other, err := parseHolder(raw)
		if err != nil {
			return nil, err
		}
		return nil, &LockHeldError{Holder: *other}
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
	h, err := parseHolder(resp.Kvs[0].Value)
	return h, resp.Kvs[0].ModRevision, err
}

// BreakLock removes the lock whoever holds it: for a holder that is gone
// but whose lease is somehow kept alive, a lock left without a lease, or a
// value breakglass cannot read (then it returns no holder and no error).
// Only the value it read is removed: a lock taken meanwhile is left alone.
func (c *Client) BreakLock(ctx context.Context) (*LockHolder, error) {
	h, rev, err := c.readLock(ctx)
	var unreadable *UnreadableLockError
	if errors.As(err, &unreadable) {
		err = nil
	}
	if err != nil || rev == 0 {
		return h, err
	}
	resp, err := c.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(lockKey), "=", rev)).
		Then(clientv3.OpDelete(lockKey)).
		Commit()
	if err != nil {
		return h, c.wrap(err)
	}
	if !resp.Succeeded {
		return h, fmt.Errorf("the cluster lock changed while it was being broken: %w", failure.Conflict)
	}
	return h, nil
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
