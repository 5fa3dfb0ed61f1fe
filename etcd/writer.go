package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"
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

// NewWriter returns the writer that acts (dryRun false) or the one that only
// reports (dryRun true), both for the etcd behind c. c may be nil for a
// writer that only creates files (a snapshot streamed from the Talos API).
func NewWriter(c *Client, dryRun bool) Writer {
	if dryRun {
		return DryRunWriter(c)
	}
	return RealWriter(c)
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
	return createFile(path, fill, verify)
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
	if err := checkAbsent(path); err != nil {
		return err
	}
	if err := checkAbsent(path + ".part"); err != nil {
		return err
	}
	// A missing directory would be created; an existing non-directory is an error now as then.
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
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
