package diagnose

// etcd's members: is each one there, healthy and caught up, and does the
// cluster keep its quorum. A member lost while quorum holds (a disk, a node
// replaced without `etcd leave`, a corrupted data directory) leaves its
// node's kube-apiserver without etcd; a lost quorum (two of three gone)
// leaves every one of them without it, and nothing writes until etcd is
// bootstrapped again from a copy of the most advanced survivor's data.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/talos"
)

// The built-in runbooks for a lost member and a lost quorum.
const (
	MemberLostRunbook = "etcd-member-lost"
	QuorumLostRunbook = "etcd-quorum-lost"
)

// EtcdMemberNodes reads each control plane's member through the Talos API;
// *talos.Client is one.
type EtcdMemberNodes interface {
	EtcdNodes
	EtcdMembers(ctx context.Context, node string) ([]talos.EtcdMember, error)
	EtcdService(ctx context.Context, node string) (talos.EtcdService, error)
	EtcdLog(ctx context.Context, node string, tail int) ([]string, error)
	NodeName(ctx context.Context, node string) (string, error)
}

// MembersEvidence is each control plane's etcd member as its node tells it,
// and the members the cluster lists.
type MembersEvidence struct {
	Nodes []NodeMember `json:"nodes"`
	// Members are the members any node lists, each with the nodes that list it.
	Members []ListedMember `json:"members"`
}

// NodeMember is one control plane's etcd: its service and its member.
type NodeMember struct {
	Node string `json:"node"`
	// Hostname is the node's name as it reads it (Nodename): etcd names a
	// member after it, so a node given by address or by name is matched to
	// its member either way.
	Hostname       string   `json:"hostname,omitempty"`
	Service        string   `json:"service,omitempty"` // machined's state of the etcd service
	ServiceHealthy bool     `json:"serviceHealthy"`
	ServiceMessage string   `json:"serviceMessage,omitempty"`
	MemberID       etcd.ID  `json:"memberID,omitempty"` // 0: its status could not be read
	Leader         etcd.ID  `json:"leader,omitempty"`   // the leader it knows; 0: none
	Learner        bool     `json:"learner,omitempty"`
	RaftIndex      uint64   `json:"raftIndex,omitempty"`
	RaftTerm       uint64   `json:"raftTerm,omitempty"`
	Revision       int64    `json:"revision,omitempty"` // read from etcd itself when it could be
	Alarms         []string `json:"alarms,omitempty"`   // its errors (CORRUPT, NOSPACE)
	Errors         []string `json:"errors,omitempty"`   // what could not be read
	// Lost says why its member will not come back by itself: its status or
	// its log says its data is gone or damaged, or that it was removed, or
	// it did not run healthy at any read over LostAfter. "": nothing says
	// so, and a member down without it is only down (machined restarts
	// etcd every 5 s; a node reboots).
	Lost string `json:"lost,omitempty"`
}

// ListedMember is a member of the cluster and who lists it.
type ListedMember struct {
	ID       etcd.ID  `json:"id"`
	Hostname string   `json:"hostname,omitempty"`
	Host     string   `json:"host,omitempty"` // the address it serves clients on
	Learner  bool     `json:"learner,omitempty"`
	ListedBy []string `json:"listedBy"`
	// HostSays is what the member's own host said of it through the Talos
	// API, asked when no node read is that host (-n naming some control
	// planes only): healthy, not healthy, or unreachable.
	HostSays string `json:"hostSays,omitempty"`
	// Gone: its node is one the operator said is gone for good
	// (--nodes-gone), and it does not answer: the member is lost with it.
	Gone bool `json:"gone,omitempty"`
}

// What a member's own host says of it.
const (
	hostHealthy     = "healthy"
	hostNotHealthy  = "not healthy"
	hostUnreachable = "unreachable"
)

// Healthy tells whether every node's member is healthy, a voting member
// the cluster lists, within margin raft entries of the most advanced, and
// the cluster lists as many voting members as there are nodes.
func (m *MembersEvidence) Healthy(margin uint64) bool {
	best, ok := m.MostAdvanced()
	if !ok || m.voting() != len(m.Nodes) {
		return false
	}
	for _, n := range m.Nodes {
		if !n.healthy() || n.Learner || !m.listed(n.MemberID) || best.RaftIndex-n.RaftIndex > margin {
			return false
		}
	}
	return true
}

// Node is what the node's member is, as read.
func (m *MembersEvidence) Node(node string) (NodeMember, bool) {
	i := slices.IndexFunc(m.Nodes, func(n NodeMember) bool { return n.Node == node })
	if i < 0 {
		return NodeMember{}, false
	}
	return m.Nodes[i], true
}

// Healthy tells whether the node's member is a healthy member of the
// cluster.
func (n NodeMember) Healthy() bool { return n.healthy() }

// State says the node's etcd in a few words.
func (n NodeMember) State() string { return n.state() }

// healthy tells whether the node's member runs, answers, knows a leader and
// raises no CORRUPT alarm.
func (n NodeMember) healthy() bool {
	return n.MemberID != 0 && n.Leader != 0 && (n.Service == "" || n.Service == "Running") &&
		!slices.ContainsFunc(n.Alarms, func(a string) bool { return strings.Contains(a, "CORRUPT") })
}

// state says the node's etcd in a few words.
func (n NodeMember) state() string {
	switch {
	case n.MemberID == 0 && n.Service != "" && n.Service != "Running":
		s := "etcd service " + n.Service
		if n.ServiceMessage != "" {
			s += " (" + n.ServiceMessage + ")"
		}
		return s
	case n.MemberID == 0:
		return "its member does not answer: " + strings.Join(n.Errors, "; ")
	case n.Leader == 0:
		return fmt.Sprintf("member %s has no leader (raft term %d, index %d)", n.MemberID, n.RaftTerm, n.RaftIndex)
	case !n.healthy():
		return fmt.Sprintf("member %s: %s", n.MemberID, strings.Join(n.Alarms, ", "))
	}
	return fmt.Sprintf("member %s healthy (raft index %d)", n.MemberID, n.RaftIndex)
}

// memberReadTimeout bounds one node's reads of its etcd: a healthy member
// answers in milliseconds, one whose etcd does not run never does.
const memberReadTimeout = 5 * time.Second

// MemberReads say what else GatherMembers is told: the nodes the operator
// said are gone for good (--nodes-gone). Their listed members are lost with
// them; the engine checked that they do not answer.
type MemberReads struct {
	Gone []string
}

// logTail is how many lines of a member's own log are read when it does
// not run healthy: its last start's words are among them.
const logTail = 60

// GatherMembers reads every control plane's etcd service, member status and
// member list through the Talos API, and each member's revision from etcd
// itself when it can. A member that does not run healthy has its own log
// read for what says it will not come back by itself (NodeMember.Lost).
func GatherMembers(ctx context.Context, nodes Nodes, room EtcdRoom, reads MemberReads) *MembersEvidence {
	en, ok := nodes.(EtcdMemberNodes)
	if !ok {
		return nil
	}
	type read struct {
		nm      NodeMember
		members []talos.EtcdMember
		log     []string
	}
	reads_, _ := talos.EachNode(nodes.Nodes(), func(node string) (read, error) {
		// A node whose etcd does not run may not answer at all: each
		// node's reads have a deadline, and its error says so.
		ctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
		defer cancel()
		r := read{nm: readMember(ctx, en, node)}
		if r.nm.unknown() {
			return r, nil
		}
		r.nm.Hostname, _ = en.NodeName(ctx, node)
		if r.nm.Service == "" || r.nm.Service == "Running" {
			if ms, err := en.EtcdMembers(ctx, node); err == nil {
				r.members = ms
			} else {
				r.nm.Errors = append(r.nm.Errors, "etcd members: "+firstLine(err))
			}
		}
		if !r.nm.healthy() {
			r.log, _ = en.EtcdLog(ctx, node, logTail)
		}
		return r, nil
	})
	ev := &MembersEvidence{}
	byID := map[etcd.ID]*ListedMember{}
	for _, r := range reads_ {
		ev.Nodes = append(ev.Nodes, r.nm)
		for _, m := range r.members {
			lm := byID[etcd.ID(m.ID)]
			if lm == nil {
				lm = &ListedMember{ID: etcd.ID(m.ID), Hostname: m.Hostname, Host: m.Host(), Learner: m.IsLearner}
				byID[lm.ID] = lm
			}
			lm.ListedBy = append(lm.ListedBy, r.nm.Node)
		}
	}
	for _, lm := range byID {
		ev.Members = append(ev.Members, *lm)
	}
	if len(ev.Members) == 0 && room != nil {
		ev.Members = membersSerializable(ctx, room)
	}
	sort.Slice(ev.Members, func(i, j int) bool { return ev.Members[i].ID < ev.Members[j].ID })
	for i := range ev.Members {
		lm := &ev.Members[i]
		lm.Gone = slices.ContainsFunc(reads.Gone, func(g string) bool { return g == lm.Host || g == lm.Hostname }) &&
			!slices.ContainsFunc(ev.Nodes, func(n NodeMember) bool { return n.matches(*lm) })
	}
	for i, r := range reads_ {
		ev.Nodes[i].Lost = ev.lostBecause(ev.Nodes[i], r.log)
	}
	askHosts(ctx, en, ev)
	if room != nil {
		ctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
		defer cancel()
		if st, err := room.Status(ctx); err == nil {
			for i := range ev.Nodes {
				for _, s := range st {
					if s.Error == "" && s.MemberID == ev.Nodes[i].MemberID {
						ev.Nodes[i].Revision = s.Revision
					}
				}
			}
		}
	}
	return ev
}

// readMember reads the node's etcd service, and its member's status while
// machined runs it.
func readMember(ctx context.Context, en EtcdMemberNodes, node string) NodeMember {
	nm := NodeMember{Node: node}
	if svc, err := en.EtcdService(ctx, node); err == nil {
		nm.Service, nm.ServiceHealthy, nm.ServiceMessage = svc.State, svc.Healthy, svc.Message
	} else {
		nm.Errors = append(nm.Errors, "etcd service: "+firstLine(err))
	}
	if nm.Service != "" && nm.Service != "Running" {
		// machined runs no member there: nothing to ask it.
		return nm
	}
	if st, err := en.EtcdStatus(ctx, node); err == nil {
		nm.MemberID, nm.Leader, nm.Learner = etcd.ID(st.MemberID), etcd.ID(st.Leader), st.IsLearner
		nm.RaftIndex, nm.RaftTerm, nm.Alarms = st.RaftIndex, st.RaftTerm, st.Errors
	} else {
		nm.Errors = append(nm.Errors, "etcd status: "+firstLine(err))
	}
	return nm
}

// MemberOn reads one node's etcd service and member status now (not the
// member list, which waits for a leader): what the engine reads again of a
// node just before it acts.
func MemberOn(ctx context.Context, nodes Nodes, node string) (NodeMember, error) {
	en, ok := nodes.(EtcdMemberNodes)
	if !ok {
		return NodeMember{}, fmt.Errorf("cannot read etcd members through %T", nodes)
	}
	ctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
	defer cancel()
	nm := readMember(ctx, en, node)
	if nm.unknown() {
		return nm, errors.New(strings.Join(nm.Errors, "; "))
	}
	return nm, nil
}

// What a member's own log says when it will not come back by itself, in
// etcd's words (the message, or the error, of its last start).
var lossSigns = []struct{ sign, says string }{
	{"couldn't find local name", "its data directory is empty: it starts afresh and finds no cluster to join"},
	{"has already been removed", "it was removed from the cluster"},
	{"permanently removed from the cluster", "it was removed from the cluster"},
	{"member count is unequal", "it was removed from the cluster"},
	{"failed to find database snapshot file", "its data is damaged"},
	{"crc mismatch", "its write-ahead log is damaged"},
	{"invalid database", "its database is damaged"},
	{"failed to recover v3 backend", "its database is damaged"},
}

// lostBecause says why the node's member will not come back by itself, ""
// when nothing read says so: its status (removed while it runs, CORRUPT),
// or its own log.
func (m *MembersEvidence) lostBecause(n NodeMember, log []string) string {
	switch {
	case n.healthy() && m.listed(n.MemberID) || n.unknown():
		return ""
	case n.MemberID != 0 && !m.listed(n.MemberID):
		return fmt.Sprintf("its member %s is no longer in the cluster (removed), yet its etcd runs", n.MemberID)
	case slices.ContainsFunc(n.Alarms, func(a string) bool { return strings.Contains(a, "CORRUPT") }):
		return "its member raised the CORRUPT alarm"
	}
	for _, line := range slices.Backward(log) {
		for _, s := range lossSigns {
			if strings.Contains(line, s.sign) {
				return "its etcd log says " + s.says + " (" + logWords(line) + ")"
			}
		}
	}
	return ""
}

// logWords is an etcd log line's message and error, without its JSON.
func logWords(line string) string {
	var l struct {
		Msg   string `json:"msg"`
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(line), &l) != nil || l.Msg == "" {
		return termsafe.String(line)
	}
	if l.Error != "" {
		return termsafe.String(l.Msg + ": " + l.Error)
	}
	return termsafe.String(l.Msg)
}

// listedByEtcd names, in ListedBy, a member list read from etcd itself.
const listedByEtcd = "etcd (serializable)"

// membersSerializable are the members as the etcd member reached lists
// them: without a leader machined cannot list them, a member still can.
func membersSerializable(ctx context.Context, room EtcdRoom) []ListedMember {
	ctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
	defer cancel()
	ms, err := room.MembersSerializable(ctx)
	if err != nil {
		return nil
	}
	var out []ListedMember
	for _, m := range ms {
		host := talos.EtcdMember{ClientURLs: m.ClientURLs}.Host()
		out = append(out, ListedMember{ID: m.ID, Hostname: m.Name, Host: host, Learner: m.Learner, ListedBy: []string{listedByEtcd}})
	}
	return out
}

// askHosts asks each listed member that no node read answers for on its
// own host: with -n naming some control planes only, the others' members
// are neither lost nor healthy until their hosts say so.
func askHosts(ctx context.Context, en EtcdMemberNodes, ev *MembersEvidence) {
	var outside []int
	var hosts []string
	for i, lm := range ev.Members {
		if lm.Host != "" && !ev.readFor(lm) {
			outside, hosts = append(outside, i), append(hosts, lm.Host)
		}
	}
	type answer struct {
		says   string
		member etcd.ID // the healthy member the host runs
	}
	answers, _ := talos.EachNode(hosts, func(host string) (answer, error) {
		ctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
		defer cancel()
		if _, err := en.EtcdService(ctx, host); err != nil {
			return answer{says: hostUnreachable}, nil
		}
		if st, err := en.EtcdStatus(ctx, host); err == nil && st.Leader != 0 {
			return answer{says: hostHealthy, member: etcd.ID(st.MemberID)}, nil
		}
		return answer{says: hostNotHealthy}, nil
	})
	for k, i := range outside {
		a := answers[k]
		if a.says == hostHealthy && a.member != ev.Members[i].ID {
			a.says = hostNotHealthy // its host runs another member
		}
		ev.Members[i].HostSays = a.says
	}
}

// readFor tells whether a node read answers for the listed member.
func (m *MembersEvidence) readFor(lm ListedMember) bool {
	return slices.ContainsFunc(m.Nodes, func(n NodeMember) bool { return n.matches(lm) })
}

// matches tells whether the node read is the listed member's own: it runs
// that member, or it is the member's host, named by address or by name
// (-n 10.5.0.4 or -n cp-3, etcd naming the member cp-3 on 10.5.0.4).
func (n NodeMember) matches(lm ListedMember) bool {
	return n.MemberID != 0 && n.MemberID == lm.ID ||
		lm.Host != "" && n.Node == lm.Host ||
		lm.Hostname != "" && (n.Node == lm.Hostname || n.Hostname == lm.Hostname)
}

// MemberOf is the listed member the node read is, or hosts.
func (m *MembersEvidence) MemberOf(n NodeMember) (ListedMember, bool) {
	// Its own member first: a node that runs a new member may still host
	// an old one the cluster lists.
	for _, lm := range m.Members {
		if n.MemberID != 0 && lm.ID == n.MemberID {
			return lm, true
		}
	}
	i := slices.IndexFunc(m.Members, n.matches)
	if i < 0 {
		return ListedMember{}, false
	}
	return m.Members[i], true
}

// NodeOf is the node read that is the listed member's own, by ID, address
// or name.
func (m *MembersEvidence) NodeOf(lm ListedMember) (NodeMember, bool) {
	i := slices.IndexFunc(m.Nodes, func(n NodeMember) bool { return n.matches(lm) })
	if i < 0 {
		return NodeMember{}, false
	}
	return m.Nodes[i], true
}

// voting are the members that count for quorum: every member any node
// lists, learners left out; when no node could list them, one per node.
func (m *MembersEvidence) voting() int {
	n := 0
	for _, lm := range m.Members {
		if !lm.Learner {
			n++
		}
	}
	if n == 0 {
		return len(m.Nodes)
	}
	return n
}

// healthyVoters are the nodes whose voting member is healthy.
func (m *MembersEvidence) healthyVoters() []NodeMember {
	var out []NodeMember
	for _, n := range m.Nodes {
		if n.healthy() && !n.Learner && m.listed(n.MemberID) {
			out = append(out, n)
		}
	}
	return out
}

// answering are the nodes whose voting member answers, leader or not.
func (m *MembersEvidence) answering() []NodeMember {
	var out []NodeMember
	for _, n := range m.Nodes {
		if n.MemberID != 0 && !n.Learner && m.listed(n.MemberID) {
			out = append(out, n)
		}
	}
	return out
}

// listed tells whether the cluster lists the member (always, when no list
// could be read).
func (m *MembersEvidence) listed(id etcd.ID) bool {
	return len(m.Members) == 0 || slices.ContainsFunc(m.Members, func(lm ListedMember) bool { return lm.ID == id })
}

// QuorumLost tells whether fewer than a majority of the voting members are
// healthy, even counting as healthy every node that did not answer and
// every member only down (nothing says it will not come back by itself):
// etcd takes no write, and only a bootstrap from a copy brings it back. A
// node whose Talos API is away is no evidence of a lost member, nor is one
// read of an etcd that machined is restarting.
func (m *MembersEvidence) QuorumLost() bool {
	return m != nil && len(m.Nodes) > 0 && len(m.healthyVoters())+len(m.unknown())+len(m.Down())+m.maybeHealthyOutside() < m.voting()/2+1
}

// maybeHealthyOutside counts the voting members beyond the nodes read (-n
// naming some control planes only) whose own host says they are healthy or
// cannot be asked, and that are not on a node said gone. Never more than
// there are members beyond the nodes: a member whose peer address is not
// the node's own is not counted twice.
func (m *MembersEvidence) maybeHealthyOutside() int {
	n := 0
	for _, lm := range m.Members {
		if !lm.Learner && !lm.Gone && (lm.HostSays == hostHealthy || lm.HostSays == hostUnreachable) {
			n++
		}
	}
	return min(n, max(0, m.voting()-len(m.Nodes)))
}

// unknown are the nodes whose etcd service could not be read (the node did
// not answer): nothing is known of their member.
func (m *MembersEvidence) unknown() []NodeMember {
	var out []NodeMember
	for _, n := range m.Nodes {
		if n.unknown() {
			out = append(out, n)
		}
	}
	return out
}

// unknown tells that the node's etcd service could not be read.
func (n NodeMember) unknown() bool { return n.Service == "" && n.MemberID == 0 }

// down tells that the node answers and its own member does not run
// healthy: its service is not running, or it runs and does not answer. A
// member that runs and answers without a leader is not down: it waits for
// the others.
func (n NodeMember) down() bool {
	return !n.unknown() && !n.healthy() && (n.Service != "" && n.Service != "Running" || n.MemberID == 0)
}

// Down are the nodes whose member is down and that nothing says is lost:
// machined may be restarting it, or its node booting. Only their reads over
// LostAfter can tell (Watch).
func (m *MembersEvidence) Down() []NodeMember {
	var out []NodeMember
	for _, n := range m.Nodes {
		if n.down() && n.Lost == "" {
			out = append(out, n)
		}
	}
	return out
}

// Lost are the nodes whose member is lost (down, corrupt, or removed while
// its node still runs etcd, with what says it will not come back by
// itself), and the listed members no node given answers for (their node
// said gone for good, or not named: the run must name it).
func (m *MembersEvidence) Lost() (nodes []NodeMember, unanswered []ListedMember) {
	if m == nil {
		return nil, nil
	}
	for _, n := range m.Nodes {
		if n.Lost != "" {
			nodes = append(nodes, n)
		}
	}
	for _, lm := range m.Members {
		if !m.readFor(lm) && (lm.Gone || lm.HostSays != "" && lm.HostSays != hostHealthy) {
			unanswered = append(unanswered, lm)
		}
	}
	return nodes, unanswered
}

// MostAdvanced is the node whose member holds the most advanced data: the
// highest raft index, then revision, among those that answer.
func (m *MembersEvidence) MostAdvanced() (NodeMember, bool) {
	var best NodeMember
	found := false
	for _, n := range m.Nodes {
		if n.MemberID == 0 {
			continue
		}
		if !found || n.RaftIndex > best.RaftIndex || n.RaftIndex == best.RaftIndex && n.Revision > best.Revision {
			best, found = n, true
		}
	}
	return best, found
}

// Behind says how far each other answering member is behind the most
// advanced one.
func (m *MembersEvidence) Behind() string {
	best, ok := m.MostAdvanced()
	if !ok {
		return "no member answers: its data can only be copied from a node's disk"
	}
	parts := []string{fmt.Sprintf("most advanced: member %s on %s (raft index %d", best.MemberID, best.Node, best.RaftIndex)}
	if best.Revision > 0 {
		parts[0] += fmt.Sprintf(", revision %d", best.Revision)
	}
	parts[0] += ")"
	for _, n := range m.Nodes {
		if n.Node != best.Node && n.MemberID != 0 {
			parts = append(parts, fmt.Sprintf("%s %d entries behind", n.Node, best.RaftIndex-n.RaftIndex))
		}
	}
	return strings.Join(parts, "; ")
}

// quorumLost concludes etcd-quorum-lost.
func (r *Report) quorumLost(ev *Evidence) bool {
	m := ev.Members
	if !m.QuorumLost() {
		return false
	}
	r.Verdict, r.Runbook = EtcdQuorumLost, QuorumLostRunbook
	r.Summary = fmt.Sprintf("etcd has lost its quorum: %d of %d voting members answer, %d healthy with a leader, %d needed; no write goes through and kube-apiserver cannot run; %s",
		len(m.answering()), m.voting(), len(m.healthyVoters()), m.voting()/2+1, m.Behind())
	r.addNext("breakglass recover   # runbook etcd-quorum-lost: a verified copy of the most advanced member's data, every control plane's EPHEMERAL reset, etcd bootstrapped from the copy")
	r.Notes = append(r.Notes, "by hand, Talos's disaster recovery: talosctl etcd snapshot (or cp "+talos.EtcdDBPath+"), talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL on every control plane, talosctl bootstrap --recover-from on one")
	return true
}

// memberLost concludes etcd-member-lost: quorum holds, a member does not.
func (r *Report) memberLost(ev *Evidence) bool {
	lost, unanswered := ev.Members.Lost()
	if len(lost) == 0 && len(unanswered) == 0 {
		return false
	}
	m := ev.Members
	r.Verdict, r.Runbook = EtcdMemberLost, MemberLostRunbook
	var what []string
	for _, n := range lost {
		s := "node " + n.Node + ": "
		if !n.healthy() {
			s += n.state() + ": "
		}
		what = append(what, s+n.Lost)
	}
	for _, lm := range unanswered {
		if lm.Gone {
			what = append(what, fmt.Sprintf("member %s (%s, %s) is listed, and its node is gone for good (--nodes-gone)", lm.ID, orNone(lm.Hostname), orNone(lm.Host)))
			continue
		}
		what = append(what, fmt.Sprintf("member %s (%s, %s) is listed, and no node given answers for it", lm.ID, orNone(lm.Hostname), orNone(lm.Host)))
	}
	r.Summary = fmt.Sprintf("etcd lost a member; quorum holds (%d of %d voting members healthy): %s; %s",
		len(m.healthyVoters()), m.voting(), strings.Join(what, "; "), m.Behind())
	r.addNext("breakglass recover   # runbook etcd-member-lost: remove the lost member, reset its node's EPHEMERAL, let it join again")
	return true
}

// writeMembers writes each node's member, the evidence of the verdicts above.
func writeMembers(b *strings.Builder, m *MembersEvidence) {
	if m == nil {
		return
	}
	b.WriteString("\netcd members by node:\n")
	for _, n := range m.Nodes {
		fmt.Fprintf(b, "  %s: %s", n.Node, n.state())
		if n.Service != "" {
			fmt.Fprintf(b, "; service %s", n.Service)
		}
		if n.Revision > 0 {
			fmt.Fprintf(b, "; revision %d", n.Revision)
		}
		switch {
		case n.Lost != "":
			fmt.Fprintf(b, "; lost: %s", n.Lost)
		case n.down():
			b.WriteString("; down, and nothing says it is lost (machined restarts etcd every 5 s)")
		}
		b.WriteString("\n")
	}
	for _, lm := range m.Members {
		learner := ""
		if lm.Learner {
			learner = ", learner"
		}
		fmt.Fprintf(b, "  listed: %s (%s, %s%s) by %s", lm.ID, orNone(lm.Hostname), orNone(lm.Host), learner, strings.Join(lm.ListedBy, ", "))
		switch {
		case lm.Gone:
			b.WriteString("; its node is gone for good (--nodes-gone)")
		case lm.HostSays != "":
			fmt.Fprintf(b, "; not among the nodes read, its host says: %s", lm.HostSays)
		}
		b.WriteString("\n")
	}
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// firstLine is an error's first line.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// LostAfter is how long a member must be down at every read, with nothing
// that says it is lost, before it counts as lost: machined restarts etcd
// every 5 s, and a node reboots in about a minute.
const LostAfter = 60 * time.Second

// Watch reads the members again while one is down and nothing says it is
// lost, until it comes back, something says it is lost (its log), or it was
// down at every read over after: then it is lost, saying so. progress says
// what it waits for (nil: nothing).
func Watch(ctx context.Context, nodes Nodes, room EtcdRoom, ev *MembersEvidence, reads MemberReads, after time.Duration, progress func(node, msg string)) *MembersEvidence {
	if progress == nil {
		progress = func(string, string) {}
	}
	var watching []string
	for _, n := range ev.Down() {
		watching = append(watching, n.Node)
		progress(n.Node, fmt.Sprintf("etcd down (%s): watching whether it comes back by itself; it counts as lost only if it stays down %s, or once its log says its data is gone", n.state(), after))
	}
	every := min(5*time.Second, max(after/10, 100*time.Millisecond))
	since := time.Now()
	for len(watching) > 0 {
		select {
		case <-ctx.Done():
			return ev
		case <-time.After(every):
		}
		now := GatherMembers(ctx, nodes, room, reads)
		if ctx.Err() != nil {
			return ev
		}
		var still []string
		for _, node := range watching {
			n, ok := now.Node(node)
			switch {
			case !ok:
			case n.Lost != "":
				progress(node, "lost: "+n.Lost)
			case n.unknown():
				still = append(still, node) // not answering: perhaps rebooting
			case !n.down():
				progress(node, "etcd came back by itself: "+n.state())
			default:
				still = append(still, node)
			}
		}
		ev, watching = now, still
		if len(watching) == 0 || time.Since(since) < after {
			continue
		}
		for i := range ev.Nodes {
			if n := &ev.Nodes[i]; slices.Contains(watching, n.Node) && n.down() {
				n.Lost = fmt.Sprintf("its etcd did not run healthy at any read for %s (machined restarts it every 5 s: it does not come back by itself)", time.Since(since).Round(time.Second))
				progress(n.Node, "lost: "+n.Lost)
			}
		}
		return ev
	}
	return ev
}
