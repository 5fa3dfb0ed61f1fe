package recovery

// The steps that work on etcd: the snapshot before a removal, the removal
// of admission objects after their verified backup, and the create-only
// restore of backups.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	register((*run).snapshot)
	register((*run).deleteObjects)
	register((*run).restoreObjects)
}

// EtcdRestoreParams: etcd.restore puts back, create-only, the objects of
// backup files: those named (etcd restore FILE), or every backup the
// incident wrote (revert --objects).
type EtcdRestoreParams struct {
	Backups []string `json:"backups,omitempty"`
}

func (*EtcdRestoreParams) Action() runbooks.Action { return ActionEtcdRestore }

// snapshot saves a full etcd snapshot through the Talos API into the
// incident directory, when the run removes objects from etcd (or always,
// when the step says so: before a compaction).
func (r *run) snapshot(_ context.Context, _ Step, p *runbooks.EtcdSnapshotParams) (*Plan, error) {
	if !p.Always && !r.deletesObjects() {
		return nil, skip("nothing will be removed from etcd, so no snapshot is needed")
	}
	path := filepath.Join(r.journal.Dir, "etcd.snapshot")
	if _, err := os.Stat(path); err == nil {
		f, err := etcd.ReadCopy(path, true, r.etcdPrefix())
		if err != nil {
			return nil, fmt.Errorf("a snapshot from an earlier run is there but fails verification (%v): move %s away and resume", err, path)
		}
		return &Plan{Result: &SnapshotResult{said: said(fmt.Sprintf("snapshot already taken: %s (%d bytes, verified)", path, f.Size)), Path: path, SHA256: f.SHA256, Size: f.Size, Revision: f.Revision, ClusterUID: f.ClusterUID}}, nil
	}
	return &Plan{DryRun: "would take a full etcd snapshot to " + path, Apply: func(ctx context.Context) (Result, error) {
		node := r.tc.Nodes()[0]
		if err := r.removeOwnPartial(path); err != nil {
			return nil, err
		}
		r.progress(node, "streaming an etcd snapshot through the Talos API")
		if _, err := snapshotThroughTalos(ctx, r.tc, node, path, r.fx.EtcdWriter(nil)); err != nil {
			return nil, err
		}
		f, err := etcd.ReadCopy(path, true, r.etcdPrefix())
		if err != nil {
			return nil, err
		}
		return &SnapshotResult{said: said(fmt.Sprintf("full etcd snapshot: %s (%d bytes, revision %d, verified)", path, f.Size, f.Revision)), Path: path, SHA256: f.SHA256, Size: f.Size, Revision: f.Revision, ClusterUID: f.ClusterUID}, nil
	}}, nil
}

// removeOwnPartial removes the PATH.part a run of this incident left when
// it was killed while writing PATH. Only a run that holds the incident
// (its lock.pid: no other live process runs it) may: the .part is then
// nobody's. Otherwise the .part stays and the write refuses it.
func (r *run) removeOwnPartial(path string) error {
	part := path + ".part"
	if !r.claimed || !fileExists(part) {
		return nil
	}
	r.progress("state", "removing "+filepath.Base(part)+", left by a run of this incident killed while writing it")
	if err := os.Remove(part); err != nil {
		return fmt.Errorf("remove the partial file an interrupted run left: %w", err)
	}
	return nil
}

// deletesObjects tells whether a step of this run removes objects from etcd.
func (r *run) deletesObjects() bool {
	for _, s := range r.opts.Steps {
		if p, ok := s.Params.(*runbooks.EtcdDeleteParams); ok && len(p.Names) > 0 {
			return true
		}
	}
	return false
}

// DeleteResult is what an etcd.delete step removed, and its backup.
type DeleteResult struct {
	said
	Backup   string   `json:"backup"`
	Deleted  []string `json:"deleted,omitempty"`
	Revision int64    `json:"revision,omitempty"`
	// Outcome is the etcd layer's full account, for the command to render
	// (a dry run's until the delete is applied).
	Outcome *etcd.DeleteResult `json:"-"`
}

// faultHook, when set (tests only), is called at named points of a change
// to simulate a crash there.
var faultHook func(point string)

func fault(point string) {
	if faultHook != nil {
		faultHook(point)
	}
}

// deleteObjects removes the named objects from etcd: resolved by listing,
// shown, each confirmed by typing its name, backed up (verified) and
// deleted in one transaction guarded by their revisions. The plan is
// checked against the live etcd (the guard, the backup destination)
// before anything is asked.
func (r *run) deleteObjects(ctx context.Context, s Step, p *runbooks.EtcdDeleteParams) (*Plan, error) {
	plan, err := r.planDelete(ctx, s, p)
	if s.Requested {
		// Asked for by name: if it fails, the operator finishes it alone.
		if plan == nil {
			plan = &Plan{}
		}
		plan.Finish = r.target.NodesCmd("etcd delete --kind " + orDefault(p.Kind, "all") + " " + strings.Join(p.Names, " "))
	}
	return plan, err
}

func (r *run) planDelete(ctx context.Context, s Step, p *runbooks.EtcdDeleteParams) (*Plan, error) {
	names := p.Names
	if len(names) == 0 {
		return nil, skip("no object named to remove (--delete NAME): with its bootstrap objects created, the API server can start with webhooks back on")
	}
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	resources, err := kinds.Parse(p.Kind)
	if err != nil {
		return nil, failure.Input("", "step %s: %v", s.Name, err)
	}
	del, err := ec.PlanDelete(ctx, names, resources)
	var nf *etcd.NotFoundError
	if errors.As(err, &nf) {
		// Resumed after the delete went through: a verified backup of
		// every named object, written by this step, is the proof.
		if done := r.earlierBackup(s, names); done != "" {
			return &Plan{Result: &DeleteResult{said: said("already removed in an earlier run; backup " + done), Backup: done}}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	opts, err := r.deleteOptions(ctx, ec, s, del)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	RenderDeletePlan(&b, ec.Endpoints(), del, opts)
	dry, err := ec.Execute(ctx, del, etcd.DryRunWriter(ec), opts)
	res := &DeleteResult{Outcome: dry, Backup: opts.BackupPath}
	plan := &Plan{View: Text(b.String()), Result: res}
	if err != nil {
		return plan, err
	}
	res.Deleted = dry.Deleted
	plan.Change, plan.DryRun = true, "would back up and remove "+safeJoin(dry.Deleted)
	for _, o := range del.Objects {
		plan.Facts = append(plan.Facts, objectFact(ec, o, names, resources))
	}
	plan.Undo = undoneBy(ActionEtcdRestore, "remove "+safeJoin(dry.Deleted)+" from etcd")
	plan.Undo.Asked = "--objects"
	for _, o := range del.Objects {
		plan.Ask = append(plan.Ask, Question{Text: fmt.Sprintf("This deletes %s %s from etcd (backup first).", o.Kind, termsafe.String(o.Name)), Word: o.Name})
	}
	plan.Apply = func(ctx context.Context) (Result, error) {
		// Before the transaction: a run killed after it still names its backup (revert --objects).
		if err := r.journal.Append(Entry{Kind: "note", Step: s.Name, Message: "backup goes to " + opts.BackupPath, Data: journalData(&DeleteResult{Backup: opts.BackupPath})}); err != nil {
			return nil, err
		}
		done, err := ec.Execute(ctx, del, r.fx.EtcdWriter(ec), opts)
		if done == nil {
			return &DeleteResult{Backup: opts.BackupPath}, err
		}
		fault("etcd.delete applied")
		out := &DeleteResult{Backup: done.BackupPath, Deleted: done.Deleted, Revision: done.Revision, Outcome: done}
		if err != nil {
			return out, err
		}
		out.said = said(fmt.Sprintf("removed %s; backup %s (restore with: breakglass etcd restore %s)", safeJoin(done.Deleted), done.BackupPath, done.BackupPath))
		return out, nil
	}
	return plan, nil
}

// deleteOptions: a recovery keeps its backup in the incident directory; a
// standalone delete where the operator said (--backup-dir, --snapshot), by
// default in STATE-DIR/etcd/CLUSTER-ID/backups, with a deletion record.
// The backup's path is fixed here, so that the journal names it before
// the transaction.
func (r *run) deleteOptions(ctx context.Context, ec *etcd.Client, s Step, del *etcd.Plan) (etcd.ExecuteOptions, error) {
	opts := etcd.ExecuteOptions{ToolVersion: r.opts.ToolVersion}
	if r.opts.Runbook != standaloneDelete {
		// A run killed after writing its backup (or half of it) but before
		// the delete left that file behind; backups are never overwritten,
		// so this run writes its own next to it.
		opts.BackupPath = r.freeBackupPath(s.Name)
		return opts, nil
	}
	dir, err := r.st.etcdDir(ctx, ec)
	if err != nil {
		return opts, err
	}
	opts.BackupDir, opts.Snapshot, opts.RecordDir = orDefault(r.opts.BackupDir, filepath.Join(dir, "backups")), r.opts.Snapshot, filepath.Join(dir, "deleted")
	opts.BackupPath = filepath.Join(opts.BackupDir, etcd.BackupFileName(time.Now(), del.Objects))
	return opts, nil
}

// backupPath is the i-th backup file a step of this incident may write:
// backup-STEP.json, then backup-STEP-2.json, ...
func (r *run) backupPath(step string, i int) string {
	if i <= 1 {
		return filepath.Join(r.journal.Dir, "backup-"+step+".json")
	}
	return filepath.Join(r.journal.Dir, fmt.Sprintf("backup-%s-%d.json", step, i))
}

// freeBackupPath is the first backup path of the step with neither the file
// nor its .part there.
func (r *run) freeBackupPath(step string) string {
	for i := 1; ; i++ {
		p := r.backupPath(step, i)
		if !fileExists(p) && !fileExists(p+".part") {
			return p
		}
	}
}

// earlierBackup is a verified backup of this step that holds an object of
// every name, or "".
func (r *run) earlierBackup(s Step, names []string) string {
	for i := 1; i < 100; i++ {
		p := r.backupPath(s.Name, i)
		if !fileExists(p) {
			if fileExists(p + ".part") {
				continue
			}
			return ""
		}
		b, err := etcd.ReadBackup(p)
		if err != nil {
			continue
		}
		have := map[string]bool{}
		for _, k := range b.Keys {
			have[k.Key[strings.LastIndexByte(k.Key, '/')+1:]] = true
		}
		all := true
		for _, n := range names {
			all = all && have[n]
		}
		if all {
			return p
		}
	}
	return ""
}

// RestoredObjects is each restored key's status, and the etcd layer's
// account of each backup (planned, then restored).
type RestoredObjects struct {
	said
	Keys map[string]string
	// Plans are each backup's plan (a dry run against the live etcd);
	// Restored the outcomes of those that were restored.
	Plans    []*etcd.RestoreResult
	Restored []*etcd.RestoreResult
}

func (r *RestoredObjects) JournalData() any { return r.Keys }

// restoreObjects restores backups, create-only: the files named, or every
// backup this incident wrote. Each is verified and planned against the
// live etcd, all are shown, then restored after one question.
func (r *run) restoreObjects(ctx context.Context, _ Step, p *EtcdRestoreParams) (*Plan, error) {
	backups := p.Backups
	if len(backups) == 0 {
		backups = r.incidentBackups()
	}
	if len(backups) == 0 {
		return nil, skip("this incident removed nothing from etcd")
	}
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	opts := etcd.RestoreOptions{ForceCluster: r.opts.ForceCluster}
	out := &RestoredObjects{Keys: map[string]string{}}
	plan := &Plan{Result: out}
	type todo struct {
		b    *etcd.Backup
		path string
	}
	var view strings.Builder
	var pending []todo
	var keys, parts []string
	planned := map[string]bool{} // keys an earlier backup puts back: the first one found wins
	defer func() { plan.View = Text(view.String()) }()
	for _, path := range backups {
		b, err := etcd.ReadBackup(path)
		if err != nil {
			return plan, err
		}
		pl, err := ec.Restore(ctx, b, etcd.DryRunWriter(ec), opts)
		if pl == nil {
			return plan, err
		}
		pl.Path, pl.DryRun = path, true
		out.Plans = append(out.Plans, pl)
		RenderRestore(&view, b, pl, true)
		if n := unreadableRestored(b, pl); n > 0 {
			fmt.Fprintf(&view, "  %d of these are values no key read when they were removed (encryption-drift's last resort): kube-apiserver stops being ready again unless a key that reads them is in every control plane's encryption configuration now\n", n)
		}
		n := 0
		for _, it := range pl.Items {
			out.Keys[it.Key] = string(it.Status)
			switch {
			case it.Status == etcd.WouldRestore && !planned[it.Key]:
				n++
				planned[it.Key] = true
				keys = append(keys, termsafe.String(it.Key))
			case it.Status == etcd.WouldRestore:
			default:
				parts = append(parts, fmt.Sprintf("%s: %s", termsafe.String(it.Key), it.Status))
			}
		}
		if err != nil {
			return plan, err
		}
		if n > 0 {
			pending = append(pending, todo{b, path})
		}
	}
	if len(pending) == 0 {
		out.said = said(strings.Join(parts, "; "))
		return plan, nil
	}
	var would []string
	for _, k := range keys {
		would = append(would, k+": "+string(etcd.WouldRestore))
	}
	plan.Change, plan.DryRun = true, strings.Join(append(would, parts...), "; ")
	plan.Undo = nothingToUndo(fmt.Sprintf("put back %d key(s) from their backup", len(keys)), "it only creates keys that were absent")
	plan.Ask = []Question{{Text: fmt.Sprintf("Restore %d key(s) into etcd?", len(keys))}}
	plan.Apply = func(ctx context.Context) (Result, error) {
		for _, t := range pending {
			res, err := ec.Restore(ctx, t.b, r.fx.EtcdWriter(ec), opts)
			if res == nil {
				return out, err
			}
			res.Path = t.path
			out.Restored = append(out.Restored, res)
			for _, it := range res.Items {
				out.Keys[it.Key] = string(it.Status)
				parts = append(parts, fmt.Sprintf("%s: %s", termsafe.String(it.Key), it.Status))
			}
			if err != nil {
				return out, err
			}
		}
		out.said = said(strings.Join(parts, "; "))
		return out, nil
	}
	return plan, nil
}

// incidentBackups are every backup this incident wrote: those its
// journal names (a completed etcd.delete step's, then the one each
// attempt journaled before its transaction, newest first) and the
// verified backup files in its directory. A run killed between the
// transaction and its end record is found by the last two. Restore is
// create-only, so offering one backup more is safe: an object that is
// there is left alone.
func (r *run) incidentBackups() []string {
	var done, attempted, files []string
	for _, e := range r.entries {
		var d struct {
			Backup string `json:"backup"`
		}
		if len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil || d.Backup == "" {
			continue
		}
		switch {
		case e.Kind == "end" && e.Outcome == OutcomeOK:
			done = append(done, d.Backup)
		case e.Kind == "note":
			attempted = append([]string{d.Backup}, attempted...)
		}
	}
	found, _ := filepath.Glob(filepath.Join(r.journal.Dir, "backup-*.json"))
	sort.Slice(found, func(i, k int) bool { return modTime(found[i]).After(modTime(found[k])) })
	for _, f := range found {
		if _, err := etcd.ReadBackup(f); err == nil {
			files = append(files, f)
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, p := range append(append(done, attempted...), files...) {
		if !seen[p] && fileExists(p) {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

func modTime(path string) time.Time {
	info, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return info.ModTime()
}

// objectFact is an object to delete as the plan listed it: at its
// revision. (The delete's transaction is guarded by it too; read again
// before the backup, a change made since stops the step before anything.)
func objectFact(ec *etcd.Client, o etcd.Object, names []string, resources []kinds.Kind) Fact {
	return Fact{
		Says: fmt.Sprintf("%s %s at revision %d", o.Kind, termsafe.String(o.Name), o.ModRevision),
		Holds: func(ctx context.Context) error {
			now, err := ec.PlanDelete(ctx, names, resources)
			if err != nil {
				return err
			}
			for _, n := range now.Objects {
				if n.Key == o.Key && n.ModRevision != o.ModRevision {
					return fmt.Errorf("%s %s was changed since the plan (revision %d now)", o.Kind, termsafe.String(o.Name), n.ModRevision)
				}
				if n.Key == o.Key {
					return nil
				}
			}
			return fmt.Errorf("%s %s is no longer in etcd", o.Kind, termsafe.String(o.Name))
		},
	}
}

// unreadableRestored counts the keys of b marked unreadable that the
// restore plan pl puts back.
func unreadableRestored(b *etcd.Backup, pl *etcd.RestoreResult) int {
	n := 0
	for _, it := range pl.Items {
		if it.Status == etcd.WouldRestore && slices.ContainsFunc(b.Keys, func(k etcd.BackupKey) bool { return k.Key == it.Key && k.Unreadable }) {
			n++
		}
	}
	return n
}
