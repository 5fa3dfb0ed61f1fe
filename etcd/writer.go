package etcd

import (
	"context"
	"errors"
	"io"

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
