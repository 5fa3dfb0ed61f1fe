package diagnose

import (
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// members is three control planes' etcd: each node's member, all listed.
func members(nodes ...NodeMember) *MembersEvidence {
	m := &MembersEvidence{Nodes: nodes}
	for i, host := range []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"} {
		m.Members = append(m.Members, ListedMember{ID: etcd.ID(0xa1 + i), Hostname: "cp-" + string(rune('1'+i)), Host: host, ListedBy: []string{"127.0.0.11"}})
	}
	return m
}

// named is the members as read with -n naming the first node only: the
// others' hosts said what says says.
func named(first NodeMember, says string) *MembersEvidence {
	m := members(first)
	for i := 1; i < len(m.Members); i++ {
		m.Members[i].HostSays = says
	}
	return m
}

func up(node string, id, leader etcd.ID, index uint64) NodeMember {
	return NodeMember{Node: node, Service: "Running", ServiceHealthy: true, MemberID: id, Leader: leader, RaftIndex: index, RaftTerm: 4}
}

func down(node, service, msg string) NodeMember {
	return NodeMember{Node: node, Service: service, ServiceMessage: msg, Errors: []string{"etcd status: connection refused"}}
}

// lost is a member down with what says it will not come back by itself.
func lost(n NodeMember, why string) NodeMember {
	n.Lost = why
	return n
}

// A lost member while quorum holds, and a lost quorum: each verdict, ahead
// of what kube-apiserver logs, with the figures and the most advanced
// survivor named.
func TestAnalyzeEtcdMembers(t *testing.T) {
	ready := []NodeEvidence{node("127.0.0.11", nil, readyPod, readyzOK()), node("127.0.0.12", nil, readyPod, readyzOK())}
	removed := up("127.0.0.13", 0xee, 0xa1, 90) // a new member the cluster does not list
	tests := []struct {
		name    string
		members *MembersEvidence
		nodes   []NodeEvidence
		verdict Verdict
		says    []string
	}{
		{"all healthy", members(up("127.0.0.11", 0xa1, 0xa1, 100), up("127.0.0.12", 0xa2, 0xa1, 100), up("127.0.0.13", 0xa3, 0xa1, 99)), ready,
			Healthy, nil},
		{"one member lost, quorum holds", members(up("127.0.0.11", 0xa1, 0xa1, 100), up("127.0.0.12", 0xa2, 0xa1, 98), lost(down("127.0.0.13", "Failed", "error running etcd: data dir corrupt"), "its etcd log says its database is damaged")), ready,
			EtcdMemberLost, []string{"quorum holds (2 of 3 voting members healthy)", "node 127.0.0.13: etcd service Failed (error running etcd: data dir corrupt): its etcd log says its database is damaged", "most advanced: member a1 on 127.0.0.11 (raft index 100)", "127.0.0.12 2 entries behind"}},
		{"one member down, nothing says it is lost (machined restarts it)", members(up("127.0.0.11", 0xa1, 0xa1, 100), up("127.0.0.12", 0xa2, 0xa1, 98), down("127.0.0.13", "Waiting", "Error running Containerd(etcd), going to restart forever")), ready,
			Healthy, nil},
		{"two members down, nothing says they are lost: not a lost quorum yet", members(up("127.0.0.11", 0xa1, 0, 120), down("127.0.0.12", "Waiting", ""), down("127.0.0.13", "Preparing", "")), ready,
			Healthy, nil},
		{"a node runs a member the cluster removed", members(up("127.0.0.11", 0xa1, 0xa1, 100), up("127.0.0.12", 0xa2, 0xa1, 100), lost(removed, "its member ee is no longer in the cluster (removed), yet its etcd runs")), ready,
			EtcdMemberLost, []string{"node 127.0.0.13: its member ee is no longer in the cluster (removed), yet its etcd runs"}},
		{"two of three gone", members(up("127.0.0.11", 0xa1, 0, 120), lost(down("127.0.0.12", "Preparing", "Waiting for bootstrap"), "its etcd log says its data directory is empty"), lost(down("127.0.0.13", "Failed", ""), "its etcd log says its data directory is empty")), nil,
			EtcdQuorumLost, []string{"lost its quorum: 1 of 3 voting members answer, 0 healthy with a leader, 2 needed", "most advanced: member a1 on 127.0.0.11 (raft index 120)"}},
		{"no leader anywhere", members(up("127.0.0.11", 0xa1, 0, 120), up("127.0.0.12", 0xa2, 0, 118), up("127.0.0.13", 0xa3, 0, 119)), nil,
			EtcdQuorumLost, []string{"3 of 3 voting members answer, 0 healthy", "127.0.0.12 2 entries behind", "127.0.0.13 1 entries behind"}},
		{"-n one node, the others healthy on their hosts", named(up("127.0.0.11", 0xa1, 0xa1, 100), hostHealthy), ready,
			Healthy, nil},
		{"-n one node, the others' hosts unreachable", named(up("127.0.0.11", 0xa1, 0xa1, 100), hostUnreachable), ready,
			EtcdMemberLost, []string{"member a2 (cp-2, 127.0.0.12) is listed, and no node given answers for it"}},
		{"-n one node without a leader, the others down on their hosts", named(up("127.0.0.11", 0xa1, 0, 120), hostNotHealthy), nil,
			EtcdQuorumLost, []string{"1 of 3 voting members answer, 0 healthy with a leader, 2 needed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := tc.nodes
			if nodes == nil {
				nodes = []NodeEvidence{node("127.0.0.11", nil, crashLoop, refused())}
			}
			r := Analyze(&Evidence{Nodes: nodes, Members: tc.members}, Options{})
			if r.Verdict != tc.verdict {
				t.Fatalf("verdict %s (%s), want %s", r.Verdict, r.Summary, tc.verdict)
			}
			for _, s := range tc.says {
				if !strings.Contains(r.Summary, s) {
					t.Errorf("summary %q does not say %q", r.Summary, s)
				}
			}
			want := map[Verdict]failure.Category{EtcdMemberLost: failure.DiagnoseMemberLost, EtcdQuorumLost: failure.DiagnoseQuorumLost, Healthy: failure.OK}[tc.verdict]
			if r.Verdict.Category() != want {
				t.Errorf("category %d, want %d", r.Verdict.Category(), want)
			}
			if tc.verdict != Healthy && (len(r.Next) == 0 || !strings.HasPrefix(r.Next[0], "breakglass recover")) {
				t.Errorf("next %q, want breakglass recover first", r.Next)
			}
			if tc.verdict != Healthy && !strings.Contains(Brief(r), "etcd members by node:") {
				t.Errorf("the brief does not list the members:\n%s", Brief(r))
			}
		})
	}
}
