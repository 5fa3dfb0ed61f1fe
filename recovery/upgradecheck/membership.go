package upgradecheck

// The cluster is its membership, not the talosconfig context. The context
// names the nodes an operator last talked to (after `talosctl config node
// X`, one control plane of three); etcd's member list names the control
// planes that exist. Each member is matched to the control plane it runs on
// (the member ID its node's own etcd reports, else its peer or client
// address, else its name, the node's hostname), and each control plane to
// its member, both ways; every control plane is read, through its own
// address where the context does not name it. Talos discovery (talosctl
// get members) and the Node objects in etcd only add warnings where they
// disagree. Without a leader machined cannot list the members: the list of
// the member reached (serializable) and discovery name the control planes
// then.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// membership is which control planes the cluster has, as read.
type membership struct {
	// members are etcd's members, voters and learners, as membersFrom
	// lists them; membersErr says why no list was read.
	members     []*memberFacts
	membersErr  error
	membersFrom string
	// discovered are the cluster's nodes as Talos discovery knows them.
	discovered    []talos.DiscoveredMember
	discoveredErr error
	// disagree are where the member list, the control planes, discovery
	// and the Node objects do not say the same (warnings).
	disagree []string
	// quorumLost: fewer voting members than a quorum are healthy; etcd
	// serves no linearizable read or write (quorumWhy says what was seen).
	quorumLost bool
	quorumWhy  string
}

// memberReadTimeout bounds one read of a member, through its node or
// straight: a healthy member answers in milliseconds, one whose etcd does
// not run never does; a lost quorum is told in seconds.
const memberReadTimeout = 5 * time.Second

// readMembership reads Talos discovery and etcd's member list (through the
// Talos API of a control plane read), then every control plane they name
// that the context did not.
func (f *facts) readMembership(ctx context.Context, tc *talos.Client) {
	f.discoveredErr = errors.New("no node answered")
	for _, n := range f.nodes {
		if n.TalosErr != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
		f.discovered, f.discoveredErr = tc.DiscoveredMembers(cctx, n.Addr)
		cancel()
		if f.discoveredErr == nil {
			break
		}
	}
	f.listMembers(ctx, tc, f.nodes)
	before := len(f.nodes)
	f.readNewControlPlanes(ctx, tc)
	if f.members == nil && len(f.nodes) > before {
		f.listMembers(ctx, tc, f.nodes[before:]) // a control plane found by discovery may list them
		f.readNewControlPlanes(ctx, tc)
	}
}

// listMembers lists the members through the Talos API of those of the
// nodes that are control planes whose member knows a leader (machined's
// list needs one), all at once (talosctl etcd members), the first in
// order that answers.
func (f *facts) listMembers(ctx context.Context, tc *talos.Client, nodes []*nodeFacts) {
	var cps []string
	for _, n := range controlPlanes(nodes) {
		if n.Etcd != nil && n.Etcd.Leader != 0 {
			cps = append(cps, n.Addr)
		}
	}
	if len(cps) == 0 {
		f.membersErr = errors.New("no control plane's etcd member knows a leader: machined cannot list the members")
		return
	}
	lists, errs := talos.EachNode(cps, func(cp string) ([]talos.EtcdMember, error) {
		cctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
		defer cancel()
		return tc.EtcdMembers(cctx, cp)
	})
	for i, l := range lists {
		if errs[i] == nil {
			f.members, f.membersErr, f.membersFrom = nil, nil, "the Talos API of "+cps[i]
			for _, m := range l {
				f.members = append(f.members, &memberFacts{ID: etcd.ID(m.ID), Name: m.Hostname, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
			}
			return
		}
	}
	f.membersErr = errors.Join(errs...)
}

// readNewControlPlanes reads the control planes the members and discovery
// name that no node read is.
func (f *facts) readNewControlPlanes(ctx context.Context, tc *talos.Client) {
	var addrs, why []string
	add := func(addr, found string) {
		if addr != "" && !slices.Contains(addrs, addr) && f.nodeAt(addr, "") == nil {
			addrs, why = append(addrs, addr), append(why, found)
		}
	}
	for _, m := range f.members {
		if f.nodeOf(m) == nil {
			add(m.host(), "etcd member "+m.label())
		}
	}
	for _, d := range f.discovered {
		if d.ControlPlane && len(d.Addresses) > 0 && f.nodeAt(d.Addresses[0], d.Hostname) == nil {
			add(d.Addresses[0], "Talos discovery ("+termsafe.String(d.ID)+")")
		}
	}
	for i, n := range readNodes(ctx, tc, addrs, "") {
		n.Found = why[i]
		if n.Config == nil {
			n.ControlPlane = true // what named it says so; its config could not tell
		}
		f.nodes = append(f.nodes, n)
	}
}

// nodeAt is the node read at addr, or named name (its hostname).
func (f *facts) nodeAt(addr, name string) *nodeFacts {
	for _, n := range f.nodes {
		if n.Addr == addr || name != "" && n.Name == name {
			return n
		}
	}
	return nil
}

// nodeOf is the control plane the member runs on: the one whose own etcd
// reports its ID, else the one at its address, else the one named as it.
func (f *facts) nodeOf(m *memberFacts) *nodeFacts {
	cps := controlPlanes(f.nodes)
	for _, n := range cps {
		if n.Etcd != nil && etcd.ID(n.Etcd.MemberID) == m.ID {
			return n
		}
	}
	for _, n := range cps {
		if slices.Contains(m.hosts(), hostOf(n.Addr)) {
			return n
		}
	}
	for _, n := range cps {
		if m.Name != "" && n.Name == m.Name {
			return n
		}
	}
	return nil
}

// matchMembers ties each member to its control plane and each control
// plane to its member, and notes where they do not agree.
func (f *facts) matchMembers() {
	for _, n := range f.nodes {
		n.Member = nil
	}
	for _, m := range f.members {
		n := f.nodeOf(m)
		if n == nil {
			m.Node = ""
			f.disagree = append(f.disagree, fmt.Sprintf("etcd member %s runs on no control plane the gate could read (address %s)", m.label(), orNone(m.host())))
			continue
		}
		m.Node = n.Addr
		if n.Member != nil {
			f.disagree = append(f.disagree, fmt.Sprintf("control plane %s has two etcd members: %s and %s", n.label(), n.Member.label(), m.label()))
			continue
		}
		n.Member = m
		if m.Name != "" && n.Name != "" && m.Name != n.Name {
			f.disagree = append(f.disagree, fmt.Sprintf("etcd member %s runs on control plane %s, which is named %s", m.label(), n.Addr, termsafe.String(n.Name)))
		}
	}
	if f.discoveredErr != nil || len(f.discovered) == 0 {
		return // discovery off (cluster.discovery.enabled: false), or not read
	}
	for _, d := range f.discovered {
		if d.ControlPlane && !slices.ContainsFunc(f.nodes, func(n *nodeFacts) bool {
			return n.ControlPlane && (slices.Contains(d.Addresses, n.Addr) || n.Name == d.Hostname)
		}) {
			f.disagree = append(f.disagree, fmt.Sprintf("Talos discovery lists control plane %s (%s), which etcd's members do not name", termsafe.String(d.ID), strings.Join(d.Addresses, ", ")))
		}
	}
	for _, n := range controlPlanes(f.nodes) {
		if !slices.ContainsFunc(f.discovered, func(d talos.DiscoveredMember) bool {
			return slices.Contains(d.Addresses, n.Addr) || d.Hostname == n.Name
		}) {
			f.disagree = append(f.disagree, fmt.Sprintf("control plane %s is not among the members Talos discovery lists", n.label()))
		}
	}
}

// connectEtcd reaches etcd: at the endpoints given, or at every control
// plane's NODE:2379, with the client certificate given or one minted from
// the machine config's etcd CA. Endpoints given beside the Talos API must
// be this cluster's etcd: the member reached and the members it lists are
// those the Talos API reports, or etcd is refused.
func (f *facts) connectEtcd(ctx context.Context, tc *talos.Client, o recovery.EtcdOptions) *etcd.Client {
	var cps []string // the control planes whose config was read first: the CA is read from the first
	for _, n := range controlPlanes(f.nodes) {
		if n.Config != nil {
			cps = append(cps, n.Addr)
		}
	}
	for _, n := range controlPlanes(f.nodes) {
		if n.Config == nil {
			cps = append(cps, n.Addr)
		}
	}
	ec, err := recovery.ConnectEtcd(ctx, tc.WithNodes(cps), o)
	if err != nil {
		f.etcdErr = err
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
	defer cancel()
	info, err := ec.Cluster(cctx)
	if err != nil {
		ec.Close()
		f.etcdErr = err
		return nil
	}
	f.etcdReached = &info
	f.etcdMembers, _ = ec.MembersSerializable(cctx)
	if len(o.Endpoints) > 0 {
		if err := f.sameEtcd(); err != nil {
			ec.Close()
			f.etcdErr = err
			return nil
		}
	}
	return ec
}

// sameEtcd checks that the etcd reached is the one the Talos API reports:
// the member reached is one of its members, and the members it lists are
// the same. The Talos API carries no cluster ID: member IDs are compared.
func (f *facts) sameEtcd() error {
	want := map[etcd.ID]bool{}
	for _, m := range f.members {
		want[m.ID] = true
	}
	for _, n := range f.nodes {
		if n.Etcd != nil {
			want[etcd.ID(n.Etcd.MemberID)] = true
		}
	}
	if len(want) == 0 {
		return nil // nothing to compare with: the evidence names what was reached
	}
	var listed []etcd.ID
	for _, m := range f.etcdMembers {
		listed = append(listed, m.ID)
	}
	switch {
	case !want[f.etcdReached.MemberID]:
		return &foreignEtcdError{reached: *f.etcdReached, listed: listed, want: want}
	case f.members != nil && !sameIDs(listed, want):
		return &foreignEtcdError{reached: *f.etcdReached, listed: listed, want: want}
	}
	return nil
}

func sameIDs(ids []etcd.ID, set map[etcd.ID]bool) bool {
	if len(ids) != len(set) {
		return false
	}
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}

// foreignEtcdError: the etcd at the endpoints given is not the cluster's.
type foreignEtcdError struct {
	reached etcd.ClusterInfo
	listed  []etcd.ID
	want    map[etcd.ID]bool
}

func (e *foreignEtcdError) Error() string {
	var want []string
	for id := range e.want {
		want = append(want, id.String())
	}
	slices.Sort(want)
	return fmt.Sprintf("the etcd at --etcd-endpoints is not this cluster's: it is cluster %s, reached through member %s, listing %s; the Talos API of the control planes reports members %s",
		e.reached.ClusterID, e.reached.MemberID, idList(e.listed), strings.Join(want, ", "))
}

func (e *foreignEtcdError) Hints() []string {
	return []string{"leave --etcd-endpoints out (the gate reaches etcd at every control plane's NODE:2379), or name this cluster's members"}
}

func (e *foreignEtcdError) Unwrap() error { return failure.Refused }

func idList(ids []etcd.ID) string {
	var s []string
	for _, id := range ids {
		s = append(s, id.String())
	}
	if len(s) == 0 {
		return "no member"
	}
	return strings.Join(s, ", ")
}

// listMembersFromEtcd takes the members as the member reached lists them
// (serializable), when no control plane's Talos API could list them.
func (f *facts) listMembersFromEtcd() {
	if len(f.etcdMembers) == 0 {
		return
	}
	f.membersFrom = "etcd itself (serializable: machined's list needs a leader)"
	for _, m := range f.etcdMembers {
		f.members = append(f.members, &memberFacts{ID: m.ID, Name: m.Name, ClientURLs: m.ClientURLs, Learner: m.Learner})
	}
}

// readMemberStatus gives each member its status: through the Talos API of
// its control plane (read with the node), and from etcd itself (the quota
// and revision the Talos API does not carry, and the members no node
// answered for).
func (f *facts) readMemberStatus(ctx context.Context, ec *etcd.Client) {
	var urls []string
	for _, m := range f.members {
		if ec != nil && len(m.ClientURLs) > 0 {
			urls = append(urls, m.ClientURLs[0])
		} else {
			urls = append(urls, "")
		}
	}
	direct, _ := talos.EachNode(urls, func(u string) (*etcd.MemberStatus, error) {
		if u == "" {
			return nil, nil
		}
		sctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
		defer cancel()
		st := ec.StatusOf(sctx, u)
		return &st, nil
	})
	for i, m := range f.members {
		d := direct[i]
		var n *nodeFacts
		if m.Node != "" {
			n = f.nodeAt(m.Node, "")
		}
		switch {
		case n != nil && n.Etcd != nil:
			st := n.Etcd
			m.Status = &etcd.MemberStatus{Endpoint: "Talos API of " + n.Addr, MemberID: m.ID, Leader: etcd.ID(st.Leader),
				IsLeader: st.IsLeader(), Learner: st.IsLearner, Version: st.ProtocolVersion, DBSize: st.DBSize, DBSizeInUse: st.DBSizeInUse,
				RaftIndex: st.RaftIndex, RaftAppliedIndex: st.RaftAppliedIndex, RaftTerm: st.RaftTerm, Errors: st.Errors}
			if d != nil && d.Error == "" {
				m.Status.Quota, m.Status.Revision = d.Quota, d.Revision
			}
		case d != nil && d.Error == "":
			m.Status = d
		case d != nil:
			m.StatusErr = d.Error
		case n != nil && n.EtcdErr != nil:
			m.StatusErr = "through the Talos API of " + n.Addr + ": " + n.EtcdErr.Error()
		case ec == nil:
			m.StatusErr = "its node's Talos API did not answer for it, and etcd was not reached directly"
		default:
			m.StatusErr = "it has no client URL (a learner still joining?)"
		}
	}
}

// judgeQuorum tells whether etcd keeps its quorum: a majority of the
// voting members healthy. Without any member list, whether any control
// plane's member knows a leader.
func (f *facts) judgeQuorum() {
	if f.members == nil {
		for _, n := range controlPlanes(f.nodes) {
			if n.Etcd != nil && n.Etcd.Leader != 0 {
				return // a leader is known: the list failed for another reason
			}
		}
		f.quorumLost, f.quorumWhy = true, "no control plane's member knows a leader, and no member list could be read"
		return
	}
	voting, healthy := 0, 0
	for _, m := range f.members {
		if !m.Learner {
			voting++
			if len(memberProblems(m)) == 0 {
				healthy++
			}
		}
	}
	if voting > 0 && healthy < voting/2+1 {
		f.quorumLost = true
		f.quorumWhy = fmt.Sprintf("%d of %d voting members healthy, quorum %d", healthy, voting, voting/2+1)
	}
}

// hosts are the addresses the member serves on: its peer URLs', then its
// client URLs'.
func (m *memberFacts) hosts() []string {
	var out []string
	for _, u := range append(append([]string(nil), m.PeerURLs...), m.ClientURLs...) {
		if p, err := url.Parse(u); err == nil && p.Hostname() != "" && !slices.Contains(out, p.Hostname()) {
			out = append(out, p.Hostname())
		}
	}
	return out
}

// host is the address of the node the member runs on.
func (m *memberFacts) host() string {
	if hs := m.hosts(); len(hs) > 0 {
		return hs[0]
	}
	return ""
}

// label names a member: its ID and name.
func (m *memberFacts) label() string {
	if m.Name == "" {
		return m.ID.String()
	}
	return m.ID.String() + " (" + termsafe.String(m.Name) + ")"
}

// label names a node: its name and address.
func (n *nodeFacts) label() string {
	if n.Name == "" || n.Name == n.Addr {
		return n.Addr
	}
	return termsafe.String(n.Name) + " (" + n.Addr + ")"
}

// controlPlaneAddrs are the control planes' addresses.
func controlPlaneAddrs(ns []*nodeFacts) []string {
	var out []string
	for _, n := range controlPlanes(ns) {
		out = append(out, n.Addr)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// hostOf is the host of an address that may carry a port.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
