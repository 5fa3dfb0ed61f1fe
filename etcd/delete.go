package etcd

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/closest"
	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Plan is what a delete will do: the listing of the objects it removes,
// their exact keys read at one revision, with the values and mod revisions
// that the backup and the guard will use.
type Plan Listing

// PlanDelete resolves names among the objects of resources (nil means all)
// by listing them; it never builds a key from a name. An unknown name is a
// *NotFoundError listing the names present and the closest one; a name found
// under two resources is an *AmbiguousNameError.
func (c *Client) PlanDelete(ctx context.Context, names []string, resources []kinds.Kind) (*Plan, error) {
	if len(names) == 0 {
		return nil, &EmptyPlanError{}
	}
	l, err := c.List(ctx, resources)
	if err != nil {
		return nil, err
	}
	byName := map[string][]Object{}
	for _, o := range l.Objects {
		byName[o.Name] = append(byName[o.Name], o)
	}
	present := make([]string, 0, len(byName))
	for n := range byName {
		present = append(present, n)
	}
	sort.Strings(present)

	p := &Plan{Prefix: l.Prefix, Cluster: l.Cluster, Resources: l.Resources}
	var missing []MissingName
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		objs := byName[n]
		switch len(objs) {
		case 0:
			missing = append(missing, MissingName{Name: n, Closest: closest.Name(n, present)})
		case 1:
			p.Objects = append(p.Objects, objs[0])
		default:
			rs := make([]kinds.Kind, len(objs))
			for i, o := range objs {
				rs[i] = o.Resource
			}
			return nil, &AmbiguousNameError{Name: n, Resources: rs}
		}
	}
	if len(missing) > 0 {
		return nil, &NotFoundError{Missing: missing, Resources: l.Resources, Present: present}
	}
	if err := checkKeyShapes(l.Prefix, p.Objects); err != nil {
		return nil, err
	}
	return p, nil
}

// checkKeyShapes refuses, before any plan is shown, objects whose key is
// not PREFIX/RESOURCE/NAME (a *KeyShapeError): they are what is in etcd,
// not a damaged backup file, and breakglass does not touch them.
func checkKeyShapes(prefix string, objs []Object) error {
	var e *KeyShapeError
	for _, o := range objs {
		if _, name, ok := splitKey(prefix, o.Key); ok && name == o.Name {
			continue
		}
		if e == nil {
			e = &KeyShapeError{Under: resourcePrefix(prefix, o.Resource.Resource())}
		}
		e.Keys, e.Names = append(e.Keys, o.Key), append(e.Names, o.Name)
	}
	if e != nil {
		return e
	}
	return nil
}

// ExecuteOptions say where the artefacts of a delete go.
type ExecuteOptions struct {
	// BackupPath is the backup file; when empty, a new name in BackupDir
	// (default: the current directory).
	BackupPath string
	BackupDir  string
	// Snapshot takes a full etcd snapshot before anything else, to
	// SnapshotPath or a new name in BackupDir.
	Snapshot     bool
	SnapshotPath string
	ToolVersion  string
	// RecordDir, when set, receives a DeleteRecord after the delete (the state directory).
	RecordDir string
	// Now is the clock used for file names and the backup time; default time.Now.
	Now func() time.Time
}

// DeleteResult says what a delete did, or in a dry run would do.
type DeleteResult struct {
	DryRun     bool          `json:"dryRun"`
	Plan       *Plan         `json:"plan"`
	BackupPath string        `json:"backupPath"`
	Backup     *Backup       `json:"-"`
	Snapshot   *SnapshotInfo `json:"snapshot,omitempty"`
	// Deleted are the keys removed (or that would be removed).
	Deleted []string `json:"deleted"`
	// Revision is the etcd revision of the delete transaction.
	Revision int64 `json:"revision"`
	// RecordPath is the deletion record in the state directory, if one was asked for.
	RecordPath string `json:"recordPath,omitempty"`
}

// Execute carries out a plan: optional snapshot, then the backup (written,
// read back and verified), then one transaction that deletes every key only
// if its mod revision is still the one in the backup. If any key changed,
// nothing is deleted and the error is a *ChangedError naming the keys. With
// a dry-run writer nothing is written, but the guard is still evaluated.
func (c *Client) Execute(ctx context.Context, p *Plan, w Writer, opts ExecuteOptions) (*DeleteResult, error) {
	if p == nil || len(p.Objects) == 0 {
		return nil, &EmptyPlanError{}
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	t := now()
	res := &DeleteResult{DryRun: w.DryRun(), Plan: p}

	if opts.Snapshot {
		path := opts.SnapshotPath
		if path == "" {
			dir := opts.BackupDir
			if dir == "" {
				dir = "."
			}
			path = filepath.Join(dir, "etcd-snapshot-"+t.UTC().Format("20060102T150405Z")+".db")
		}
		info, err := c.Snapshot(ctx, path, w)
		if err != nil {
			return res, err
		}
		res.Snapshot = info
	}

	b, err := NewBackup(p.Prefix, p.Cluster, p.Objects, opts.ToolVersion, t)
	if err != nil {
		return res, err
	}
	res.BackupPath = opts.BackupPath
	if res.BackupPath == "" {
		res.BackupPath = defaultBackupPath(opts.BackupDir, t, p.Objects)
	}
	if err := writeBackup(w, res.BackupPath, b); err != nil {
		return res, err
	}
	res.Backup = b

	cmps := make([]clientv3.Cmp, 0, len(b.Keys))
	dels := make([]clientv3.Op, 0, len(b.Keys))
	gets := make([]clientv3.Op, 0, len(b.Keys))
	for _, k := range b.Keys {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k.Key), "=", k.ModRevision))
		dels = append(dels, clientv3.OpDelete(k.Key))
		gets = append(gets, clientv3.OpGet(k.Key, clientv3.WithKeysOnly()))
	}
	resp, err := w.Txn(ctx, cmps, dels, gets)
	if err != nil {
		// The request may have reached etcd before the connection broke.
		return res, fmt.Errorf("delete transaction: %w (it may or may not have been applied: breakglass etcd webhooks shows what is there; the backup is %s)", err, res.BackupPath)
	}
	res.Revision = resp.Header.Revision
	if !resp.Succeeded {
		ce := &ChangedError{}
		for i, k := range b.Keys {
			var actual int64
			if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
				actual = kvs[0].ModRevision
			}
			if actual != k.ModRevision {
				ce.Changes = append(ce.Changes, KeyChange{Key: k.Key, Expected: k.ModRevision, Actual: actual})
			}
		}
		return res, ce
	}
	for _, k := range b.Keys {
		res.Deleted = append(res.Deleted, k.Key)
	}
	if opts.RecordDir != "" {
		// The keys are gone and the backup is verified: a failing record is
		// reported, but the delete is not undone.
		path, err := writeDeleteRecord(w, opts.RecordDir, res, opts.ToolVersion, t)
		if err != nil {
			return res, fmt.Errorf("deleted, backup at %s, but the deletion record could not be written: %w", res.BackupPath, err)
		}
		res.RecordPath = path
	}
	return res, nil
}

// Delete is PlanDelete then Execute, for callers that have already shown and confirmed the names.
func (c *Client) Delete(ctx context.Context, names []string, resources []kinds.Kind, w Writer, opts ExecuteOptions) (*DeleteResult, error) {
	p, err := c.PlanDelete(ctx, names, resources)
	if err != nil {
		return nil, err
	}
	return c.Execute(ctx, p, w, opts)
}
