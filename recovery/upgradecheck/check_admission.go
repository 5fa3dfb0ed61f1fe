package upgradecheck

// admission: no webhook or policy can block the target's start-up writes.

import (
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

var admissionCheck = &checkDef{
	ID:    CheckAdmission,
	Title: "admission against the target's start-up writes",
	Help: "every webhook, admission policy and binding in etcd, and in the static manifests the machine configs load " +
		"(1.36+), against the writes the target makes at its first start after from, recorded from the real binaries " +
		"for that pair",
	NoGo: "a webhook, admission policy or binding in etcd, or in a static manifest of the machine configs (KEP-5793: `admissionControl`'s `staticManifestsDir`, `machine.files`), " +
		"can block a write the target makes at its first start after from (recorded from the real binaries for that pair, `internal/startupwrites`), or it cannot be decided offline",
	Warn:  "it can slow the start; a `staticManifestsDir` whose files the machine config does not hold",
	Fix:   "exclude kube-apiserver's own writes from each: breakglass audit --from-etcd --fix (the matchCondition request.userInfo.username != 'system:apiserver'), then kubectl apply",
	Needs: []need{needTalosAPI, needControlPlane, needEtcdKeys, needConfigs, needAuditablePath},
	Judge: judgeAdmission,
}

func judgeAdmission(f *facts, o *Options) Check {
	var c Check
	switch {
	case f.gatherErr != nil:
		return unread("the admission objects in etcd could not be read", f.gatherErr)
	case f.auditErr != nil:
		return unread("the audit failed", f.auditErr)
	case f.admission == nil:
		return notChecked(c, "the admission objects were not audited")
	}
	rep := f.admission
	objects := len(f.gathered.Configurations) + len(f.gathered.Unreadable)
	writes := fmt.Sprintf("the writes %s makes at its first start after %s", rep.ToVersion, rep.FromVersion)
	if f.recorded != nil {
		writes += fmt.Sprintf(" (%d, recorded from %s -> %s)", len(f.recorded.Writes), f.recorded.From, f.recorded.To)
	} else {
		writes += " (modelled: this pair was not recorded)"
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%d webhook configuration(s), admission policie(s) and binding(s) in etcd and in static manifests, against %s", objects, writes))
	if len(f.staticFiles) > 0 {
		c.Evidence = append(c.Evidence, "static admission manifests (machine.files, loaded by kube-apiserver from its staticManifestsDir): "+strings.Join(f.staticFiles, ", "))
	}
	var bad []string
	inEtcd, static := false, false
	for _, fd := range rep.Findings {
		if fd.Risk == audit.RiskNone {
			continue
		}
		bad = append(bad, findingName(fd))
		c.Evidence = append(c.Evidence, findingLine(fd))
		if isStatic(fd.Configuration) {
			static = true
		} else {
			inEtcd = true
		}
	}
	var fixes []string
	if inEtcd || !static {
		fixes = append(fixes, fmt.Sprintf("breakglass %saudit --from-etcd --fix --from %s --to %s > fixed.yaml (adds the matchCondition %s to each), then kubectl apply -f fixed.yaml",
			contextFlag(f), rep.FromVersion, rep.ToVersion, audit.ExcludeAPIServerExpression))
	}
	if static {
		fixes = append(fixes, fmt.Sprintf("the static manifests (*.static.k8s.io) are files in the machine configs' machine.files: add the matchCondition %s to each there (breakglass audit -f FILE --fix prints it), and apply the configs; kubectl cannot change them",
			audit.ExcludeAPIServerExpression))
	}
	fix := strings.Join(fixes, "; and ")
	switch rep.Risk {
	case audit.RiskDeadlock:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("%s would stop kube-apiserver %s's start (webhook backends assumed down, as when they run in the cluster): %s", plural(rep.Count(audit.RiskDeadlock), "webhook or policy", "webhooks or policies"), rep.ToVersion, strings.Join(firstN(bad, 3), ", "))
		c.Fix = []string{fix}
		for _, fd := range rep.Findings {
			if fd.Risk == audit.RiskDeadlock && fd.Binding != "" {
				c.Fix = append(c.Fix, "or, for a policy nothing needs, delete its binding")
				break
			}
		}
	case audit.RiskUnknown:
		c.Verdict, c.undecided = NoGo, true
		c.Summary = fmt.Sprintf("whether %s can block %s's start cannot be decided offline (a condition on what the audit cannot model, or an unreadable object): treated as a no-go; --replay decides it on the real binary", strings.Join(firstN(bad, 3), ", "), rep.ToVersion)
		c.Fix = []string{fix, "or replay the upgrade: breakglass upgrade-check --to " + rep.ToVersion + " --replay"}
	case audit.RiskSlowStart:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("%s can slow kube-apiserver %s's start (fail-open with a long timeout): %s", plural(rep.Count(audit.RiskSlowStart), "webhook", "webhooks"), rep.ToVersion, strings.Join(firstN(bad, 3), ", "))
		c.Fix = []string{fix}
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("no webhook or admission policy can block %s", writes)
	}
	if len(f.staticUnseen) > 0 {
		c.Evidence = append(c.Evidence, "static manifests not in the machine config, not audited: "+strings.Join(f.staticUnseen, ", "))
		if c.Verdict == Go {
			c.Verdict = Warn
			c.Summary = "the static admission manifests of " + strings.Join(f.staticUnseen, ", ") + " are not in the machine config (machine.files): not audited; audit them with breakglass audit -f FILE"
		}
	}
	return c
}

// findingName names an audit finding: the configuration and webhook, or
// the policy and binding.
func findingName(fd audit.Finding) string {
	switch {
	case fd.ObjectKind == "":
		return termsafe.String(fd.Configuration) + "/" + termsafe.String(fd.Webhook)
	case fd.Binding == "":
		return fd.ObjectKind + " " + termsafe.String(fd.Configuration)
	}
	return fd.ObjectKind + " " + termsafe.String(fd.Configuration) + " (binding " + termsafe.String(fd.Binding) + ")"
}

// findingLine is a finding as evidence: its risk, what it rejects, and
// the hooks that fail.
func findingLine(fd audit.Finding) string {
	var fatal []string
	hooks := map[string]bool{}
	var hookList []string
	for _, b := range fd.Blocks {
		if !b.Fatal || b.Outcome == audit.OutcomeUnknown && fd.Risk != audit.RiskUnknown {
			continue
		}
		fatal = append(fatal, b.Request)
		if !hooks[b.Hook] {
			hooks[b.Hook] = true
			hookList = append(hookList, b.Hook)
		}
	}
	line := fmt.Sprintf("%s: %s", fd.Risk, findingName(fd))
	if fd.FailurePolicy != "" {
		line += " (failurePolicy " + fd.FailurePolicy + ")"
	}
	if len(fatal) > 0 {
		line += fmt.Sprintf(": %s", strings.Join(firstN(fatal, 2), ", "))
	}
	if len(hookList) > 0 {
		line += "; kube-apiserver fails " + strings.Join(hookList, ", ")
	}
	if len(fd.Reasons) > 0 && len(fatal) == 0 {
		line += ": " + termsafe.Text(strings.Join(fd.Reasons, "; "))
	}
	return line
}
