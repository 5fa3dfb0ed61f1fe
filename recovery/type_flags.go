package recovery

// Flags the new minor refuses: kube-apiserver exits at once on its own
// command line (runbook apiserver-flags). The decision is which flags to
// take out of cluster.apiServer.extraArgs, on every control plane: one left
// out keeps crash-looping.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	registerType(&IncidentType{
		Name:     "apiserver-flags",
		Verdicts: []diagnose.Verdict{diagnose.FlagsRefused},
		Runbook:  "apiserver-flags",
		Does:     "takes refused flags out of cluster.apiServer.extraArgs",
		Fits:     func(steps []Step) bool { return hasAction(steps, runbooks.ActionExtraArgsRemove) },
		Decide:   decideFlags,
		Decided:  func() Decided { return &FlagsDecision{} },
		Plan: func(d *Decision) string {
			f, _ := d.Of.(*FlagsDecision)
			if f == nil {
				f = &FlagsDecision{}
			}
			return "take out of cluster.apiServer.extraArgs: " + strings.Join(f.Flags, ", ")
		},
		Scope: ScopeEveryMember,
		Advice: func(*run, *Decision, error) []string {
			return []string{flagsStay}
		},
	})
}

// decideFlags: the refused flags the diagnosis names, or those the
// runbook names itself (with a warning when the diagnosis finds more).
func decideFlags(d *Decision, report *diagnose.Report, opts RecoverOptions) error {
	own := &FlagsDecision{}
	d.Of = own
	for _, f := range report.Flags {
		own.Flags = append(own.Flags, flagOf(f))
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s on %s: kube-apiserver says %q", f.Subject(), strings.Join(f.Nodes, ", "), f.Refusal))
	}
	if named := flagsNamed(opts.Steps); len(named) > 0 && len(d.Steps) == 0 {
		if missing := without(own.Flags, named); len(missing) > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("the runbook names %s; the diagnosis also finds %s refused: kube-apiserver may stay down", strings.Join(named, ", "), strings.Join(missing, ", ")))
		}
		own.Flags = named
	}
	if len(own.Flags) == 0 {
		return &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary + " (but none of them can be named for an edit)", Next: report.Next}
	}
	return nil
}

// FlagsDecision is what a diagnosis of flags-refused decides: the flags to
// take out of cluster.apiServer.extraArgs (KEY or KEY:ITEM).
type FlagsDecision struct {
	Flags []string `json:"flags,omitempty"`
}

// Fill: an extraargs.remove that names no flag of its own takes out those
// decided.
func (f *FlagsDecision) Fill(steps []Step) []Step {
	out := slices.Clone(steps)
	for i, s := range out {
		if p, ok := s.Params.(*runbooks.ExtraArgsRemoveParams); ok && len(p.Flags) == 0 {
			q := *p
			q.Flags = slices.Clone(f.Flags)
			out[i].Params = &q
		}
	}
	return out
}

// flagOf is a refused flag as extraargs.remove names it: KEY, or KEY:ITEM.
// A gate is taken out with its value (the other value may be the one its
// lock allows); a runtime-config entry by the group version or group
// kube-apiserver named, with what lies under it.
func flagOf(f diagnose.RefusedFlag) string {
	switch {
	case f.Flag == "feature-gates" && f.Item != "":
		return f.Flag + ":" + f.Item
	case f.Name != "":
		return f.Flag + ":" + f.Name
	}
	return f.Flag
}

// flagsNamed are the flags the steps' extraargs.remove name themselves.
func flagsNamed(steps []Step) []string {
	var out []string
	for _, s := range steps {
		if p, ok := s.Params.(*runbooks.ExtraArgsRemoveParams); ok {
			out = union(out, p.Flags)
		}
	}
	return out
}
