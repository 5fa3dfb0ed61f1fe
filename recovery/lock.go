package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/talos"
)

// The cluster lock keeps two engineers from changing the same cluster at
// once. It lives in the cluster's own etcd, outside kube-apiserver's prefix,
// on a lease: a holder that dies releases it when the lease runs out.
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
	return fmt.Sprintf("another breakglass run holds the cluster lock: %s, %s since %s (incident %s)", e.Holder.By, e.Holder.Command, e.Holder.Since.Local().Format(time.RFC3339), orDash(e.Holder.Incident))
}
func (e *LockHeldError) Unwrap() error { return ErrConflict }
func (e *LockHeldError) Hints() []string {
	return []string{
		"coordinate with " + e.Holder.By + "; see what they do with: breakglass admission status",
		"if that run is dead and cannot release it, break the lock deliberately: breakglass lock break",
	}
}

// Lock is a held cluster lock; Release gives it back.
type Lock struct {
	ec     *etcd.Client
	lease  clientv3.LeaseID
	cancel context.CancelFunc
}

// AcquireLock takes the cluster lock or says who holds it.
func AcquireLock(ctx context.Context, ec *etcd.Client, holder LockHolder) (*Lock, error) {
	kv := ec.KV()
	val, err := json.Marshal(holder)
	if err != nil {
		return nil, err
	}
	lease, err := kv.Grant(ctx, lockTTL)
	if err != nil {
		return nil, fmt.Errorf("take the cluster lock: %w", err)
	}
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(lockKey), "=", 0)).
		Then(clientv3.OpPut(lockKey, string(val), clientv3.WithLease(lease.ID))).
		Else(clientv3.OpGet(lockKey)).
		Commit()
	if err != nil {
		_, _ = kv.Revoke(context.WithoutCancel(ctx), lease.ID)
		return nil, fmt.Errorf("take the cluster lock: %w", err)
	}
	if !resp.Succeeded {
		_, _ = kv.Revoke(context.WithoutCancel(ctx), lease.ID)
		var other LockHolder
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			_ = json.Unmarshal(kvs[0].Value, &other)
		}
		return nil, &LockHeldError{Holder: other}
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ka, err := kv.KeepAlive(kctx, lease.ID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("keep the cluster lock: %w", err)
	}
	go func() {
		for range ka { // drain: the client needs its answers read
		}
	}()
	return &Lock{ec: ec, lease: lease.ID, cancel: cancel}, nil
}

// Release gives the lock back at once (revoking the lease deletes the key).
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.cancel()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := l.ec.KV().Revoke(rctx, l.lease)
	return err
}

// ReadLock says who holds the lock, or nil.
func ReadLock(ctx context.Context, ec *etcd.Client) (*LockHolder, error) {
	resp, err := ec.KV().Get(ctx, lockKey)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var h LockHolder
	if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil {
		return nil, errors.New("the cluster lock holds a value breakglass cannot read")
	}
	return &h, nil
}

// BreakLock removes the lock whoever holds it: for a holder that is gone
// but whose lease is somehow kept alive, or a lock left without a lease.
func BreakLock(ctx context.Context, ec *etcd.Client) (*LockHolder, error) {
	h, err := ReadLock(ctx, ec)
	if err != nil || h == nil {
		return h, err
	}
	_, err = ec.KV().Delete(ctx, lockKey)
	return h, err
}

// TakeClusterLock connects to etcd and takes the lock. When etcd cannot be
// reached it does not stand in the way of the incident: it returns no lock
// and a warning saying nobody is kept out. Someone else holding the lock is
// an error (*LockHeldError).
func TakeClusterLock(ctx context.Context, tc *talos.Client, o EtcdOptions, holder LockHolder) (lock *Lock, ec *etcd.Client, warning string, err error) {
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	ec, err = ConnectEtcd(ctx, tc, o)
	if err != nil {
		return nil, nil, "cannot take the cluster lock, etcd is unreachable (" + shortErr(err) + "): make sure nobody else runs breakglass on this cluster", nil
	}
	if holder.By == "" {
		holder.By = whoami()
	}
	if holder.Since.IsZero() {
		holder.Since = time.Now().UTC()
	}
	lock, err = AcquireLock(ctx, ec, holder)
	if err != nil {
		ec.Close()
		return nil, nil, "", err
	}
	return lock, ec, "", nil
}
