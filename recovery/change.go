package recovery

// Standalone changes (admission disable, admission restore) are runs of the
// same engine as a guided recovery, of one step each: planned, shown,
// confirmed, locked, journaled, applied and verified the same way, so that
// resume and revert know them too.

import (
	"context"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// The runbook names standalone changes are journaled under.
const (
	standaloneDisable = "admission disable"
	standaloneRestore = "admission restore"
)

// standalone tells whether an incident is a standalone change: named so,
// or journaled before standalone changes recorded their options.
func standalone(meta IncidentMeta) bool {
	return len(meta.Options) == 0 || meta.Runbook == standaloneDisable || meta.Runbook == standaloneRestore
}

func (r *run) standalone() bool {
	return r.opts.Runbook == standaloneDisable || r.opts.Runbook == standaloneRestore
}

// AdmissionChange is what `admission disable|restore` take from the
// command line.
type AdmissionChange struct {
	Plugins            []string      // disable: the plugins; restore: what to remove without a record
	RevertAfter        time.Duration // disable: apply in try mode; the nodes revert by themselves
	NoWait             bool
	WaitTimeout        time.Duration
	AllowPendingChange bool
	Etcd               EtcdOptions // where the cluster lock is
	ToolVersion        string
}

// DisableAdmission runs `admission disable` as an incident of one step.
func DisableAdmission(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, c AdmissionChange) (*RecoverResult, error) {
	step := Step{Name: "disable", Confirm: true, Params: &runbooks.AdmissionDisableParams{Plugins: c.Plugins, RevertAfter: runbooks.Duration(c.RevertAfter)},
		Description: "Add the plugins to disable-admission-plugins on every node, recording the original values."}
	return Recover(ctx, tc, st, fx, ui, c.options(standaloneDisable, step))
}

// RestoreAdmission runs `admission restore` as an incident of one step.
func RestoreAdmission(ctx context.Context, tc *talos.Client, st State, fx Effects, ui UI, c AdmissionChange) (*RecoverResult, error) {
	step := Step{Name: "restore", Confirm: true, Params: &runbooks.AdmissionRestoreParams{},
		Description: "Put disable-admission-plugins and enable-admission-plugins back to the recorded values."}
	return Recover(ctx, tc, st, fx, ui, c.options(standaloneRestore, step))
}

func (c AdmissionChange) options(command string, step Step) RecoverOptions {
	return RecoverOptions{Runbook: command, Command: command, Steps: []Step{step}, Plugins: c.Plugins, NoWait: c.NoWait, WaitTimeout: Duration(c.WaitTimeout),
		AllowPendingChange: c.AllowPendingChange, Etcd: c.Etcd, ToolVersion: c.ToolVersion}
}

// AdmissionOutcome is the plan of a standalone change's step, as executed,
// or nil when the run ended before it was made.
func (res *RecoverResult) AdmissionOutcome() *AdmissionPlan {
	for _, s := range res.Steps {
		if a, ok := s.Result.(*AdmissionResult); ok {
			return a.Plan
		}
	}
	return nil
}
