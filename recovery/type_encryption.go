package recovery

// Stored data that no longer decrypts with the encryption configuration
// the control planes render (runbook encryption-drift): kube-apiserver runs
// and is never ready. The decision is which (provider, key) to give back
// for reading, named by the stored values' prefixes; the key material is
// found by the step, in memory, and never decided, journaled or shown.
// Every control plane must read it: one left out stays unready.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	registerType(&IncidentType{
		Name:     "encryption-drift",
		Verdicts: []diagnose.Verdict{diagnose.EncryptionDrift},
		Runbook:  diagnose.EncryptionRunbook,
		Does:     "adds back, read-only, the encryption keys that decrypt what etcd stores",
		Fits:     func(steps []Step) bool { return hasAction(steps, runbooks.ActionEncryptionKeyAdd) },
		Decide:   decideEncryption,
		Plan: func(d *Decision) string {
			var keys []string
			for _, k := range keysOf(d.Steps) {
				keys = append(keys, strings.Replace(k, ":", " key ", 1))
			}
			plan := "add back, read-only, on every control plane: " + strings.Join(keys, ", ")
			if hasAction(d.Steps, runbooks.ActionEncryptionUnreadableRemove) {
				plan += "; as the last resort, back up and remove what no key reads"
			}
			return plan
		},
		Scope:  ScopeEveryMember,
		Advice: adviseEncryption,
	})
}

// decideEncryption names the (provider, key) each control plane must read
// again, and fills the add step's parameters with them: the steps after the
// diagnosis are the run's own, or the type's runbook's.
func decideEncryption(d *Decision, report *diagnose.Report, opts RecoverOptions) error {
	ee := report.Evidence.Encryption
	missing := ee.Missing()
	for _, u := range ee.Unreadable {
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s cannot read %d %s stored as %s (e.g. %s): %s", u.Node, u.Count, u.Resource, u.What, u.Example, u.Why))
	}
	if slices.Contains(missing, "identity") {
		return &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary + " (unencrypted values without an identity provider: add identity at the end of the provider list; not automated yet)", Next: report.Next}
	}
	if len(missing) == 0 {
		return &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary + " (but what is stored was not read: no key can be named)", Next: report.Next}
	}
	steps := d.Steps
	if len(steps) == 0 {
		steps = opts.Steps
	}
	d.Steps = make([]Step, 0, len(steps))
	for _, s := range steps {
		if _, ok := s.Params.(*runbooks.EncryptionUnreadableRemoveParams); ok && !opts.RemoveUnreadable {
			continue // the last resort runs only when asked: not even shown as skipped
		}
		i := len(d.Steps)
		d.Steps = append(d.Steps, s)
		if p, ok := s.Params.(*runbooks.EncryptionKeyAddParams); ok {
			keys := p.Keys
			if len(keys) == 0 {
				keys = missing
			} else if extra := without(missing, keys); len(extra) > 0 {
				d.Warnings = append(d.Warnings, fmt.Sprintf("the runbook names %s; the diagnosis also finds %s unreadable: kube-apiserver may stay unready", strings.Join(keys, ", "), strings.Join(extra, ", ")))
			}
			d.Steps[i].Params = &runbooks.EncryptionKeyAddParams{Keys: slices.Clone(keys), Bundle: p.Bundle}
		}
	}
	return nil
}

// keysOf are the keys the steps' encryption.key.add name.
func keysOf(steps []Step) []string {
	var out []string
	for _, s := range steps {
		if p, ok := s.Params.(*runbooks.EncryptionKeyAddParams); ok {
			out = union(out, p.Keys)
		}
	}
	return out
}

// adviseEncryption: an added key must be made where the configs come from;
// values removed as the last resort must be written again by their owners.
func adviseEncryption(r *run, _ *Decision, _ error) []string {
	did := func(a runbooks.Action) bool {
		return slices.ContainsFunc(r.appliedChanges(), func(e Entry) bool { return e.Action == string(a) })
	}
	removed := did(runbooks.ActionEncryptionUnreadableRemove)
	var out []string
	if did(runbooks.ActionEncryptionKeyAdd) || !removed {
		out = append(out, keyStays)
	}
	if removed {
		out = append(out, "the values no key read are gone from etcd and kept, byte for byte, in this incident's backups: whatever wrote them must write them again (helm upgrade, a new token, the operator that owns them); "+
			"should their key be found, it goes into every control plane's encryption configuration first, then: "+r.target.Cmd("revert "+r.journal.ID+" --objects"))
	}
	return out
}
