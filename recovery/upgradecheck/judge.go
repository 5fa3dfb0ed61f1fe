package upgradecheck

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/talos"
)

// judge turns the facts into one verdict per check, in checkOrder.
func judge(f *facts, o *Options) []Check {
	out := []Check{judgeAccess(f)}
	blocked := func(id, why string) Check {
		return Check{ID: id, Title: Title(id), Verdict: NoGo, NotChecked: true, Summary: "not checked: " + why}
	}
	talosDown := f.talosErr != nil || len(answered(f.nodes)) == 0
	if talosDown {
		why := "the cluster's Talos API was not reached"
		for _, id := range checkOrder[1:] {
			if id == CheckReplay && o.Replay == nil || id == CheckRollbackPoint && f.snapshot == nil && o.Snapshot == "" && len(o.LastSnapshots) == 0 {
				continue
			}
			out = append(out, blocked(id, why))
		}
		return out
	}
	out = append(out, judgeUpgradePath(f), judgeTalosSupport(f))
	noCP := len(controlPlanes(f.nodes)) == 0
	switch {
	case noCP:
		why := "no control plane's machine config was read"
		out = append(out, blocked(CheckAdmission, why), blocked(CheckAPIServerFlags, why), blocked(CheckEtcdMembers, why),
			blocked(CheckEtcdAlarms, why), blocked(CheckEtcdSpace, why), blocked(CheckStoredVersions, why))
	default:
		out = append(out, judgeAdmission(f, o), judgeFlags(f), judgeMembers(f), judgeAlarms(f), judgeSpace(f), judgeStored(f))
	}
	out = append(out, judgeRollback(f, o))
	if o.Replay != nil {
		out = append(out, judgeReplay(f))
		settleByReplay(out)
	}
	return out
}

// etcdUnread says why etcd's keys were not read ("" when they were).
func (f *facts) etcdUnread() string {
	switch {
	case f.etcdErr != nil:
		return "etcd was not reached (see access)"
	case f.quorumLost:
		return "etcd has lost its quorum, and serves no read of its keys (see etcd-members)"
	}
	return ""
}

// configsUnread names the control planes whose machine config was not read.
func configsUnread(f *facts) []string {
	var out []string
	for _, n := range controlPlanes(f.nodes) {
		if n.Config == nil {
			out = append(out, n.label())
		}
	}
	return out
}

// answered are the nodes whose Talos API answered.
func answered(ns []*nodeFacts) []*nodeFacts {
	var out []*nodeFacts
	for _, n := range ns {
		if n.TalosErr == nil {
			out = append(out, n)
		}
	}
	return out
}

func controlPlanes(ns []*nodeFacts) []*nodeFacts {
	var out []*nodeFacts
	for _, n := range ns {
		if n.ControlPlane {
			out = append(out, n)
		}
	}
	return out
}

// errLine is an error for one line of evidence, safe for a terminal.
func errLine(err error) string { return termsafe.Text(err.Error()) }

// hintsOf are an error's hints, as fix lines.
func hintsOf(err error) []string {
	var out []string
	for _, h := range failure.Hints(err) {
		out = append(out, termsafe.Text(h))
	}
	return out
}

func judgeAccess(f *facts) Check {
	c := Check{ID: CheckAccess, Title: Title(CheckAccess)}
	if f.talosErr != nil {
		c.Verdict, c.Summary = NoGo, "cannot use the talosconfig context: "+errLine(f.talosErr)
		c.Fix = hintsOf(f.talosErr)
		return c
	}
	var down, noConfig []string
	found := 0
	for _, n := range f.nodes {
		who := "node " + n.Addr
		if n.Found != foundByContext {
			who += " (not in the talosconfig context: " + n.Found + ")"
			found++
		}
		switch {
		case n.TalosErr != nil:
			down = append(down, n.Addr)
			c.Evidence = append(c.Evidence, who+": "+errLine(n.TalosErr))
			c.Fix = appendNew(c.Fix, hintsOf(n.TalosErr)...)
		case n.ConfigErr != nil:
			noConfig = append(noConfig, n.Addr)
			c.Evidence = append(c.Evidence, who+" (Talos "+n.Talos+"): its machine config: "+errLine(n.ConfigErr))
			c.Fix = appendNew(c.Fix, hintsOf(n.ConfigErr)...)
		default:
			role := "worker"
			if n.ControlPlane {
				role = "control plane, kube-apiserver " + orUnknown(imageTag(n.Image))
			}
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: Talos %s, %s", who, n.Talos, role))
		}
	}
	c.Evidence = append(c.Evidence, f.etcdEvidence()...)
	cps := controlPlanes(f.nodes)
	switch {
	case len(down) == len(f.nodes):
		c.Verdict, c.Summary = NoGo, fmt.Sprintf("the Talos API did not answer for any node (%s)", strings.Join(down, ", "))
		return c
	case len(down) > 0:
		c.Verdict, c.Summary = NoGo, fmt.Sprintf("node(s) %s did not answer: the gate reads every control plane, and talosctl upgrade-k8s needs every node", strings.Join(down, ", "))
	case len(noConfig) > 0:
		c.Verdict, c.Summary = NoGo, fmt.Sprintf("the machine configs of %s could not be read: the gate reads them (os:admin) for the flags, the running version and etcd's CA", strings.Join(noConfig, ", "))
		if f.role != "" && f.role != "os:admin" {
			c.Fix = appendNew(c.Fix, "this talosconfig has role "+f.role+": use an os:admin talosconfig (--talosconfig PATH)")
		}
	case len(cps) == 0:
		c.Verdict, c.Summary = NoGo, "no control plane among the nodes, and Talos discovery named none: name one with -n CP (or in the talosconfig context)"
		return c
	case f.etcdErr != nil:
		c.Verdict, c.Summary = NoGo, "etcd not reached: "+errLine(f.etcdErr)
		c.Fix = appendNew(c.Fix, hintsOf(f.etcdErr)...)
	case f.quorumLost:
		c.Verdict, c.Summary = NoGo, "etcd answers, but has lost its quorum: none of its keys can be read (see etcd-members)"
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("%d node(s) answered (%d control plane(s)); etcd reached with a client certificate", len(f.nodes), len(cps))
		if found > 0 {
			c.Summary = fmt.Sprintf("%d node(s) answered: the %d control plane(s) of the cluster's membership, %d of them not in the talosconfig context; etcd reached with a client certificate", len(f.nodes), len(cps), found)
		}
	}
	if f.timedOut {
		c.Verdict = NoGo
		c.Summary = "the check of this cluster ran out of time (--cluster-timeout) before it read everything; " + c.Summary
	}
	return c
}

// etcdEvidence says which etcd was reached, so that a person can tell
// it is the cluster's, and whether the Talos API vouched for it.
func (f *facts) etcdEvidence() []string {
	if f.etcdReached == nil {
		return nil
	}
	var listed []etcd.ID
	for _, m := range f.etcdMembers {
		listed = append(listed, m.ID)
	}
	line := fmt.Sprintf("etcd reached: cluster %s, through member %s, listing members %s", f.etcdReached.ClusterID, f.etcdReached.MemberID, idList(listed))
	if f.members == nil && !slices.ContainsFunc(f.nodes, func(n *nodeFacts) bool { return n.Etcd != nil }) {
		line += " (the Talos API reported no member to compare them with: tell by these that it is this cluster's)"
	}
	return []string{line}
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

func orUnknown(s string) string {
	if s == "" {
		return "(no image tag)"
	}
	return s
}

func judgeUpgradePath(f *facts) Check {
	c := Check{ID: CheckUpgradePath, Title: Title(CheckUpgradePath)}
	to := f.to.String()
	var minors []Minor
	for _, n := range controlPlanes(f.nodes) {
		c.Evidence = append(c.Evidence, fmt.Sprintf("node %s runs kube-apiserver %s", n.Addr, orUnknown(imageTag(n.Image))))
		if n.Minor != 0 && !slices.Contains(minors, n.Minor) {
			minors = append(minors, n.Minor)
		}
	}
	if f.fromGiven != 0 {
		c.Evidence = append(c.Evidence, "upgraded from "+f.from.String()+" ("+f.fromEvidence+"); --from "+f.fromGiven.String())
	}
	switch {
	case f.fromGiven != 0 && f.imagesFrom != 0 && f.fromGiven != f.imagesFrom:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("--from %s contradicts what the control planes run: %s", f.fromGiven, f.fromEvidence)
		c.Fix = []string{"leave --from out (the gate reads the version from the images, as talosctl upgrade-k8s does), or check it against the cluster you meant: talosctl " + contextFlag(f) + "get staticpods -o yaml"}
		return c
	case f.from == 0:
		c.Verdict, c.Summary = NoGo, "cannot tell the version the control planes run (their kube-apiserver images have no tag)"
		c.Fix = []string{"name it: --from 1.NN"}
		return c
	case !f.from.Known():
		c.Verdict, c.Summary = NoGo, fmt.Sprintf("%s is outside what breakglass knows (%s to %s): its flags and start-up writes were never recorded", f.from, MinKnown, MaxKnown)
		return c
	case f.to < f.from:
		c.Verdict, c.Summary = NoGo, fmt.Sprintf("%s -> %s is a downgrade, which kube-apiserver does not support", f.from, to)
		c.Fix = []string{"restore the etcd snapshot taken before the upgrade instead (talosctl bootstrap --recover-from)"}
		return c
	case f.to > f.from+1:
		skipped := (f.from + 1).String()
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("%s -> %s skips %s: kube-apiserver upgrades one minor at a time, and talosctl upgrade-k8s refuses the path", f.from, to, skipped)
		c.Fix = []string{"upgrade to " + skipped + " first: breakglass upgrade-check --to " + skipped + ", then talosctl upgrade-k8s --to " + skipped + ".x; then this upgrade"}
	case f.to == f.from:
		c.Verdict, c.Summary = Go, "a patch upgrade within "+to
	default:
		c.Verdict, c.Summary = Go, fmt.Sprintf("%s -> %s: one minor, as talosctl upgrade-k8s requires", f.from, to)
	}
	if len(minors) > 1 {
		slices.Sort(minors)
		c.Verdict = worse(c.Verdict, Warn)
		c.Summary += fmt.Sprintf("; the control planes run different minors (%s): a previous upgrade did not finish", joinMinors(minors))
		c.Fix = appendNew(c.Fix, "find out why the last upgrade stopped (talosctl upgrade-k8s --dry-run shows what it would still do) before going on")
	}
	if f.recorded != nil {
		c.Evidence = append(c.Evidence, fmt.Sprintf("what %s writes at start after %s was recorded from the real binaries (%s -> %s)", to, f.from, f.recorded.From, f.recorded.To))
	} else if f.to > f.from {
		c.Evidence = append(c.Evidence, fmt.Sprintf("no recording of %s -> %s: the admission check uses the model", f.from, to))
	}
	return c
}

func joinMinors(ms []Minor) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.String())
	}
	return strings.Join(s, ", ")
}

// talosMinorsFor are the Talos minors of the table that run kubernetes.
func talosMinorsFor(kubernetes string) []string {
	var out []string
	for m := 9; m <= 30; m++ {
		s, err := talos.SupportsKubernetes(fmt.Sprintf("v1.%d.0", m), kubernetes)
		if err == nil && s.Supported {
			out = append(out, fmt.Sprintf("1.%d", m))
		}
	}
	return out
}

func judgeTalosSupport(f *facts) Check {
	c := Check{ID: CheckTalosSupport, Title: Title(CheckTalosSupport), Verdict: Go}
	to := f.to.String()
	type row struct{ who, version, how string }
	var rows []row
	asked := map[string]bool{}
	for _, n := range answered(f.nodes) {
		rows = append(rows, row{"node " + n.Addr, n.Talos, "its Talos API"})
		asked[n.Addr] = true
	}
	for _, n := range f.kubeNodes {
		if asked[n.InternalIP] || n.TalosVersion() == "" {
			continue
		}
		rows = append(rows, row{"node " + termsafe.String(n.Name) + " (" + termsafe.String(n.InternalIP) + ")", n.TalosVersion(), "its kubelet's OS image in etcd"})
	}
	var refused, unknown []string
	for _, r := range rows {
		s, err := talos.SupportsKubernetes(r.version, to)
		switch {
		case err != nil:
			unknown = append(unknown, r.who)
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: Talos %q (%s): %s", r.who, termsafe.String(r.version), r.how, errLine(err)))
		case !s.Known:
			unknown = append(unknown, r.who)
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: Talos %s (%s) is newer than this breakglass's support table (Talos %s): not checked", r.who, r.version, r.how, talos.NewestTalosInTable()))
		case !s.Supported:
			refused = append(refused, r.who)
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: Talos %s (%s) runs Kubernetes %s to %s, not %s", r.who, r.version, r.how, s.Min, s.Max, to))
		default:
			c.Evidence = append(c.Evidence, fmt.Sprintf("%s: Talos %s (%s) runs Kubernetes %s to %s", r.who, r.version, r.how, s.Min, s.Max))
		}
	}
	kubelets, skew := kubeletSkew(f)
	c.Evidence = append(c.Evidence, kubelets...)
	kubeletsUnread := ""
	switch {
	case f.etcdUnread() != "":
		kubeletsUnread = f.etcdUnread()
	case f.usage == nil && f.usageErr != nil:
		kubeletsUnread = "etcd's keys could not be read: " + errLine(f.usageErr)
	case f.usage == nil:
		kubeletsUnread = "etcd's keys were not read"
	}
	switch {
	case len(refused) > 0:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("Talos on %s does not run Kubernetes %s (Talos's support matrix, which talosctl upgrade-k8s checks too)", strings.Join(refused, ", "), to)
		if ms := talosMinorsFor(to); len(ms) > 0 {
			c.Fix = append(c.Fix, fmt.Sprintf("upgrade Talos on those nodes first, to %s (talosctl upgrade --image ghcr.io/siderolabs/installer:v%s.x, one node at a time)", strings.Join(ms, " or "), ms[0]))
		} else {
			c.Fix = append(c.Fix, "no Talos this breakglass knows runs "+to)
		}
	case len(skew) > 0:
		c.Verdict = NoGo
		c.Summary = strings.Join(skew, "; ")
		c.Fix = append(c.Fix, "upgrade (or drain and remove) those nodes' kubelets first: kubelets may be up to three minors older than kube-apiserver, never newer")
	case kubeletsUnread != "":
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("the kubelets' versions were not read (the Node objects are in etcd): %s", kubeletsUnread)
	case len(unknown) > 0:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("the Talos version of %s is not in this breakglass's table: check it at talos.dev/latest/introduction/support-matrix/", strings.Join(unknown, ", "))
	default:
		c.Summary = fmt.Sprintf("Talos on every node runs Kubernetes %s; kubelets within the skew kube-apiserver %s allows", to, to)
		if len(rows) == 0 {
			c.Summary = "no node's Talos version was read"
			c.Verdict = NoGo
		}
	}
	return c
}

// kubeletSkew says the kubelets' versions (from the Node objects in etcd)
// and which break the skew policy for the target: a kubelet may be up to
// three minors older than kube-apiserver (from 1.28), never newer.
func kubeletSkew(f *facts) (evidence, problems []string) {
	if len(f.kubeNodes) == 0 {
		if f.usage != nil {
			evidence = append(evidence, "no Node object in etcd: no kubelet has registered")
		}
		return evidence, nil
	}
	byVersion := map[string][]string{}
	for _, n := range f.kubeNodes {
		byVersion[n.KubeletVersion] = append(byVersion[n.KubeletVersion], termsafe.String(n.Name))
	}
	versions := make([]string, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		names := byVersion[v]
		evidence = append(evidence, fmt.Sprintf("kubelet %s on %d node(s): %s", orUnknown(termsafe.String(v)), len(names), firstFew(names, 5)))
		m, err := minorOf(v)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%d kubelet(s) report no readable version (%s)", len(names), firstFew(names, 3)))
		case m > f.to:
			problems = append(problems, fmt.Sprintf("kubelet %s on %s is newer than kube-apiserver %s", v, firstFew(names, 3), f.to))
		case m < f.to-3:
			problems = append(problems, fmt.Sprintf("kubelet %s on %s is more than three minors older than %s", v, firstFew(names, 3), f.to))
		}
	}
	return evidence, problems
}

func firstFew(names []string, n int) string {
	sort.Strings(names)
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

// contextFlag is how a printed command names the cluster.
func contextFlag(f *facts) string {
	if f.cluster == "" {
		return ""
	}
	return "--context " + f.cluster + " "
}

func judgeAdmission(f *facts, o *Options) Check {
	c := Check{ID: CheckAdmission, Title: Title(CheckAdmission)}
	switch {
	case f.etcdUnread() != "":
		return notChecked(c, f.etcdUnread())
	case len(configsUnread(f)) > 0:
		return notChecked(c, "the static admission manifests of "+strings.Join(configsUnread(f), ", ")+" were not read: their machine configs could not be (see access)")
	case f.gatherErr != nil:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "the admission objects in etcd could not be read: "+errLine(f.gatherErr)
		c.Fix = hintsOf(f.gatherErr)
		return c
	case f.auditErr != nil:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "the audit failed: "+errLine(f.auditErr)
		return c
	case f.admission == nil:
		return notChecked(c, "the upgrade path is not one breakglass can audit (see upgrade-path)")
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

func notChecked(c Check, why string) Check {
	c.Verdict, c.NotChecked, c.Summary = NoGo, true, "not checked: "+why
	return c
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string(nil), s[:n]...), fmt.Sprintf("and %d more", len(s)-n))
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

func judgeFlags(f *facts) Check {
	c := Check{ID: CheckAPIServerFlags, Title: Title(CheckAPIServerFlags)}
	switch {
	case len(configsUnread(f)) > 0:
		return notChecked(c, "the extraArgs of "+strings.Join(configsUnread(f), ", ")+" were not read: their machine configs could not be (see access)")
	case f.gatherErr != nil:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "the machine configs' extraArgs could not be read: "+errLine(f.gatherErr)
		return c
	case f.argsErr != nil:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "the flags could not be checked: "+errLine(f.argsErr)
		return c
	case f.args == nil:
		return notChecked(c, "the upgrade path is not one breakglass can check (see upgrade-path)")
	}
	to := f.to.String()
	rec, _ := apiserverargs.For(to)
	binary := "kube-apiserver " + to
	if rec != nil {
		binary = "kube-apiserver " + rec.Version
	}
	cps := controlPlanes(f.nodes)
	verdict := Go
	var refused []string
	for _, a := range f.args {
		line := fmt.Sprintf("node %s: %s: %s says %q", termsafe.String(a.Source), termsafe.String(a.Subject()), binary, termsafe.Text(orAccepted(a.OnTo)))
		c.Evidence = append(c.Evidence, line)
		switch a.Risk {
		case audit.RiskDeadlock:
			verdict = NoGo
			refused = appendNew(refused, termsafe.String(a.Subject()))
			c.Fix = appendNew(c.Fix, patchCommand(f, a))
		case audit.RiskUnknown, audit.RiskWarning:
			verdict = worse(verdict, Warn)
		}
	}
	c.Verdict = verdict
	switch verdict {
	case NoGo:
		c.Summary = fmt.Sprintf("%s refuses %s at start and exits at once, on every start (CrashLoopBackOff)", binary, strings.Join(firstN(refused, 3), ", "))
		c.Fix = append(c.Fix, "and make the same change where the machine configs come from (Omni cluster template, talhelper's talconfig.yaml, Terraform's config_patches, patch files), or the next apply brings the flag back")
	case Warn:
		c.Summary = fmt.Sprintf("%s accepts every flag, with warnings (deprecated or GA items that will go)", binary)
	default:
		c.Summary = fmt.Sprintf("%s accepts every extraArgs key, feature gate and runtime-config entry of the %d control plane(s)", binary, len(cps))
		if len(f.gathered.ExtraArgs) > 0 {
			n := 0
			for _, ea := range f.gathered.ExtraArgs {
				n += len(ea.Args)
			}
			if n == 0 {
				c.Summary = "no control plane sets cluster.apiServer.extraArgs"
			}
		}
	}
	return c
}

func orAccepted(s string) string {
	if s == "" {
		return "accepted"
	}
	return s
}

// patchCommand is the talosctl command that takes a refused flag out of
// a node's cluster.apiServer.extraArgs without a reboot: a strategic
// merge patch (the only kind talosctl applies to the multi-document
// configs Talos generates), "$patch: delete" for a key that goes; a
// list-valued key is deleted and set again (a merge appends to a list).
func patchCommand(f *facts, a audit.ArgFinding) string {
	set := func(v any) string {
		b, _ := json.Marshal(map[string]any{"cluster": map[string]any{"apiServer": map[string]any{"extraArgs": map[string]any{a.Flag: v}}}})
		return " -p '" + strings.ReplaceAll(string(b), "'", `'\''`) + "'"
	}
	del := set(map[string]string{"$patch": "delete"})
	cmd := fmt.Sprintf("talosctl %s-n %s patch machineconfig --mode=no-reboot", contextFlag(f), termsafe.String(a.Source))
	switch {
	case a.RemoveKey || a.Item == "":
		return cmd + del
	case isList(f, a):
		return cmd + del + set(flaglist.Split(a.FixedValue))
	}
	return cmd + set(a.FixedValue)
}

// isList tells whether the node's value of the key is a list (Talos 1.13+).
func isList(f *facts, a audit.ArgFinding) bool {
	if f.gathered == nil {
		return false
	}
	for _, ea := range f.gathered.ExtraArgs {
		if ea.Source != a.Source {
			continue
		}
		for _, arg := range ea.Args {
			if arg.Key == a.Flag {
				return arg.List
			}
		}
	}
	return false
}

// judgeMembers counts etcd's margin on the control planes: over the
// voting members, healthy voters minus quorum, where a control plane
// without a voting member, a learner and a member down each count as not
// healthy. No margin with three or more control planes is a no-go; two
// cannot lose either by design (a warning); one is the cluster.
func judgeMembers(f *facts) Check {
	c := Check{ID: CheckEtcdMembers, Title: Title(CheckEtcdMembers)}
	if f.members == nil {
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "the etcd member list could not be read: "+errLine(f.membersErr)
		c.Fix = hintsOf(f.membersErr)
		if f.quorumLost {
			c.NotChecked, c.Summary = false, "etcd has lost quorum: "+f.quorumWhy
			c.Fix = []string{quorumFix(f)}
		}
		return c
	}
	c.Evidence = append(c.Evidence, "the members as "+f.membersFrom+" lists them")
	voting, healthy := 0, 0
	var notHealthy []string
	leaders := map[etcd.ID]bool{}
	for _, m := range f.members {
		name := memberName(m)
		if m.Node == "" {
			name += " (on no control plane read)"
		} else {
			name += " on " + m.Node
		}
		if m.Learner {
			notHealthy = append(notHealthy, name+" is a learner, not voting yet")
			c.Evidence = append(c.Evidence, name+": a learner (not voting yet)")
			continue
		}
		voting++
		if problems := memberProblems(m); len(problems) > 0 {
			notHealthy = append(notHealthy, name+" is down")
			c.Evidence = append(c.Evidence, name+": "+strings.Join(problems, "; "))
			continue
		}
		healthy++
		leaders[m.Status.Leader] = true
		role := "follower"
		if m.Status.IsLeader {
			role = "leader"
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s: healthy, %s, etcd %s, raft term %d", name, role, m.Status.Version, m.Status.RaftTerm))
	}
	cps := controlPlanes(f.nodes)
	seats := len(cps) // the control planes: those read, and members on none of them
	for _, n := range cps {
		if n.Member == nil {
			notHealthy = append(notHealthy, "control plane "+n.label()+" has no etcd member")
			c.Evidence = append(c.Evidence, "control plane "+n.label()+": no etcd member runs there")
		}
	}
	for _, m := range f.members {
		if m.Node == "" {
			seats++
		}
	}
	disagree := append(append([]string(nil), f.disagree...), f.nodeObjectsDisagree()...)
	c.Evidence = append(c.Evidence, disagree...)
	quorum := voting/2 + 1
	margin := healthy - quorum
	c.Evidence = append(c.Evidence, fmt.Sprintf("%d control plane(s), %d voting member(s), %d healthy, quorum %d, margin %d", seats, voting, healthy, quorum, margin))
	switch {
	case voting == 0:
		c.Verdict, c.Summary = NoGo, "etcd lists no voting member"
	case healthy < quorum:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("etcd has lost quorum: %d of %d voting members healthy (%s)", healthy, voting, strings.Join(notHealthy, "; "))
		c.Fix = []string{quorumFix(f)}
	case len(leaders) > 1:
		c.Verdict, c.Summary = NoGo, "the members disagree on the leader: etcd is electing, or split"
	case seats >= 3 && margin <= 0:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("no margin: %d of %d control planes have a healthy voting member, and etcd needs %d: one more failure during the upgrade stops it (%s)", healthy, seats, quorum, strings.Join(notHealthy, "; "))
		c.Fix = memberFixes(f, notHealthy)
	case seats == 2 && len(notHealthy) > 0:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("two control planes, not both healthy voting members: %s", strings.Join(notHealthy, "; "))
		c.Fix = memberFixes(f, notHealthy)
	case seats == 2:
		c.Verdict = Warn
		c.Summary = "two control planes, both healthy voting members: etcd cannot lose either during the upgrade (two members have no margin, by design, not a fault)"
		c.Fix = []string{"a third control plane gives etcd a margin of one"}
	case seats <= 1:
		c.Verdict, c.Summary = Go, "one member, healthy (a single member has no margin by design: its node is the cluster)"
	case len(notHealthy) > 0:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("%s; quorum holds with a margin of %d", strings.Join(notHealthy, "; "), margin)
		c.Fix = memberFixes(f, notHealthy)
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("%d of %d members healthy, one on each control plane, one leader; %d can fail and etcd keeps quorum", healthy, voting, margin)
	}
	if c.Verdict == Go && len(disagree) > 0 {
		c.Verdict = Warn
		c.Summary += fmt.Sprintf("; but the membership does not agree everywhere: %s", strings.Join(firstN(disagree, 2), "; "))
	}
	return c
}

func quorumFix(f *facts) string {
	return "recover etcd first: breakglass " + contextFlag(f) + "recover (runbook etcd-quorum-lost: a copy of the most advanced member, then Talos's bootstrap from it); nothing else works until etcd has quorum"
}

func memberFixes(f *facts, notHealthy []string) []string {
	var out []string
	for _, h := range notHealthy {
		if strings.Contains(h, "learner") {
			out = appendNew(out, "wait until the learner is promoted (talosctl "+contextFlag(f)+"etcd members shows it a voter), then check again")
		} else {
			out = appendNew(out, "bring the member back, or replace it: breakglass "+contextFlag(f)+"recover (runbook etcd-member-lost), or talosctl etcd remove-member ID, then reset its node's EPHEMERAL and let it join again")
		}
	}
	return out
}

// nodeObjectsDisagree are where the Node objects in etcd and Talos
// discovery do not say the same: a Node no node of the cluster answers to
// (stale), a control plane with no Node (its kubelet never registered).
func (f *facts) nodeObjectsDisagree() []string {
	if len(f.kubeNodes) == 0 || len(f.discovered) == 0 {
		return nil // no kubelet registered at all: kubeletSkew says so
	}
	var out []string
	for _, kn := range f.kubeNodes {
		if !slices.ContainsFunc(f.discovered, func(d talos.DiscoveredMember) bool {
			return d.ID == kn.Name || d.Hostname == kn.Name || slices.Contains(d.Addresses, kn.InternalIP)
		}) {
			out = append(out, fmt.Sprintf("Node %s (%s) is in etcd, but Talos discovery lists no node of that name or address: a stale Node", termsafe.String(kn.Name), termsafe.String(kn.InternalIP)))
		}
	}
	for _, n := range controlPlanes(f.nodes) {
		if !slices.ContainsFunc(f.kubeNodes, func(kn etcd.NodeInfo) bool { return kn.Name == n.Name || kn.InternalIP == hostOf(n.Addr) }) {
			out = append(out, fmt.Sprintf("control plane %s has no Node object in etcd: its kubelet has not registered", n.label()))
		}
	}
	return out
}

func memberName(m *memberFacts) string {
	name := "member " + m.ID.String()
	if m.Name != "" {
		name += " (" + termsafe.String(m.Name) + ")"
	}
	return name
}

// memberProblems says why a member is not healthy: no status, or a
// complaint other than an alarm (alarms are etcd-alarms').
func memberProblems(m *memberFacts) []string {
	if m.Status == nil {
		return []string{"no status: " + termsafe.Text(m.StatusErr)}
	}
	var out []string
	if m.Status.Leader == 0 {
		out = append(out, "it knows no leader")
	}
	for _, e := range m.Status.Errors {
		if !strings.Contains(e, "alarm:") {
			out = append(out, termsafe.Text(e))
		}
	}
	return out
}

func judgeAlarms(f *facts) Check {
	c := Check{ID: CheckEtcdAlarms, Title: Title(CheckEtcdAlarms)}
	if why := f.etcdUnread(); why != "" && f.alarmsFrom == "" {
		return notChecked(c, why)
	}
	if f.alarmsErr != nil && f.alarmsFrom == "" {
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "etcd's alarms could not be read: "+errLine(f.alarmsErr)
		return c
	}
	if len(f.alarms) == 0 {
		c.Verdict, c.Summary = Go, "no alarm raised"
		c.Evidence = []string{"alarms read from " + f.alarmsFrom}
		return c
	}
	c.Verdict = NoGo
	c.Summary = "etcd has alarms raised: " + etcd.AlarmsText(f.alarms)
	for _, a := range f.alarms {
		c.Evidence = append(c.Evidence, a.String())
		switch a.Type {
		case etcd.AlarmNoSpace:
			c.Fix = appendNew(c.Fix, "NOSPACE: etcd refuses every write, and the upgraded kube-apiserver cannot make its start-up writes: breakglass "+contextFlag(f)+"recover (runbook etcd-nospace: a verified snapshot, compaction, defragmentation one member at a time, the alarm disarmed)")
		case etcd.AlarmCorrupt:
			c.Fix = appendNew(c.Fix, "CORRUPT: the members disagree on their data: never disarm it without finding the member that diverged (etcd's data corruption docs); restore from a snapshot if needed")
		}
	}
	return c
}

// needed room: what the upgrade writes, and etcd's largest request. A
// write is refused once the database plus the write would reach the
// quota (storage/quota.go Available), which is what MemberStatus.Full
// reads as within 2 MiB of it.
const requestMargin = 2 << 20

// modelledUpgradeBytes is what an upgrade not recorded is assumed to
// write: every recorded pair wrote less than 32 KiB.
const modelledUpgradeBytes = 256 << 10

// defaultQuota is etcd's --quota-backend-bytes default, as on Talos.
const defaultQuota = 2 << 30

func judgeSpace(f *facts) Check {
	c := Check{ID: CheckEtcdSpace, Title: Title(CheckEtcdSpace)}
	if f.quorumLost {
		return notChecked(c, f.etcdUnread())
	}
	cps := controlPlanes(f.nodes)
	writes := int64(modelledUpgradeBytes)
	how := "an assumed " + etcd.FormatBytes(writes) + " (this pair was not recorded)"
	if f.recorded != nil {
		writes = f.recorded.EtcdBytes * int64(max(1, len(cps)))
		how = fmt.Sprintf("%s: %s per kube-apiserver (recorded from %s -> %s) x %d control plane(s)", etcd.FormatBytes(writes), etcd.FormatBytes(f.recorded.EtcdBytes), f.recorded.From, f.recorded.To, max(1, len(cps)))
	}
	needed := writes + requestMargin
	c.Evidence = append(c.Evidence, fmt.Sprintf("the upgrade needs %s of room: its writes, %s, and etcd's largest request (2 MiB)", etcd.FormatBytes(needed), how))
	configQuota := int64(0)
	for _, n := range cps {
		if n.EtcdQuota > 0 {
			configQuota = n.EtcdQuota
		}
	}
	var full, tight []string
	seen := 0
	for _, m := range f.members {
		if m.Status == nil {
			continue
		}
		seen++
		quota, qhow := m.Status.Quota, ""
		switch {
		case quota > 0:
		case configQuota > 0:
			quota, qhow = configQuota, " (cluster.etcd.extraArgs)"
		default:
			quota, qhow = defaultQuota, " (etcd's default; etcd not read directly)"
		}
		room := quota - m.Status.DBSize
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s: database %s of a %s quota%s (%.0f%%), %s in use, %s free pages; room %s",
			memberName(m), etcd.FormatBytes(m.Status.DBSize), etcd.FormatBytes(quota), qhow, 100*float64(m.Status.DBSize)/float64(quota),
			etcd.FormatBytes(m.Status.DBSizeInUse), etcd.FormatBytes(max(0, m.Status.DBSize-m.Status.DBSizeInUse)), etcd.FormatBytes(max(0, room))))
		switch {
		case room < needed:
			full = append(full, memberName(m))
		case float64(m.Status.DBSize+needed) > 0.8*float64(quota):
			tight = append(tight, memberName(m))
		}
	}
	if u := f.usage; u != nil {
		c.Evidence = append(c.Evidence, fmt.Sprintf("live keys %s; once compacted and defragmented the fullest member would be about %s (compaction frees about %s of history inside the file, defragmentation gives back %s of free pages)",
			etcd.FormatBytes(u.Space.Live), etcd.FormatBytes(u.Space.AfterDefrag), etcd.FormatBytes(u.Space.History), etcd.FormatBytes(u.Space.Fragmented)))
		if top := u.Top(1); len(top) > 0 {
			c.Evidence = append(c.Evidence, "the largest group: "+top[0].String())
		}
	}
	reclaim := ""
	if u := f.usage; u != nil && u.Space.Reclaimable > 0 {
		reclaim = fmt.Sprintf(" (frees about %s)", etcd.FormatBytes(u.Space.Reclaimable))
	}
	switch {
	case seen == 0:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "no member's size could be read"
	case len(full) > 0:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("%s ha%s less room under its quota than the upgrade needs (%s): the new kube-apiserver's start-up writes would be refused", strings.Join(full, ", "), pluralS(len(full)), etcd.FormatBytes(needed))
		c.Fix = []string{"compact and defragment" + reclaim + ": breakglass " + contextFlag(f) + "recover (runbook etcd-nospace: verified snapshot first, leader last), then check again",
			"if the live data alone is too big: raise the quota (cluster.etcd.extraArgs.quota-backend-bytes) or delete what fills it (breakglass etcd usage names it)"}
	case len(tight) > 0:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("%s will be over 80%% of its quota after the upgrade's writes", strings.Join(tight, ", "))
		c.Fix = []string{"compact and defragment" + reclaim + ", or raise the quota, before etcd raises NOSPACE"}
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("every member has room for the upgrade's writes (it needs %s)", etcd.FormatBytes(needed))
	}
	return c
}

func pluralS(n int) string {
	if n == 1 {
		return "s"
	}
	return "ve"
}

func judgeStored(f *facts) Check {
	c := Check{ID: CheckStoredVersions, Title: Title(CheckStoredVersions)}
	switch {
	case f.etcdUnread() != "":
		return notChecked(c, f.etcdUnread())
	case f.usageErr != nil:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "etcd's keys could not be read: "+errLine(f.usageErr)
		return c
	case f.versions == nil:
		return notChecked(c, "etcd's keys were not read")
	}
	to := f.to.String()
	target, err := apiserverargs.For(to)
	if err != nil {
		return notChecked(c, "no kube-apiserver "+to+" was recorded")
	}
	builtin := map[string]bool{}
	for _, v := range apiserverargs.Versions() {
		if b, err := apiserverargs.For(v); err == nil {
			for _, g := range b.APIGroups {
				builtin[g] = true
			}
		}
	}
	registered := func(apiVersion string) (known, ok bool) {
		g := etcd.GroupOf(apiVersion)
		if !builtin[g] || slices.Contains(target.VersionsCheckedLater, g) {
			return false, true
		}
		return true, slices.Contains(target.GroupVersions, apiVersion)
	}
	v := f.versions
	builtinObjects, custom := 0, 0
	var gone, goneApplied []string
	for _, s := range v.Stored {
		known, ok := registered(s.APIVersion)
		if !known {
			custom += s.Count
			continue
		}
		builtinObjects += s.Count
		if !ok {
			gone = append(gone, fmt.Sprintf("%d %s stored as %s (e.g. %s)", s.Count, termsafe.String(s.Resource), termsafe.String(s.APIVersion), termsafe.String(s.Example)))
		}
	}
	for _, s := range v.Applied {
		if known, ok := registered(s.APIVersion); known && !ok {
			goneApplied = append(goneApplied, fmt.Sprintf("%d %s last applied (kubectl) as %s %s (e.g. %s)", s.Count, termsafe.String(s.Resource), termsafe.String(s.APIVersion), termsafe.String(s.Kind), termsafe.String(s.Example)))
		}
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%d keys read: %d objects of built-in APIs, %d custom resources and others (their versions are their CRDs')", v.Keys, builtinObjects, custom))
	c.Evidence = append(c.Evidence, gone...)
	c.Evidence = append(c.Evidence, goneApplied...)
	if len(v.Encrypted) > 0 {
		var enc []string
		for r, n := range v.Encrypted {
			enc = append(enc, fmt.Sprintf("%s %d", termsafe.String(r), n))
		}
		sort.Strings(enc)
		c.Evidence = append(c.Evidence, "encrypted at rest, not read: "+strings.Join(enc, ", "))
	}
	if v.Unreadable > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d values in no encoding breakglass reads", v.Unreadable))
	}
	switch {
	case len(gone) > 0:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("objects are stored at API versions kube-apiserver %s no longer registers: it cannot read them (%s)", target.Version, strings.Join(firstN(gone, 2), "; "))
		c.Fix = []string{"rewrite them before the upgrade, on the version running now, so that it stores them at its storage version: kubectl get RESOURCE -A -o json | kubectl replace -f - (or a StorageVersionMigration)"}
	case len(goneApplied) > 0:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("manifests applied with kubectl use API versions %s no longer serves: the next kubectl apply of them fails (%s)", target.Version, strings.Join(firstN(goneApplied, 2), "; "))
		c.Fix = []string{"update those manifests to a served version (kubectl convert, or the API's migration guide) before the next apply"}
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("every built-in object is stored at a version kube-apiserver %s registers", target.Version)
	}
	return c
}

// roundAge is an age to the second, or the minute past an hour.
func roundAge(d time.Duration) string {
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}
