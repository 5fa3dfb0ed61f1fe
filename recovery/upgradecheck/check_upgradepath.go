package upgradecheck

// upgrade-path: one minor at a time, as talosctl upgrade-k8s goes.

import (
	"fmt"
	"slices"
	"strings"
)

var upgradePathCheck = &checkDef{
	ID:    CheckUpgradePath,
	Title: "one minor at a time",
	Help: "from -> to is one minor (or a patch), as talosctl upgrade-k8s requires; from is the lowest minor the control " +
		"planes' kube-apiserver images name (a --from they contradict is a no-go)",
	NoGo: "from -> to skips a minor or goes down (talosctl upgrade-k8s goes one minor at a time; from is the lowest minor the control planes' images name), " +
		"or `--from` contradicts the images",
	Warn:  "the control planes run different minors",
	Fix:   "upgrade one minor at a time: breakglass upgrade-check --to NEXT, then talosctl upgrade-k8s --to NEXT",
	Needs: []need{needTalosAPI},
	Judge: factsOnly(judgeUpgradePath),
}

func judgeUpgradePath(f *facts) Check {
	var c Check
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
