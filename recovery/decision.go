package recovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

// Decision is what the diagnosis fixes for the rest of a guided recovery,
// before its first change. It is journaled with the diagnose step, and a
// resumed run follows it: a diagnosis made after the plugins were disabled
// would say healthy and decide nothing.
type Decision struct {
	Verdict  string   `json:"verdict"`
	Plugins  []string `json:"plugins"`
	Reasons  []string `json:"reasons,omitempty"`  // why each plugin is in the plan
	Runbook  string   `json:"runbook,omitempty"`  // the built-in runbook the diagnosis names
	Warnings []string `json:"warnings,omitempty"` // where the operator's flags go against the diagnosis
	// Flags are kube-apiserver's own flags to take out of
	// cluster.apiServer.extraArgs (KEY or KEY:ITEM), for a diagnosis of
	// flags-refused; Steps replace the run's steps after diagnose when its
	// runbook is not the one that does that (decision_flags.go).
	Flags []string `json:"flags,omitempty"`
	Steps []Step   `json:"steps,omitempty"`
}

// NotDeadlockError ends a guided recovery whose diagnosis found no admission
// deadlock to recover from: nothing was changed. Its exit code is the one
// `breakglass diagnose` gives the same verdict.
type NotDeadlockError struct {
	Verdict diagnose.Verdict
	Summary string
	Next    []string
	// Mismatch, when set, says why the run's runbook does not fit the
	// verdict (its steps fix another failure).
	Mismatch string
}

func (e *NotDeadlockError) Error() string {
	if e.Mismatch != "" {
		return e.Mismatch + "; nothing was changed: " + e.Summary
	}
	switch e.Verdict {
	case diagnose.OtherFailure:
		return "not an admission deadlock, nothing was changed: " + e.Summary
	case diagnose.FlagsRefused:
		return "kube-apiserver refuses its own flags; nothing was changed: " + e.Summary
	default:
		return "cannot tell whether this is an admission deadlock, nothing was changed: " + e.Summary
	}
}

// Hints are the diagnosis's next commands.
func (e *NotDeadlockError) Hints() []string { return e.Next }

// Unwrap gives the exit code `breakglass diagnose` gives the same verdict.
func (e *NotDeadlockError) Unwrap() error { return e.Verdict.Category() }

// wrongRunbook stops a run whose runbook fixes another failure than the
// diagnosis's, before any change; the plain recover follows the diagnosis.
func wrongRunbook(report *diagnose.Report, why string) *NotDeadlockError {
	next := slices.Clone(report.Next)
	if report.Runbook != "" {
		next = append([]string{"breakglass recover   # without --runbook: the diagnosis picks " + report.Runbook}, next...)
	}
	return &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary, Next: next, Mismatch: why}
}

// errNothingToRecover ends a run whose diagnosis says kube-apiserver is
// ready everywhere: there is nothing to recover, and that is a success.
var errNothingToRecover = errors.New("kube-apiserver is ready on every node: nothing to recover")

// decide turns a diagnosis into the run's plan: the plugins to disable are
// those the diagnosis names, and the runbook's own as well unless the
// diagnosis read every admission object in etcd; plugins the
// operator named explicitly win, with a warning when the diagnosis says
// they are not enough.
func decide(report *diagnose.Report, opts RecoverOptions) (*Decision, error) {
	d := &Decision{Verdict: string(report.Verdict), Runbook: report.Runbook}
	switch report.Verdict {
	case diagnose.FlagsRefused:
		return decideFlags(report, opts)
	case diagnose.EtcdNoSpace:
		return decideNoSpace(report, opts)
	case diagnose.Healthy:
		return d, errNothingToRecover
	case diagnose.OtherFailure:
		return d, &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary, Next: report.Next}
	}
	if givesRoom(opts.Steps) {
		return d, wrongRunbook(report, fmt.Sprintf("runbook %s gives a full etcd room, and the diagnosis (%s) finds no NOSPACE alarm", opts.Runbook, report.Verdict))
	}
	if hasAction(opts.Steps, runbooks.ActionExtraArgsRemove) && len(flagsNamed(opts.Steps)) == 0 {
		// It takes out the refused flags the diagnosis names, and this
		// one names none.
		return d, wrongRunbook(report, fmt.Sprintf("runbook %s takes refused flags out of cluster.apiServer.extraArgs, and the diagnosis (%s) names none", opts.Runbook, report.Verdict))
	}
	if report.Verdict == diagnose.Unknown && !report.AdmissionEvidence() && !report.Suspected && !opts.PluginsExplicit {
		next := append(slices.Clone(report.Next), "if you know it is an admission deadlock, name the plugins: breakglass recover --plugins ValidatingAdmissionWebhook[,MutatingAdmissionWebhook]")
		return d, &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary, Next: next}
	}
	runbookPlugins := disablePlugins(opts.Steps)
	if opts.PluginsExplicit {
		d.Plugins = runbookPlugins
		d.Reasons = append(d.Reasons, "--plugins "+strings.Join(runbookPlugins, ",")+": named on the command line")
		if missing := without(report.PluginNames(), runbookPlugins); len(missing) > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("the diagnosis says %s must be off too (%s): with --plugins %s the API server may stay down",
				strings.Join(missing, ","), reasonsOf(report, missing), strings.Join(runbookPlugins, ",")))
		}
	} else {
		d.Plugins = union(runbookPlugins, report.PluginNames())
		// A diagnosis that read every admission object in etcd names every
		// plugin that blocks the start-up (the log, and the audit of etcd):
		// the runbook's default beyond them would bypass webhooks or
		// policies for nothing.
		if report.Verdict == diagnose.AdmissionDeadlock && readEveryAdmissionObject(report) && !opts.RunbookExplicit && len(report.PluginNames()) > 0 {
			d.Plugins = report.PluginNames()
			if left := without(runbookPlugins, d.Plugins); len(left) > 0 {
				d.Reasons = append(d.Reasons, strings.Join(left, ",")+" (the runbook's default) stays on: the diagnosis finds nothing it would bypass")
			}
		}
		for _, p := range d.Plugins {
			why := reasonsOf(report, []string{p})
			if why == "" {
				why = "the runbook's own"
			}
			d.Reasons = append(d.Reasons, p+": "+why)
		}
	}
	if report.Runbook != "" && report.Runbook != opts.Runbook {
		if opts.RunbookExplicit {
			d.Warnings = append(d.Warnings, fmt.Sprintf("--runbook %s given; the diagnosis names %s (its steps are the same; the plugins above follow the diagnosis)", opts.Runbook, report.Runbook))
		} else {
			d.Reasons = append(d.Reasons, fmt.Sprintf("the diagnosis names runbook %s: its steps are those of %s, so this run follows them with the plugins above and --delete names resolved across every admission kind", report.Runbook, opts.Runbook))
		}
	}
	if report.Verdict == diagnose.Unknown {
		d.Warnings = append(d.Warnings, "readiness could not be checked: going on because "+unknownGround(report, opts))
	}
	return d, nil
}

// readEveryAdmissionObject: the diagnosis read etcd and decoded every
// admission object there (an encrypted one could be a blocker it cannot see).
func readEveryAdmissionObject(r *diagnose.Report) bool {
	if r.Evidence == nil || !r.Evidence.Etcd.Asked || r.Evidence.Etcd.Error != "" {
		return false
	}
	for _, o := range r.Evidence.Etcd.Objects {
		if o.Undecoded != "" || o.Encoding == "encrypted" || o.Encoding == "unknown" {
			return false
		}
	}
	return true
}

func unknownGround(report *diagnose.Report, opts RecoverOptions) string {
	switch {
	case report.AdmissionEvidence():
		return "the log shows admission refusing writes"
	case report.Suspected:
		return "start-up is stuck and etcd holds admission objects that can block it"
	}
	return "--plugins was given"
}

// Render is the plan as the diagnosis shaped it, for the operator to read.
func (d *Decision) Render() string {
	var b strings.Builder
	switch {
	case d.Verdict == string(diagnose.EtcdNoSpace):
		fmt.Fprintf(&b, "Plan from the diagnosis (verdict %s): %s\n", d.Verdict, roomPlanText())
	case len(d.Flags) > 0:
		fmt.Fprintf(&b, "Plan from the diagnosis (verdict %s): %s\n", d.Verdict, d.flagsPlanText())
	default:
		fmt.Fprintf(&b, "Plan from the diagnosis (verdict %s): disable %s\n", d.Verdict, strings.Join(d.Plugins, ","))
	}
	for _, r := range d.Reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	for _, w := range d.Warnings {
		fmt.Fprintf(&b, "WARNING: %s\n", w)
	}
	return b.String()
}

func reasonsOf(report *diagnose.Report, plugins []string) string {
	var out []string
	for _, p := range report.Plugins {
		if slices.Contains(plugins, p.Plugin) && p.Why != "" {
			out = append(out, p.Why)
		}
	}
	return strings.Join(out, "; ")
}

// disablePlugins are the plugins of the steps' admission.disable steps.
func disablePlugins(steps []Step) []string {
	var out []string
	for _, s := range steps {
		if p, ok := s.Params.(*runbooks.AdmissionDisableParams); ok {
			out = union(out, p.Plugins)
		}
	}
	return out
}

// without is a minus b.
func without(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// decisionFrom finds the decision an earlier run journaled with its
// diagnose step.
func decisionFrom(entries []Entry) *Decision {
	var d *Decision
	for _, e := range entries {
		if e.Kind != "end" || e.Action != "diagnose" || e.Outcome != OutcomeOK {
			continue
		}
		var got DiagnoseResult
		if json.Unmarshal(e.Data, &got) == nil && got.Decision != nil &&
			(len(got.Decision.Plugins) > 0 || len(got.Decision.Flags) > 0 || len(got.Decision.Steps) > 0 || got.Decision.Verdict == string(diagnose.EtcdNoSpace)) {
			d = got.Decision
		}
	}
	return d
}

// described is s with its description as this run follows it: a runbook's
// prose names its own plugins, and the diagnosis may have decided others.
func (d *Decision) described(s Step, steps []Step) Step {
	switch s.Params.(type) {
	case *runbooks.AdmissionDisableParams, *runbooks.AdmissionRestoreParams, *runbooks.VerifyParams:
	default:
		return s
	}
	if own := disablePlugins(steps); d != nil && len(d.Plugins) > 0 && !slices.Equal(own, d.Plugins) {
		s.Description += fmt.Sprintf(" In this run the plugins are %s, as the diagnosis decided (the runbook names %s).", strings.Join(d.Plugins, ","), strings.Join(own, ","))
	}
	return s
}
