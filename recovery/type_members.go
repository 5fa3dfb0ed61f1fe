package recovery

// etcd losing a member while quorum holds (runbook etcd-member-lost), or
// losing its quorum (runbook etcd-quorum-lost): both act on every member,
// so every control plane must be given. Without quorum etcd takes no write:
// the cluster lock waits until it is bootstrapped again.

import (
	"fmt"
	"slices"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	registerType(&IncidentType{
		Name:     "etcd-quorum-lost",
		Verdicts: []diagnose.Verdict{diagnose.EtcdQuorumLost},
		Runbook:  diagnose.QuorumLostRunbook,
		Does:     "bootstraps etcd again from a copy",
		Fits:     func(steps []Step) bool { return hasAction(steps, runbooks.ActionEtcdBootstrap) },
		Decide: func(d *Decision, report *diagnose.Report, _ RecoverOptions) error {
			m := report.Evidence.Members
			best, ok := m.MostAdvanced()
			if !ok {
				return &NotDeadlockError{Verdict: report.Verdict, Summary: report.Summary + " (and no member answers: its data can only be copied off a node's disk by hand)", Next: report.Next}
			}
			d.Of = &EtcdMembersDecision{Source: best.Node}
			d.Reasons = append(d.Reasons, m.Behind(), "the copy comes from "+best.Node+"; revisions written after it are lost")
			return nil
		},
		Decided: func() Decided { return &EtcdMembersDecision{} },
		Plan: func(d *Decision) string {
			return "copy the data of the member on " + membersOf(d).Source + ", reset every control plane's EPHEMERAL, bootstrap etcd from the copy"
		},
		Scope:     ScopeEveryMember,
		LockLater: true,
		Advice: func(*run, *Decision, error) []string {
			return []string{"take etcd snapshots on a schedule (talosctl etcd snapshot, or breakglass etcd snapshot --out FILE): a lost quorum loses every write after the newest copy; and keep an odd number of control planes, each on its own disk and failure domain"}
		},
	})
	registerType(&IncidentType{
		Name:     "etcd-member-lost",
		Verdicts: []diagnose.Verdict{diagnose.EtcdMemberLost},
		Runbook:  diagnose.MemberLostRunbook,
		Does:     "removes a lost etcd member and lets its node join again",
		Fits:     func(steps []Step) bool { return hasAction(steps, runbooks.ActionEtcdMemberRemove) },
		Decide:   decideMemberLost,
		Decided:  func() Decided { return &EtcdMembersDecision{} },
		Plan: func(d *Decision) string {
			return fmt.Sprintf("remove %d lost member(s), reset their node's EPHEMERAL, let them join again", len(membersOf(d).Lost))
		},
		Scope: ScopeEveryMember,
		Advice: func(*run, *Decision, error) []string {
			return []string{"before a control plane leaves for good, have its member leave first (talosctl etcd leave, or talosctl reset, which does): a member replaced without it is what this incident was"}
		},
	})
}

// decideMemberLost names the lost members, each with its node and what
// says it is lost, and the node whose member is the most advanced.
func decideMemberLost(d *Decision, report *diagnose.Report, _ RecoverOptions) error {
	own := &EtcdMembersDecision{}
	d.Of = own
	m := report.Evidence.Members
	lost, unanswered := m.Lost()
	for _, n := range lost {
		id := ""
		if lm, ok := m.MemberOf(n); ok {
			id = lm.ID.String() // the member the cluster lists for the node; its own may have been removed
		} else if n.MemberID != 0 {
			id = n.MemberID.String()
		}
		own.Lost = append(own.Lost, LostMember{Node: n.Node, MemberID: id, Why: n.Lost})
	}
	for _, lm := range unanswered {
		l := LostMember{Node: lm.Host, MemberID: lm.ID.String(), Why: "no node given answers for it (its host says: " + orDefault(lm.HostSays, "nothing") + ")"}
		if lm.Gone {
			l.Why, l.Gone = "its node is gone for good (--nodes-gone) and does not answer", true
		}
		own.Lost = append(own.Lost, l)
	}
	if best, ok := m.MostAdvanced(); ok {
		own.Source = best.Node
	}
	for _, l := range own.Lost {
		d.Reasons = append(d.Reasons, fmt.Sprintf("member %s on %s is lost: %s", orDefault(l.MemberID, "(unknown)"), orDefault(l.Node, "a node not given"), l.Why))
	}
	d.Reasons = append(d.Reasons, m.Behind())
	return nil
}

// EtcdMembersDecision is what a diagnosis of a lost member or a lost quorum
// decides: the members lost, each with its node (etcd-member-lost), and
// the node whose member holds the most advanced data, where a copy comes
// from and etcd is bootstrapped again (etcd-quorum-lost).
type EtcdMembersDecision struct {
	Lost   []LostMember `json:"lost,omitempty"`
	Source string       `json:"source,omitempty"`
}

// membersOf is the decision's members (none when it is another type's).
func membersOf(d *Decision) *EtcdMembersDecision {
	if m, ok := d.Of.(*EtcdMembersDecision); ok {
		return m
	}
	return &EtcdMembersDecision{}
}

// Fill: the copy and the bootstrap use the source node's member; the
// removal and the reset act on the lost members.
func (m *EtcdMembersDecision) Fill(steps []Step) []Step {
	out := slices.Clone(steps)
	for i, s := range out {
		switch p := s.Params.(type) {
		case *runbooks.EtcdCopyParams:
			q := *p
			q.From = m.Source
			out[i].Params = &q
		case *runbooks.EtcdBootstrapParams:
			q := *p
			q.From = m.Source
			out[i].Params = &q
		case *runbooks.EtcdMemberRemoveParams:
			q := *p
			q.Lost = slices.Clone(m.Lost)
			out[i].Params = &q
		case *runbooks.EtcdResetParams:
			q := *p
			q.Lost = slices.Clone(m.Lost)
			out[i].Params = &q
		}
	}
	return out
}
