package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/atomicfile"
)

// Writer is every change this package makes, to etcd or to disk. Delete,
// Restore, backups and snapshots take one, so a dry run is chosen once, by
// which Writer is handed in, and never re-decided by the caller.
type Writer interface {
	// DryRun reports whether this writer only reports; results carry it so
	// they can say "would".
	DryRun() bool
	// CreateFile creates path atomically and exclusively (see BACKUP_FORMAT.md),
	// filling it with fill, then calls verify on the final file.
	CreateFile(path string, fill func(io.Writer) error, verify func(path string) error) error
	// Txn runs If(cmps).Then(then).Else(els) in one etcd transaction.
	Txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error)
	// Compact drops etcd's history before rev, physically. The dry run
	// reads at rev instead: etcd's refusals (a future revision, one
	// compacted already) are the same.
	Compact(ctx context.Context, rev int64) error
	// DisarmAlarm disarms one member's alarm; the dry run does nothing.
	DisarmAlarm(ctx context.Context, a Alarm) error
	// GrantLease grants a lease of ttl; the dry run grants none and returns 0 (no lease).
	GrantLease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error)
}

// RealWriter writes to etcd and disk.
func RealWriter(c *Client) Writer { return realWriter{c} }

// DryRunWriter changes nothing. Its Txn still evaluates the comparisons
// (and runs read operations) against the live etcd, so a dry run tells
// whether the guard of a delete or restore would hold right now; its
// CreateFile checks that the file could be created, without creating it.
func DryRunWriter(c *Client) Writer { return dryRunWriter{c} }

var errNoClient = errors.New("writer has no etcd connection")

type realWriter struct{ c *Client }

func (realWriter) DryRun() bool { return false }

func (w realWriter) CreateFile(path string, fill func(io.Writer) error, verify func(string) error) error {
	if err := atomicfile.Create(path, 0o600, fill); err != nil {
		return fileError(err)
	}
	if verify != nil {
		return verify(path)
	}
	return nil
}

func (w realWriter) Txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if w.c == nil {
		return nil, errNoClient
	}
	resp, err := w.c.kv.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
	return resp, w.c.wrap(err)
}

func (w realWriter) Compact(ctx context.Context, rev int64) error {
	if w.c == nil {
		return errNoClient
	}
	_, err := w.c.kv.Compact(ctx, rev, clientv3.WithCompactPhysical())
	return w.c.wrap(err)
}

func (w realWriter) DisarmAlarm(ctx context.Context, a Alarm) error {
	if w.c == nil {
		return errNoClient
	}
	t, ok := etcdserverpb.AlarmType_value[a.Type]
	if !ok || a.MemberID == 0 || t == int32(etcdserverpb.AlarmType_NONE) {
		// MemberID 0 or type NONE would disarm every alarm of every member.
		return fmt.Errorf("refusing to disarm %q on member %s: name one alarm of one member", a.Type, a.MemberID)
	}
	_, err := w.c.kv.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: uint64(a.MemberID), Alarm: etcdserverpb.AlarmType(t)})
	return w.c.wrap(err)
}

func (w realWriter) GrantLease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	if w.c == nil {
		return 0, errNoClient
	}
	resp, err := w.c.kv.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return 0, w.c.wrap(err)
	}
	return resp.ID, nil
}

type dryRunWriter struct{ c *Client }

func (dryRunWriter) DryRun() bool { return true }

func (dryRunWriter) CreateFile(path string, _ func(io.Writer) error, _ func(string) error) error {
	return fileError(atomicfile.CheckCreate(path))
}

func (w dryRunWriter) Txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	if w.c == nil {
		return nil, errNoClient
	}
	resp, err := w.c.kv.Txn(ctx).If(cmps...).Then(readsOnly(then)...).Else(readsOnly(els)...).Commit()
	return resp, w.c.wrap(err)
}

func (w dryRunWriter) Compact(ctx context.Context, rev int64) error {
	if w.c == nil {
		return errNoClient
	}
	// One key, counted at rev: refused as the compaction would be when rev
	// is in the future or already compacted away.
	_, err := w.c.kv.Get(ctx, w.c.prefix, clientv3.WithRev(rev), clientv3.WithCountOnly())
	return w.c.wrap(err)
}

func (dryRunWriter) DisarmAlarm(context.Context, Alarm) error { return nil }

func (dryRunWriter) GrantLease(context.Context, time.Duration) (clientv3.LeaseID, error) {
	return 0, nil
}

// readsOnly keeps the Get operations: a dry run may look, never write.
func readsOnly(ops []clientv3.Op) []clientv3.Op {
	var out []clientv3.Op
	for _, op := range ops {
		if op.IsGet() {
			out = append(out, op)
		}
	}
	return out
}

// fileError is atomicfile's refusal to overwrite as this package's
// *FileExistsError; other errors (a fill's among them) pass unchanged.
func fileError(err error) error {
	if ee, ok := err.(*atomicfile.ExistsError); ok {
		return &FileExistsError{Path: ee.Path}
	}
	return err
}
