package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// RestoreStatus is the outcome for one key.
type RestoreStatus string

// Restore outcomes.
const (
	Restored        RestoreStatus = "restored"
	WouldRestore    RestoreStatus = "would-restore" // dry run: absent now
	AlreadyPresent  RestoreStatus = "already-present-identical"
	RestoreConflict RestoreStatus = "conflict" // present with another value; left alone
)

// RestoreItem is the report for one key.
type RestoreItem struct {
	Key      string        `json:"key"`
	Resource kinds.Kind    `json:"resource"`
	Name     string        `json:"name"`
	Status   RestoreStatus `json:"status"`
	// ModRevision is the key's revision after the restore (or of the present value).
	ModRevision int64 `json:"modRevision,omitempty"`
}

// RestoreResult is the per-key report of a restore.
type RestoreResult struct {
	DryRun  bool          `json:"dryRun"`
	Path    string        `json:"path,omitempty"`
	Cluster ClusterInfo   `json:"cluster"`
	Items   []RestoreItem `json:"items"`
}

// RestoreOptions relax the restore's refusals.
type RestoreOptions struct {
	// ForceCluster restores a backup taken from another etcd cluster ID
	// (e.g. after etcd was itself restored from a snapshot).
	ForceCluster bool
}

// RestoreFile reads and verifies a backup file, then restores it.
func (c *Client) RestoreFile(ctx context.Context, path string, w Writer, opts RestoreOptions) (*RestoreResult, error) {
	b, err := ReadBackup(path)
	if err != nil {
		return nil, err
	}
	res, err := c.Restore(ctx, b, w, opts)
	if res != nil {
		res.Path = path
	}
	var wk *WrongKindError
	if errors.As(err, &wk) {
		wk.Path = path
	}
	return res, err
}

// Restore puts back each key of b only if it is absent (one transaction per
// key on create revision 0), byte for byte. A key already present is
// reported identical or a conflict, and left alone. Conflicts return the
// full result together with a *ConflictError. A backup from another cluster
// is refused with *ForeignClusterError unless opts.ForceCluster; one taken
// under another prefix with *PrefixMismatchError.
//
// Encrypted values are restored as the exact bytes they were: they were
// read from the same key, so the API server decrypts them as before.
func (c *Client) Restore(ctx context.Context, b *Backup, w Writer, opts RestoreOptions) (*RestoreResult, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	if err := b.checkValues(); err != nil {
		return nil, err
	}
	for _, k := range b.Keys {
		if k.StoredKind != "" {
			return nil, &WrongKindError{Key: k.Key, Kind: k.StoredKind, Belongs: k.Resource.Kind()}
		}
	}
	if b.Prefix != c.prefix {
		return nil, &PrefixMismatchError{BackupPrefix: b.Prefix, Prefix: c.prefix}
	}
	live, err := c.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	if live.ClusterID != b.ClusterID && !opts.ForceCluster {
		return nil, &ForeignClusterError{BackupCluster: b.ClusterID, LiveCluster: live.ClusterID}
	}
	res := &RestoreResult{DryRun: w.DryRun(), Cluster: live}
	var conflicts []string
	for _, k := range b.Keys {
		raw, err := k.RawValue()
		if err != nil {
			return res, err
		}
		resp, err := w.Txn(ctx,
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k.Key), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(k.Key, string(raw))},
			[]clientv3.Op{clientv3.OpGet(k.Key)})
		if err != nil {
			return res, err
		}
		item := RestoreItem{Key: k.Key, Resource: k.Resource, Name: k.Name}
		switch {
		case resp.Succeeded && w.DryRun():
			item.Status = WouldRestore
		case resp.Succeeded:
			item.Status, item.ModRevision = Restored, resp.Header.Revision
		default:
			kvs := resp.Responses[0].GetResponseRange().Kvs
			item.Status = RestoreConflict
			if len(kvs) > 0 {
				item.ModRevision = kvs[0].ModRevision
				if bytes.Equal(kvs[0].Value, raw) {
					item.Status = AlreadyPresent
				}
			}
			if item.Status == RestoreConflict {
				conflicts = append(conflicts, k.Key)
			}
		}
		res.Items = append(res.Items, item)
	}
	if len(conflicts) > 0 {
		return res, &ConflictError{Keys: conflicts}
	}
	return res, nil
}

// checkValues refuses, before anything is written, a backup in which a
// key's value does not belong under it: a value of another kind (moved from
// another resource's key: kube-apiserver could not read it there), or an
// object named otherwise than the key (served under one name, reported as
// another). What etcd itself held that way was recorded as such when the
// backup was taken (StoredKind, StoredName); anything else is an edit.
// Encrypted values cannot be read and are checked by their sha256 only.
func (b *Backup) checkValues() error {
	for _, k := range b.Keys {
		raw, err := k.RawValue()
		if err != nil {
			return err
		}
		o := decodeObject(k.Resource, k.Name, k.Key, raw, k.CreateRevision, k.ModRevision, k.Version)
		bad := func(format string, args ...any) error {
			return &BackupFileError{Key: k.Key, Err: fmt.Errorf("%w: "+format, append([]any{ErrMalformedBackup}, args...)...)}
		}
		switch {
		case o.StoredKind != k.StoredKind && o.StoredKind != "":
			return bad("its value is a %s, which does not belong under %s/%s/ (the key of a %s)",
				termsafe.String(o.StoredKind), b.Prefix, k.Resource, k.Resource.Kind())
		case o.StoredKind != k.StoredKind:
			return bad("the file says its value is a %s, it is not", termsafe.String(k.StoredKind))
		case o.Decoded != nil && o.StoredName != k.StoredName && k.StoredName == "":
			return bad("the key names the object %q, its value is named %q", k.Name, o.StoredName)
		case o.Decoded != nil && o.StoredName != k.StoredName:
			return bad("the file says its value is named %q, it is named %q", k.StoredName, orName(o.StoredName, k.Name))
		}
	}
	return nil
}

func orName(stored, name string) string {
	if stored != "" {
		return stored
	}
	return name
}
