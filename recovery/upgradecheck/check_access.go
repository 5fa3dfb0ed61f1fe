package upgradecheck

// access: the Talos API of every node the context names and of every
// control plane the membership names, their machine configs, and etcd.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
)

var accessCheck = &checkDef{
	ID:    CheckAccess,
	Title: "Talos API and etcd reached",
	Help: "the Talos API of every node the context names and of every control plane the cluster's membership names " +
		"(etcd's members, Talos discovery), their machine configs (os:admin), and etcd (a client certificate minted from " +
		"the etcd CA, or the one given; --etcd-endpoints must reach the members the Talos API reports)",
	NoGo: "a node's Talos API does not answer (every node the context names and every control plane the cluster's membership names, each named), " +
		"the machine configs cannot be read (os:admin), etcd cannot be reached, `--etcd-endpoints` reach another etcd than the members the Talos API reports, " +
		"or etcd has lost its quorum",
	Fix:   "reach every control plane and etcd: talosctl -n NODE version for each node named, an os:admin talosconfig, and no --etcd-endpoints (or this cluster's)",
	Needs: always,
	Judge: factsOnly(judgeAccess),
}

func judgeAccess(f *facts) Check {
	var c Check
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
