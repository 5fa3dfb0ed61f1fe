package recovery

// The admission deadlock: a fail-closed webhook or policy refuses
// kube-apiserver's own start-up writes (runbooks webhook-deadlock,
// mutating-webhook-deadlock, policy-deadlock). The decision is which
// admission plugins to turn off while it starts.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	registerType(&IncidentType{
		Name:     "admission-deadlock",
		Verdicts: []diagnose.Verdict{diagnose.AdmissionDeadlock, diagnose.Unknown},
		Runbook:  "webhook-deadlock",
		Does:     "turns admission plugins off",
		Fits:     fitsAdmission,
		Decide:   decideAdmission,
		Decided:  func() Decided { return &AdmissionDecision{} },
		Plan:     func(d *Decision) string { return "disable " + strings.Join(admissionOf(d).Plugins, ",") },
		Scope:    ScopeNodesGiven,
		Advice:   adviseAdmission,
	})
}

// AdmissionDecision is what an admission deadlock's diagnosis decides: the
// admission plugins to turn off while kube-apiserver starts.
type AdmissionDecision struct {
	Plugins []string `json:"plugins"`
}

// admissionOf is the decision's plugins (none when it is another type's).
func admissionOf(d *Decision) *AdmissionDecision {
	if a, ok := d.Of.(*AdmissionDecision); ok {
		return a
	}
	return &AdmissionDecision{}
}

// Fill: every admission.disable turns off the decided plugins, the wait
// after it watches for a deadlock they do not end, and the steps that name
// plugins say which this run follows when the runbook names others.
func (a *AdmissionDecision) Fill(steps []Step) []Step {
	if len(a.Plugins) == 0 {
		return steps
	}
	own := disablePlugins(steps)
	out := slices.Clone(steps)
	for i, s := range out {
		switch p := s.Params.(type) {
		case *runbooks.AdmissionDisableParams:
			q := *p
			q.Plugins = slices.Clone(a.Plugins)
			s.Params = &q
		case *runbooks.APIServerWaitParams:
			q := *p
			q.Disabled = slices.Clone(a.Plugins)
			s.Params = &q
		}
		switch s.Params.(type) {
		case *runbooks.AdmissionDisableParams, *runbooks.AdmissionRestoreParams, *runbooks.VerifyParams:
			if !slices.Equal(own, a.Plugins) && !strings.Contains(s.Description, inThisRun) {
				s.Description += fmt.Sprintf(" %s %s, as the diagnosis decided (the runbook names %s).", inThisRun, strings.Join(a.Plugins, ","), strings.Join(own, ","))
			}
		}
		out[i] = s
	}
	return out
}

// inThisRun begins what a step's description says of the decided plugins.
const inThisRun = "In this run the plugins are"

// fitsAdmission: a runbook that disables admission plugins, or one no other
// type claims (a runbook of waits and checks).
func fitsAdmission(steps []Step) bool {
	if hasAction(steps, runbooks.ActionAdmissionDisable) {
		return true
	}
	for _, t := range incidentTypes {
		if t.Name != "admission-deadlock" && t.Fits(steps) {
			return false
		}
	}
	return true
}

// decideAdmission: the plugins to disable are those the diagnosis names,
// and the runbook's own as well unless the diagnosis read every admission
// object in etcd; plugins the operator named explicitly win, with a
// warning when the diagnosis says they are not enough.
func decideAdmission(d *Decision, report *diagnose.Report, opts RecoverOptions) error {
	if report.Verdict == diagnose.Unknown && !report.AdmissionEvidence() && !report.Suspected && !opts.PluginsExplicit {
		hints := append(slices.Clone(report.Next), "if you know it is an admission deadlock, name the plugins: breakglass recover --plugins ValidatingAdmissionWebhook[,MutatingAdmissionWebhook]")
		return &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary, Next: hints}
	}
	runbookPlugins := disablePlugins(opts.Steps)
	a := &AdmissionDecision{}
	d.Of = a
	if opts.PluginsExplicit {
		a.Plugins = runbookPlugins
		d.Reasons = append(d.Reasons, "--plugins "+strings.Join(runbookPlugins, ",")+": named on the command line")
		if missing := without(report.PluginNames(), runbookPlugins); len(missing) > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("the diagnosis says %s must be off too (%s): with --plugins %s the API server may stay down",
				strings.Join(missing, ","), reasonsOf(report, missing), strings.Join(runbookPlugins, ",")))
		}
	} else {
		a.Plugins = union(runbookPlugins, report.PluginNames())
		// A diagnosis that read every admission object in etcd names every
		// plugin that blocks the start-up (the log, and the audit of etcd):
		// the runbook's default beyond them would bypass webhooks or
		// policies for nothing.
		if report.Verdict == diagnose.AdmissionDeadlock && readEveryAdmissionObject(report) && !opts.RunbookExplicit && len(report.PluginNames()) > 0 {
			a.Plugins = report.PluginNames()
			if left := without(runbookPlugins, a.Plugins); len(left) > 0 {
				d.Reasons = append(d.Reasons, strings.Join(left, ",")+" (the runbook's default) stays on: the diagnosis finds nothing it would bypass")
			}
		}
		for _, p := range a.Plugins {
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
		d.Warnings = append(d.Warnings, "readiness could not be checked: going on because "+unknownGround(report))
	}
	return nil
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

func unknownGround(report *diagnose.Report) string {
	switch {
	case report.AdmissionEvidence():
		return "the log shows admission refusing writes"
	case report.Suspected:
		return "start-up is stuck and etcd holds admission objects that can block it"
	}
	return "--plugins was given"
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

// adviseAdmission: plugins left off on purpose, and how to keep the next
// upgrade from deadlocking (whether or not this run got that far).
func adviseAdmission(r *run, _ *Decision, _ error) []string {
	var out []string
	if r.opts.KeepDisabled {
		out = append(out, "admission plugins are still disabled (--keep-disabled): put them back with: "+r.target.NodesCmd("admission restore"))
	}
	return append(out, "prevent a repeat: "+r.target.NodesCmd("audit --from-etcd --fix"))
}
