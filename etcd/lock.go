package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// The cluster lock keeps two engineers from changing the same cluster at
// once. It lives in the cluster's own etcd, outside kube-apiserver's prefix,
// on a lease: a holder that dies releases it when the lease runs out. Like
// every other etcd request of this package, its failures are typed
// (unreachable, conflict; on a full etcd, *NoSpaceError: the lock is
// taken once etcd writes again).
const lockKey = "/breakglass/lock"

// lockTTL is the lease's life without a keep-alive; a variable so that a
// test can make a lease run out quickly.
var lockTTL = 30 * time.Second

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
	hints := []string{"coordinate with " + termsafe.String(e.Holder.By) + "; see what they do with: breakglass admission status"}
	if e.Holder.Incident != "" {
		// A run killed on this host holds it still: its own resume takes
		// it back (a resume without an ID picks the newest incident).
		hints = append(hints, "if that run was yours and was interrupted, continue it, which takes its lock back: breakglass resume "+termsafe.String(e.Holder.Incident))
	}
	return append(hints, "if that run is dead and cannot release it, break the lock deliberately: breakglass lock break")
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

// Lock is a held cluster lock; Release gives it back, Lost says whether it
// is still held.
type Lock struct {
	c      *Client
	lease  clientv3.LeaseID
	holder LockHolder
	cancel context.CancelFunc

	mu       sync.Mutex
	lost     error     // why the lock is no longer held; nil while it is
	released bool      // given back by Release
	answered time.Time // when etcd last renewed the lease
}

// AcquireLock takes the cluster lock or says who holds it.
func (c *Client) AcquireLock(ctx context.Context, holder LockHolder) (*Lock, error) {
	val, err := json.Marshal(holder)
	if err != nil {
		return nil, err
	}
	lease, err := c.kv.Grant(ctx, int64(lockTTL/time.Second))
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
		_, _ = c.kv.Revoke(context.WithoutCancel(ctx), lease.ID)
		return nil, fmt.Errorf("keep the cluster lock: %w", c.wrap(err))
	}
	l := &Lock{c: c, lease: lease.ID, holder: holder, cancel: cancel, answered: time.Now()}
	go l.keepAlive(kctx, ka)
	go l.watch(kctx, resp.Header.Revision)
	return l, nil
}

// Lost is nil while the lock is known to be held, and otherwise a
// *LockLostError that says why it was lost and how to continue
// (failure.Conflict). A change made without the lock could race another
// run: check it before each one. What the lock's watch and keep-alives
// found is known at once; etcd is asked too (bounded by ctx and 2 s), so
// that a break or a revoke of a moment ago is seen. When etcd does not
// answer, the lock is still held while its lease lasts: etcd gives it to
// nobody else before the lease's TTL has passed since the last renewal.
// A nil Lock (none was taken) is never lost.
func (l *Lock) Lost(ctx context.Context) error {
	if l == nil {
		return nil
	}
	if err := l.known(); err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := l.c.kv.Get(gctx, lockKey)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // interrupted: still held, and the run stops anyway
	case err != nil:
		l.mu.Lock()
		silent := time.Since(l.answered)
		l.mu.Unlock()
		if silent < lockTTL-time.Second {
			return nil
		}
		l.loseWith(fmt.Sprintf("etcd has not renewed its lease for %s, as long as the lease lasts (%s)", silent.Round(time.Second), shortError(l.c.wrap(err))) + l.c.certNote())
	case len(resp.Kvs) == 0:
		l.loseWith(l.deleteReason())
	case clientv3.LeaseID(resp.Kvs[0].Lease) != l.lease:
		l.loseWith("the lock was taken by someone else: " + holderOf(resp.Kvs[0].Value))
	}
	return l.known()
}

// known is what the watch and the keep-alives found.
func (l *Lock) known() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil && l.released {
		return &LockLostError{Reason: "this run released it", Holder: l.holder}
	}
	return l.lost
}

// loseWith records the first reason the lock was lost, unless it was
// released on purpose meanwhile.
func (l *Lock) loseWith(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil && !l.released {
		l.lost = &LockLostError{Reason: reason, Holder: l.holder}
	}
}

// keepAlive reads the lease's keep-alive answers (the client needs them
// read) until the channel closes: the lease expired (etcd revoked it, or
// did not hear from this run for its TTL), or the lock was released.
func (l *Lock) keepAlive(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	for range ka {
		l.mu.Lock()
		l.answered = time.Now()
		l.mu.Unlock()
	}
	if ctx.Err() != nil {
		return // released
	}
	l.loseWith(l.leaseEndReason())
}

// deleteReason says why the lock key is gone.
func (l *Lock) deleteReason() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ttl, err := l.c.kv.TimeToLive(ctx, l.lease); err == nil && ttl.TTL > 0 {
		return "the lock was removed from etcd while its lease was alive (broken with: breakglass lock break)"
	}
	return "its lease was revoked or expired in etcd, which removed the lock"
}

// leaseEndReason says why the keep-alives stopped, as far as can be told.
func (l *Lock) leaseEndReason() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ttl, err := l.c.kv.TimeToLive(ctx, l.lease)
	switch {
	case err == nil && ttl.TTL == -1:
		return "its lease was revoked or expired in etcd"
	case err == nil:
		return "etcd stopped answering its keep-alives"
	}
	return fmt.Sprintf("etcd did not answer its keep-alives for %s, so its lease expired (%s)", lockTTL, shortError(l.c.wrap(err))) + l.c.certNote()
}

// certNote says, once the client certificate has expired (a minted one
// lasts an hour), that etcd refuses every new connection with it.
func (c *Client) certNote() string {
	if na := c.certNotAfter; !na.IsZero() && time.Now().After(na) {
		return fmt.Sprintf("; the client certificate expired at %s, so etcd refuses every new connection with it", na.Local().Format(time.RFC3339))
	}
	return ""
}

// watch follows the lock key from the revision that created it: deleted
// (broken, or its lease gone) or written by someone else, it is lost at once,
// even while the lease is still kept alive.
func (l *Lock) watch(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		for wr := range l.c.kv.Watch(clientv3.WithRequireLeader(ctx), lockKey, clientv3.WithRev(rev+1)) {
			for _, ev := range wr.Events {
				rev = ev.Kv.ModRevision
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					l.loseWith(l.deleteReason())
					return
				case clientv3.LeaseID(ev.Kv.Lease) != l.lease:
					l.loseWith("the lock was written over by someone else: " + holderOf(ev.Kv.Value))
					return
				}
			}
			if wr.Err() != nil {
				break // compacted, or no leader: look again below
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The watch ended (compaction, lost leader): read the key itself.
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := l.c.kv.Get(gctx, lockKey)
		cancel()
		switch {
		case err != nil:
			// etcd cannot be reached: the keep-alives tell when that lasts too long.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		case len(resp.Kvs) == 0:
			l.loseWith(l.deleteReason())
			return
		case clientv3.LeaseID(resp.Kvs[0].Lease) != l.lease:
			l.loseWith("the lock was taken by someone else: " + holderOf(resp.Kvs[0].Value))
			return
		}
		rev = resp.Header.Revision
	}
}

// holderOf names the holder in a lock value, or shows the value.
func holderOf(raw []byte) string {
	h, err := parseHolder(raw)
	if err != nil {
		return err.Error()
	}
	return (&LockHeldError{Holder: *h}).Error()
}

func shortError(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// LockLostError: the cluster lock this run took is no longer held, so
// another run may be changing the cluster; this one must not go on.
type LockLostError struct {
	Reason string
	Holder LockHolder // this run, as the lock named it
}

func (e *LockLostError) Error() string {
	return "the cluster lock was lost: " + termsafe.String(e.Reason) + "; nothing more is changed without it"
}
func (e *LockLostError) Unwrap() error { return failure.Conflict }
func (e *LockLostError) Hints() []string {
	h := []string{"see whether another breakglass run holds it now, and coordinate with them: breakglass lock status"}
	if e.Holder.Incident != "" {
		h = append(h, "once nobody else is changing the cluster, continue this incident (it takes the lock again): breakglass resume "+termsafe.String(e.Holder.Incident))
	}
	return h
}

// Release gives the lock back at once (revoking the lease deletes the key).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
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
	// Serializable: a member without quorum still tells who held the lock.
	resp, err := c.kv.Get(ctx, lockKey, clientv3.WithSerializable())
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
