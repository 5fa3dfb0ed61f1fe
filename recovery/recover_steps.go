package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

func ioPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

// diagnose looks, changing nothing, and names the culprit: readiness,
// restarts, log signatures, and the admission objects in etcd.
// DiagnoseResult is the verdict, the culprits and the plan it fixed.
type DiagnoseResult struct {
	said
	Verdict  string    `json:"verdict"`
	Culprits any       `json:"culprits"`
	Decision *Decision `json:"decision,omitempty"`
}

func (r *run) diagnose(ctx context.Context, _ Step, p *runbooks.DiagnoseParams) (Result, error) {
	opts := diagnose.Options{Tail: p.TailLines, Health: ReadyzForDiagnose(r.tc)}
	ec, err := r.etcd(ctx)
	if err != nil {
		opts.EtcdError = err // not fatal: the logs still name the webhook
		ec = nil
	}
	report, err := diagnose.Run(ctx, r.tc, ec, opts)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := diagnose.WriteText(&b, report); err == nil {
		r.ui.Show(b.String())
	}
	res := &DiagnoseResult{Verdict: string(report.Verdict), Culprits: report.Culprits}
	d, err := decide(report, r.opts)
	if err != nil {
		return res, err
	}
	r.decision, res.Decision = d, d
	r.ui.Show(d.Render())
	res.said = said(fmt.Sprintf("verdict %s: %s; plan: disable %s", report.Verdict, report.Summary, strings.Join(d.Plugins, ",")))
	return res, nil
}

// ReadyzForDiagnose adapts CheckHealth to diagnose, which cannot import
// this package (this package imports it).
func ReadyzForDiagnose(tc *talos.Client) func(context.Context) ([]diagnose.Readyz, error) {
	return func(ctx context.Context) ([]diagnose.Readyz, error) {
		hs, err := CheckHealth(ctx, tc)
		out := make([]diagnose.Readyz, 0, len(hs))
		for _, h := range hs {
			out = append(out, diagnose.Readyz{Node: h.Node, Ready: h.Ready, FailingChecks: h.FailingChecks, Error: h.ProbeError})
		}
		return out, err
	}
}

// waitWebhooks waits until the backends of the fail-closed webhooks left in
// etcd accept connections again, where that can be told from here: a URL
// backend can be dialled; a service backend cannot without the cluster's
// network, and is reported as such.
func (r *run) waitWebhooks(ctx context.Context, _ Step, p *runbooks.WebhookWaitParams) (Result, error) {
	ec, err := r.etcd(ctx)
	if err != nil {
		return nil, skip("cannot tell: etcd is unreachable (%s)", shortErr(err))
	}
	l, err := ec.List(ctx, []etcd.Resource{etcd.ValidatingWebhookConfigurations, etcd.MutatingWebhookConfigurations})
	if err != nil {
		return nil, err
	}
	targets := map[string]string{} // host:port -> webhook
	var untellable []string
	for _, o := range l.Objects {
		for _, w := range o.Webhooks {
			if w.FailurePolicy != "Fail" {
				continue
			}
			if w.ClientConfig.URL == nil {
				untellable = append(untellable, w.Name)
				continue
			}
			u, err := url.Parse(*w.ClientConfig.URL)
			if err != nil || u.Host == "" {
				untellable = append(untellable, w.Name)
				continue
			}
			host := u.Host
			if u.Port() == "" {
				host = net.JoinHostPort(u.Hostname(), "443")
			}
			targets[host] = w.Name
		}
	}
	if len(targets) == 0 {
		if len(untellable) > 0 {
			return nil, skip("cannot tell from here whether %s answer(s): service backends need the cluster network", strings.Join(untellable, ", "))
		}
		return nil, skip("no fail-closed webhook left")
	}
	if r.fx.DryRun() {
		return nil, skip("dry run: would wait for %d webhook backend(s)", len(targets))
	}
	deadline := time.Now().Add(p.Timeout.Std())
	pending := map[string]string{}
	for k, v := range targets {
		pending[k] = v
		r.progress("webhook", fmt.Sprintf("waiting for %s (%s)", v, k))
	}
	for len(pending) > 0 {
		for addr, name := range pending {
			c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
			if err == nil {
				c.Close()
				delete(pending, addr)
				r.progress("webhook", name+" answers at "+addr)
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var left []string
			for _, n := range pending {
				left = append(left, n)
			}
			sort.Strings(left)
			return nil, fmt.Errorf("%w: webhook backend(s) still not answering: %s; the API server can run without them now that its bootstrap objects exist", ErrTimeout, strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	msg := fmt.Sprintf("%d webhook backend(s) answer", len(targets))
	if len(untellable) > 0 {
		msg += fmt.Sprintf("; cannot tell for %s (service backends)", strings.Join(untellable, ", "))
	}
	return said(msg), nil
}

// SnapshotResult is a verified full etcd snapshot.
type SnapshotResult struct {
	said
	Path   string `json:"snapshot"`
	SHA256 string `json:"sha256,omitempty"`
}

func (r *run) snapshot(ctx context.Context, _ Step, _ *runbooks.EtcdSnapshotParams) (Result, error) {
	if !r.deletesObjects() {
		return nil, skip("nothing will be removed from etcd, so no snapshot is needed")
	}
	path := filepath.Join(r.journal.Dir, "etcd.snapshot")
	if _, err := os.Stat(path); err == nil {
		info, err := etcd.VerifySnapshotFile(path)
		if err == nil {
			return &SnapshotResult{said: said(fmt.Sprintf("snapshot already taken: %s (%d bytes, verified)", path, info.Size)), Path: path}, nil
		}
		return nil, fmt.Errorf("a snapshot from an earlier run is there but fails verification (%v): move %s away and resume", err, path)
	}
	if r.fx.DryRun() {
		return nil, skip("dry run: would take a full etcd snapshot to %s", path)
	}
	node := r.tc.Nodes()[0]
	r.progress(node, "streaming an etcd snapshot through the Talos API")
	pr, pw := ioPipe()
	go func() { pw.CloseWithError(r.tc.EtcdSnapshot(ctx, node, pw)) }()
	info, err := etcd.WriteSnapshot(pr, path, r.fx.EtcdWriter(nil))
	pr.Close()
	if err != nil {
		return nil, err
	}
	return &SnapshotResult{said: said(fmt.Sprintf("full etcd snapshot: %s (%d bytes, verified)", path, info.Size)), Path: path, SHA256: info.SHA256}, nil
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
	// Outcome is the etcd layer's full account, for the command to render.
	Outcome *etcd.DeleteResult `json:"-"`
}

func (r *run) deleteObjects(ctx context.Context, s Step, p *runbooks.EtcdDeleteParams) (Result, error) {
	names := p.Names
	if len(names) == 0 {
		return nil, skip("no object named to remove (--delete NAME): with its bootstrap objects created, the API server can start with webhooks back on")
	}
	ec, err := r.etcd(ctx)
	if err != nil {
		return nil, err
	}
	resources, err := etcd.ParseKind(orDefault(string(p.Kind), "validating"))
	if err != nil {
		return nil, invalidInput("", "step %s: %v", s.Name, err)
	}
	plan, err := ec.PlanDelete(ctx, names, resources)
	var nf *etcd.NotFoundError
	if errors.As(err, &nf) {
		// Resumed after the delete went through: a verified backup of
		// every named object, written by this step, is the proof.
		if done := r.earlierBackup(s, names); done != "" {
			return &DeleteResult{said: said("already removed in an earlier run; backup " + done), Backup: done}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	opts, err := r.deleteOptions(ctx, ec, s)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	RenderDeletePlan(&b, ec.Endpoints(), plan, opts)
	r.ui.Show(b.String())
	if !r.fx.DryRun() {
		for _, o := range plan.Objects {
			if err := r.ui.ConfirmTyped(ctx, fmt.Sprintf("This deletes %s %s from etcd (backup first).", o.Kind, termsafe.String(o.Name)), o.Name); err != nil {
				return nil, err
			}
		}
	}
	if opts.BackupPath != "" {
		if err := r.journal.Append(Entry{Kind: "note", Step: s.Name, Message: "backup goes to " + opts.BackupPath, Data: journalData(&DeleteResult{Backup: opts.BackupPath})}); err != nil {
			return nil, err
		}
	}
	res, err := ec.Execute(ctx, plan, r.fx.EtcdWriter(ec), opts)
	if res == nil {
		return nil, err
	}
	out := &DeleteResult{Backup: res.BackupPath, Deleted: res.Deleted, Revision: res.Revision, Outcome: res}
	switch {
	case err != nil:
		return out, err
	case r.fx.DryRun():
		out.said = said(fmt.Sprintf("dry run: would back up and remove %s", safeJoin(res.Deleted)))
	default:
		out.said = said(fmt.Sprintf("removed %s; backup %s (restore with: breakglass etcd restore %s)", safeJoin(res.Deleted), res.BackupPath, res.BackupPath))
	}
	return out, nil
}

// deleteOptions: a recovery keeps its backup in the incident directory; a
// standalone delete where the operator said (--backup-dir, --snapshot), by
// default in STATE-DIR/etcd/CLUSTER-ID/backups, with a deletion record.
func (r *run) deleteOptions(ctx context.Context, ec *etcd.Client, s Step) (etcd.ExecuteOptions, error) {
	opts := etcd.ExecuteOptions{ToolVersion: r.opts.ToolVersion}
	if r.opts.Runbook != standaloneDelete {
		// A run killed after writing its backup (or half of it) but before
		// the delete left that file behind; backups are never overwritten,
		// so this run writes its own next to it.
		opts.BackupPath = r.freeBackupPath(s.Name)
		return opts, nil
	}
	info, err := ec.Cluster(ctx)
	if err != nil {
		return opts, err
	}
	dir := filepath.Join(r.st.Dir, "etcd", info.ClusterID.String())
	opts.BackupDir, opts.Snapshot, opts.RecordDir = orDefault(r.opts.BackupDir, filepath.Join(dir, "backups")), r.opts.Snapshot, filepath.Join(dir, "deleted")
	return opts, nil
}

// backupPaths are the backup files a step of this incident may have
// written: backup-STEP.json, then backup-STEP-2.json, ...
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

// RestoreResult is each restored key's status, and the etcd layer's
// account of each backup (planned, then restored).
type RestoreResult struct {
	said
	Keys map[string]string
	// Plans are each backup's plan (a dry run against the live etcd);
	// Restored the outcomes of those that were restored.
	Plans    []*etcd.RestoreResult
	Restored []*etcd.RestoreResult
}

func (r *RestoreResult) JournalData() any { return r.Keys }

// restoreObjects restores backups, create-only: the files named, or every
// backup an etcd.delete step of this incident recorded. Each is verified,
// planned against the live etcd and shown before it is restored.
func (r *run) restoreObjects(ctx context.Context, _ Step, p *EtcdRestoreParams) (Result, error) {
	backups := p.Backups
	if len(backups) == 0 {
		backups = r.journaledBackups()
	}
	if len(backups) == 0 {
		return nil, skip("this incident removed nothing from etcd")
	}
	ec, err := r.etcd(ctx)
	if err != nil {
		return nil, err
	}
	opts := etcd.RestoreOptions{ForceCluster: r.opts.ForceCluster}
	out := &RestoreResult{Keys: map[string]string{}}
	var parts []string
	for _, path := range backups {
		b, err := etcd.ReadBackup(path)
		if err != nil {
			return out, err
		}
		plan, err := ec.Restore(ctx, b, etcd.DryRunWriter(ec), opts)
		if plan == nil {
			return out, err
		}
		plan.Path, plan.DryRun = path, r.fx.DryRun()
		out.Plans = append(out.Plans, plan)
		var text strings.Builder
		RenderRestore(&text, b, plan, true)
		r.ui.Show(text.String())
		todo := 0
		for _, it := range plan.Items {
			if it.Status == etcd.WouldRestore {
				todo++
			}
		}
		res := plan
		if !r.fx.DryRun() && todo > 0 {
			if err := r.ui.Confirm(ctx, fmt.Sprintf("Restore %d key(s) into etcd?", todo)); err != nil {
				return out, err
			}
			if res, err = ec.Restore(ctx, b, r.fx.EtcdWriter(ec), opts); res == nil {
				return out, err
			}
			res.Path = path
			out.Restored = append(out.Restored, res)
		}
		for _, it := range res.Items {
			parts = append(parts, fmt.Sprintf("%s: %s", termsafe.String(it.Key), it.Status))
			out.Keys[it.Key] = string(it.Status)
		}
		if err != nil {
			return out, err
		}
	}
	out.said = said(strings.Join(parts, "; "))
	return out, nil
}

// journaledBackups are the backups the incident's etcd.delete steps wrote.
func (r *run) journaledBackups() []string {
	var backups []string
	seen := map[string]bool{}
	for _, e := range r.entries {
		var d DeleteResult
		if e.Kind != "end" || e.Outcome != OutcomeOK || json.Unmarshal(e.Data, &d) != nil || d.Backup == "" || seen[d.Backup] {
			continue
		}
		seen[d.Backup] = true
		backups = append(backups, d.Backup)
	}
	return backups
}

// deadlockCheckEvery is how often the wait after disable looks at the logs
// for a deadlock that the disabled plugins do not end.
const deadlockCheckEvery = 5 * time.Second

// waitRecovering waits for the API server after the plugins were disabled,
// and meanwhile looks at its logs: when a webhook or policy whose plugin is
// still on keeps refusing the start-up writes, waiting out the timeout
// cannot help, and the run says so at once with the command that does.
func (r *run) waitRecovering(ctx context.Context, _ Step, p *runbooks.APIServerWaitParams) (Result, error) {
	if r.fx.DryRun() || r.decision == nil {
		return r.waitHealth(ctx, p.Timeout.Std())
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(deadlockCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if err := r.persistingDeadlock(wctx); err != nil {
				cancel(err)
				return
			}
		}
	}()
	res, err := r.waitHealth(wctx, p.Timeout.Std())
	if cause := context.Cause(wctx); err != nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return res, cause
	}
	return res, err
}

// waitHealth waits for /readyz on every node.
func (r *run) waitHealth(ctx context.Context, timeout time.Duration) (Result, error) {
	res, err := r.waitReady(ctx, timeout, "the API server is ready on every node")
	if res == nil {
		return nil, err
	}
	return res, err
}

// persistingDeadlock reads the logs of the running containers (those of the
// new pods: the disable step waited for them) and tells whether admission
// still refuses start-up writes through a plugin the plan left on.
func (r *run) persistingDeadlock(ctx context.Context) error {
	ec, err := r.etcd(ctx)
	if err != nil {
		ec = nil
	}
	report, err := diagnose.Run(ctx, r.tc, ec, diagnose.Options{Tail: 200, EtcdError: err})
	if err != nil || !report.AdmissionEvidence() {
		return nil
	}
	// Compared with what the rendered pods disable now (the plan's plugins,
	// plus any an operator turned off since): refusals through plugins that
	// are off are older lines.
	off := union(r.decision.Plugins, disabledEverywhere(report.Evidence.Nodes))
	missing := without(report.PluginNames(), off)
	if len(missing) == 0 {
		return nil
	}
	return &PersistingDeadlockError{Missing: missing, Why: reasonsOf(report, missing), Incident: r.journal.ID}
}

// disabledEverywhere are the plugins every node's rendered pod disables.
func disabledEverywhere(nodes []diagnose.NodeEvidence) []string {
	if len(nodes) == 0 {
		return nil
	}
	out := slices.Clone(nodes[0].DisabledPlugins)
	for _, ne := range nodes[1:] {
		out = slices.DeleteFunc(out, func(p string) bool { return !slices.Contains(ne.DisabledPlugins, p) })
	}
	return out
}

// PersistingDeadlockError: with the planned plugins off, admission still
// refuses kube-apiserver's start-up writes through a plugin left on.
type PersistingDeadlockError struct {
	Missing  []string
	Why      string
	Incident string
}

func (e *PersistingDeadlockError) Error() string {
	return fmt.Sprintf("the deadlock persists with the new flags: %s still on (%s)", strings.Join(e.Missing, ","), e.Why)
}

func (e *PersistingDeadlockError) Hints() []string {
	return []string{
		"turn it off too (restore undoes both): breakglass admission disable --plugins " + strings.Join(e.Missing, ","),
		"then continue the recovery: breakglass resume " + e.Incident,
	}
}

func (e *PersistingDeadlockError) Unwrap() error { return ErrTimeout }
