package upgradecheck

// talos-support: Talos on every node and every kubelet run the target.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/talos"
)

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

var talosSupportCheck = &checkDef{
	ID:    CheckTalosSupport,
	Title: "Talos and kubelets support the target",
	Help: "Talos on every node runs the target (Talos's support matrix, the table upgrade-k8s checks); every kubelet " +
		"within the skew the target allows (the Node objects in etcd)",
	NoGo: "Talos on a node does not run the target (Talos's support matrix: the machinery's table `talosctl upgrade-k8s` checks, `pkg/machinery/compatibility`), " +
		"a kubelet is more than three minors older, or newer, or the kubelets' versions could not be read",
	Warn:  "a Talos newer than the table",
	Fix:   "upgrade Talos (talosctl upgrade, one node at a time) or the kubelets the target does not support first",
	Needs: []need{needTalosAPI},
	Judge: factsOnly(judgeTalosSupport),
}

func judgeTalosSupport(f *facts) Check {
	c := Check{Verdict: Go}
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
