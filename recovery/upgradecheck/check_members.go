package upgradecheck

// etcd-members: etcd's margin, counted on the control planes.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/talos"
)

var membersCheck = &checkDef{
	ID:    CheckEtcdMembers,
	Title: "etcd's margin on the control planes",
	Help: "the margin counted on the control planes: healthy voting members minus quorum (a control plane without a " +
		"voting member, a learner, a member down: not healthy); none with 3+ control planes is a no-go, two a warning " +
		"(by design); the member list, Talos discovery and the Node objects compared",
	NoGo: "quorum lost; no margin left with three or more control planes (a control plane without a voting member, a learner and a member down each count as not healthy); " +
		"two control planes that are not both healthy voting members",
	Warn:  "a member down or a learner with margin left; two healthy control planes (no margin, by design); the member list, Talos discovery and the Node objects disagreeing",
	Fix:   "bring every member back before the upgrade: breakglass recover (runbook etcd-member-lost, or etcd-quorum-lost without quorum)",
	Needs: []need{needTalosAPI, needControlPlane},
	Judge: factsOnly(judgeMembers),
}

// judgeMembers counts etcd's margin on the control planes: over the
// voting members, healthy voters minus quorum, where a control plane
// without a voting member, a learner and a member down each count as not
// healthy. No margin with three or more control planes is a no-go; two
// cannot lose either by design (a warning); one is the cluster.
func judgeMembers(f *facts) Check {
	var c Check
	switch {
	case f.members == nil && f.quorumLost:
		c.Verdict, c.Summary, c.Fix = NoGo, "etcd has lost quorum: "+f.quorumWhy, []string{quorumFix(f)}
		return c
	case f.members == nil:
		return unread("the etcd member list could not be read", f.membersErr)
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
