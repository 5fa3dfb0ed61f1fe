package recovery

// What a diagnosis of kube-apiserver refusing its own flags decides for
// the run: the flags to take out of cluster.apiServer.extraArgs, and the
// runbook that does it (apiserver-flags) in place of an admission one.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos/configedit"
)

// decideFlags is decide for the verdict flags-refused.
func decideFlags(report *diagnose.Report, opts RecoverOptions) (*Decision, error) {
	d, err := followRunbook(report, opts, hasAction(opts.Steps, runbooks.ActionExtraArgsRemove),
		"turns admission plugins off, which cannot start a kube-apiserver that refuses its own flags",
		"turning admission plugins off cannot start a kube-apiserver that refuses its command line")
	if err != nil {
		return d, err
	}
	for _, f := range report.Flags {
		d.Flags = append(d.Flags, flagOf(f))
		d.Reasons = append(d.Reasons, fmt.Sprintf("%s on %s: kube-apiserver says %q", f.Subject(), strings.Join(f.Nodes, ", "), f.Refusal))
	}
	if named := flagsNamed(opts.Steps); len(named) > 0 {
		if missing := without(d.Flags, named); len(missing) > 0 {
			d.Warnings = append(d.Warnings, fmt.Sprintf("the runbook names %s; the diagnosis also finds %s refused: kube-apiserver may stay down", strings.Join(named, ", "), strings.Join(missing, ", ")))
		}
		d.Flags = named
	}
	if len(d.Flags) == 0 {
		return d, &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary + " (but none of them can be named for an edit)", Next: report.Next}
	}
	return d, nil
}

// followRunbook starts the decision of a diagnosis that names another
// runbook than an admission one (report.Runbook): a run whose steps fit
// (fits) keeps them; one told its runbook explicitly stops before any
// change (it "does" what cannot help); any other follows the named
// runbook's steps after diagnose, saying why.
func followRunbook(report *diagnose.Report, opts RecoverOptions, fits bool, does, why string) (*Decision, error) {
	d := &Decision{Verdict: string(report.Verdict), Runbook: report.Runbook}
	if fits {
		return d, nil
	}
	if opts.RunbookExplicit {
		return d, wrongRunbook(report, fmt.Sprintf("runbook %s %s", opts.Runbook, does))
	}
	rb, err := runbooks.Get(report.Runbook)
	if err != nil {
		return d, err
	}
	d.Steps = StepsOf(rb)
	d.Reasons = append(d.Reasons, fmt.Sprintf("the diagnosis names runbook %s: the steps after diagnose are its own (%s), not those of %s: %s",
		rb.Metadata.Name, strings.Join(stepNames(d.Steps, "diagnose"), ", "), opts.Runbook, why))
	return d, nil
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

// removalsOf turns KEY[:ITEM] flags into configedit removals, key by key.
func removalsOf(flags []string) ([]configedit.ArgRemoval, error) {
	var out []configedit.ArgRemoval
	for _, fl := range flags {
		key, item, err := runbooks.ParseExtraArgFlag(fl)
		if err != nil {
			return nil, failure.Input("name a whole key (cloud-provider) or KEY:ITEM (feature-gates:MultiCIDRServiceAllocator=false)", "%v", err)
		}
		i := slices.IndexFunc(out, func(r configedit.ArgRemoval) bool { return r.Key == key })
		switch {
		case i < 0 && item == "":
			out = append(out, configedit.ArgRemoval{Key: key})
		case i < 0:
			out = append(out, configedit.ArgRemoval{Key: key, Items: []string{item}})
		case item == "" || len(out[i].Items) == 0:
			out[i].Items = nil // the whole key goes anyway
		default:
			out[i].Items = append(out[i].Items, item)
		}
	}
	return out, nil
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

func hasAction(steps []Step, a runbooks.Action) bool {
	return slices.ContainsFunc(steps, func(s Step) bool { return s.Params.Action() == a })
}

// stepNames are the names of the steps after the one named from.
func stepNames(steps []Step, from string) []string {
	var out []string
	after := false
	for _, s := range steps {
		if after {
			out = append(out, s.Name)
		}
		after = after || s.Name == from
	}
	return out
}

// followDecision switches the run to the decision's steps after the
// diagnose step, when the diagnosis named another runbook's: at once, and
// on resume (the decision is journaled with the diagnose step). It says
// whether it switched.
func (r *run) followDecision() bool {
	if r.decision == nil || len(r.decision.Steps) == 0 {
		return false
	}
	isDiagnose := func(s Step) bool { return s.Params.Action() == runbooks.ActionDiagnose }
	i, j := slices.IndexFunc(r.opts.Steps, isDiagnose), slices.IndexFunc(r.decision.Steps, isDiagnose)
	if i < 0 || j < 0 {
		return false
	}
	r.opts.Steps = append(slices.Clone(r.opts.Steps[:i+1]), r.decision.Steps[j+1:]...)
	return true
}

// flagsPlanText is the decision's plan in one line.
func (d *Decision) flagsPlanText() string {
	return "take out of cluster.apiServer.extraArgs: " + strings.Join(d.Flags, ", ")
}
