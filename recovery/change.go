package recovery

// Standalone changes (admission disable|restore, etcd delete|restore, lock
// break) are runs of the same engine as a guided recovery, of one step
// each: planned, shown, confirmed, locked, journaled, applied and verified
// by the same loop, so that resume and revert know them too.

import (
	"context"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// AdmissionChange is what `admission disable|restore` take from the
// command line.
type AdmissionChange struct {
	Plugins            []string      // disable: the plugins; restore: what to remove without a record
	RevertAfter        time.Duration // disable: apply in try mode; the nodes revert by themselves
	NoWait             bool
	WaitTimeout        time.Duration
	NoKubeletRestart   bool
	AllowPendingChange bool
	Etcd               EtcdOptions // where the cluster lock is
	ToolVersion        string
	CommandLine        string // as typed, without --dry-run
}

// DisableAdmission runs `admission disable` as an incident of one step.
func DisableAdmission(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, c AdmissionChange) (*RecoverResult, error) {
	one := Step{Name: "disable", Confirm: true, Params: &runbooks.AdmissionDisableParams{Plugins: c.Plugins, RevertAfter: runbooks.Duration(c.RevertAfter)},
		Description: "Add the plugins to disable-admission-plugins on every node, recording the original values."}
	return Recover(ctx, tc, st, fx, ui, c.options(standaloneDisable, one))
}

// RestoreAdmission runs `admission restore` as an incident of one step.
func RestoreAdmission(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, c AdmissionChange) (*RecoverResult, error) {
	one := Step{Name: "restore", Confirm: true, Params: &runbooks.AdmissionRestoreParams{},
		Description: "Put disable-admission-plugins and enable-admission-plugins back to the recorded values."}
	return Recover(ctx, tc, st, fx, ui, c.options(standaloneRestore, one))
}

func (c AdmissionChange) options(command string, one Step) RecoverOptions {
	return RecoverOptions{Runbook: command, Command: command, Steps: []Step{one}, Plugins: c.Plugins, NoWait: c.NoWait, WaitTimeout: Duration(c.WaitTimeout), NoKubeletRestart: c.NoKubeletRestart,
		AllowPendingChange: c.AllowPendingChange, Etcd: c.Etcd, ToolVersion: c.ToolVersion, CommandLine: c.CommandLine}
}

// EtcdChange is what `etcd delete|restore` take from the command line.
type EtcdChange struct {
	Kind      string   // delete: which admission kinds the names are
	Names     []string // delete
	BackupDir string   // delete: where the backup goes
	Snapshot  bool     // delete: a full snapshot first
	File      string   // restore: the backup file
	// ForceCluster restores a backup taken from another etcd cluster ID.
	ForceCluster bool
	Etcd         EtcdOptions
	ToolVersion  string
	CommandLine  string // as typed, without --dry-run
}

// DeleteObjects runs `etcd delete` as an incident of one step: the objects
// resolved by listing, shown, each confirmed by typing its name, backed up
// (verified) and deleted in one guarded transaction.
func DeleteObjects(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, c EtcdChange) (*RecoverResult, error) {
	one := Step{Name: "delete", Confirm: true, Params: &runbooks.EtcdDeleteParams{Kind: orDefault(c.Kind, "all"), Names: c.Names},
		Description: "Remove the named admission objects from etcd after a verified backup."}
	return Recover(ctx, tc, st, fx, ui, RecoverOptions{Runbook: standaloneDelete, Command: standaloneDelete, Steps: []Step{one},
		BackupDir: c.BackupDir, Snapshot: c.Snapshot, Etcd: c.Etcd, ToolVersion: c.ToolVersion, CommandLine: c.CommandLine})
}

// RestoreBackup runs `etcd restore FILE` as an incident of one step:
// verified, planned against the live etcd, shown, confirmed, create-only.
func RestoreBackup(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, c EtcdChange) (*RecoverResult, error) {
	one := Step{Name: "restore", Confirm: true, Params: &EtcdRestoreParams{Backups: []string{c.File}},
		Description: "Put back the keys of the backup that are absent, byte for byte."}
	return Recover(ctx, tc, st, fx, ui, RecoverOptions{Runbook: standaloneEtcdRestore, Command: standaloneEtcdRestore, Steps: []Step{one},
		ForceCluster: c.ForceCluster, Etcd: c.Etcd, ToolVersion: c.ToolVersion, CommandLine: c.CommandLine})
}

// BreakClusterLock runs `lock break` as an incident of one step: who holds the
// lock shown, confirmed, then the lock removed. It takes no lock itself.
func BreakClusterLock(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, c EtcdChange) (*RecoverResult, error) {
	one := Step{Name: "break", Confirm: true, Params: &LockBreakParams{},
		Description: "Remove the cluster lock, whoever holds it: only when that run is gone."}
	fx.Lock = false
	return Recover(ctx, tc, st, fx, ui, RecoverOptions{Runbook: standaloneLockBreak, Command: standaloneLockBreak, Steps: []Step{one},
		Etcd: c.Etcd, ToolVersion: c.ToolVersion, CommandLine: c.CommandLine})
}

// ResultOf is the typed result of the run's step of type T, if it ran.
func ResultOf[T Result](res *RecoverResult) (T, bool) {
	for _, s := range res.Steps {
		if t, ok := s.Result.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}
