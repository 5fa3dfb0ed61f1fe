package diagnose

// etcd's room: is it full (the NOSPACE alarm), and how full is each
// member. A full etcd refuses every write, so a kube-apiserver that
// (re)starts cannot finish its start-up writes; nothing about admission or
// flags matters until it has room again.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/talos"
)

// NoSpaceRunbook is the built-in runbook that gives a full etcd room again.
const NoSpaceRunbook = "etcd-nospace"

// EtcdNodes reads etcd's state through the Talos API; *talos.Client is one.
type EtcdNodes interface {
	EtcdStatus(ctx context.Context, node string) (talos.EtcdMemberStatus, error)
	EtcdAlarms(ctx context.Context, node string) ([]talos.EtcdAlarm, error)
}

// EtcdRoom reads etcd's state straight from etcd; *etcd.Client is one.
type EtcdRoom interface {
	Status(ctx context.Context) ([]etcd.MemberStatus, error)
	Alarms(ctx context.Context) ([]etcd.Alarm, error)
	MembersSerializable(ctx context.Context) ([]etcd.ListedMember, error)
}

// SpaceEvidence is each member's size and the alarms raised, as the Talos
// API and (with credentials) etcd itself tell them.
type SpaceEvidence struct {
	Members []MemberSpace `json:"members"`
	Alarms  []etcd.Alarm  `json:"alarms,omitempty"`
	// Errors say what could not be read.
	Errors []string `json:"errors,omitempty"`
}

// MemberSpace is one etcd member's room.
type MemberSpace struct {
	MemberID etcd.ID `json:"memberID"`
	Node     string  `json:"node,omitempty"` // the control plane it runs on (read through its Talos API)
	Endpoint string  `json:"endpoint,omitempty"`
	Leader   bool    `json:"leader"`
	// DBSize is the file's size, what the quota counts; DBSizeInUse the
	// part holding data.
	DBSize      int64 `json:"dbSize"`
	DBSizeInUse int64 `json:"dbSizeInUse"`
	// Quota and Revision are known when etcd was read directly (3.6).
	Quota    int64 `json:"quota,omitempty"`
	Revision int64 `json:"revision,omitempty"`
}

// NoSpace tells whether a NOSPACE alarm is raised.
func (s *SpaceEvidence) NoSpace() bool {
	return s != nil && slices.ContainsFunc(s.Alarms, func(a etcd.Alarm) bool { return a.Type == etcd.AlarmNoSpace })
}

// Fullest is the member with the largest file.
func (s *SpaceEvidence) Fullest() (MemberSpace, bool) {
	if s == nil || len(s.Members) == 0 {
		return MemberSpace{}, false
	}
	m := s.Members[0]
	for _, o := range s.Members[1:] {
		if o.DBSize > m.DBSize {
			m = o
		}
	}
	return m, true
}

// Figures says the fullest member's room in a few words: size, in use,
// quota, revision.
func (s *SpaceEvidence) Figures() string {
	m, ok := s.Fullest()
	if !ok {
		return "no member's size could be read"
	}
	out := fmt.Sprintf("member %s", m.MemberID)
	if m.Node != "" {
		out += " on " + m.Node
	}
	out += fmt.Sprintf(": database %s, %s in use", etcd.FormatBytes(m.DBSize), etcd.FormatBytes(m.DBSizeInUse))
	if m.Quota > 0 {
		out += fmt.Sprintf(", quota %s (%.0f%%)", etcd.FormatBytes(m.Quota), 100*float64(m.DBSize)/float64(m.Quota))
	} else {
		out += ", quota not known (etcd read through the Talos API only; etcd's default is 2 GiB)"
	}
	if m.Revision > 0 {
		out += fmt.Sprintf(", revision %d", m.Revision)
	}
	return out
}

// gatherSpace reads every member's status and the alarms, through the
// Talos API when nodes can (from each control plane, its own member) and
// from etcd when room is given, merging what each knows.
// The alarm reads go through raft: they end with raftCtx (Gather ends it
// when the members say there is no quorum).
func gatherSpace(ctx, raftCtx context.Context, nodes Nodes, room EtcdRoom) *SpaceEvidence {
	en, viaTalos := nodes.(EtcdNodes)
	if !viaTalos && room == nil {
		return nil
	}
	s := &SpaceEvidence{}
	alarms := map[etcd.Alarm]bool{}
	var direct []etcd.MemberStatus
	var directAlarms []etcd.Alarm
	var directErr, directAlarmsErr error
	done := make(chan struct{})
	go func() { // etcd itself, beside the nodes
		defer close(done)
		// The alarm list goes through raft: without quorum it would
		// wait for ever.
		ctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
		defer cancel()
		raftCtx, cancelRaft := context.WithTimeout(raftCtx, memberReadTimeout)
		defer cancelRaft()
		if room != nil {
			direct, directErr = room.Status(ctx)
			directAlarms, directAlarmsErr = room.Alarms(raftCtx)
			directAlarmsErr = causeOf(raftCtx, directAlarmsErr)
		}
	}()
	type nodeRead struct {
		node           string
		st             talos.EtcdMemberStatus
		alarms         []talos.EtcdAlarm
		err, alarmsErr error
	}
	var reads []nodeRead
	if viaTalos {
		reads, _ = talos.EachNode(nodes.Nodes(), func(n string) (nodeRead, error) {
			ctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
			defer cancel()
			raftCtx, cancelRaft := context.WithTimeout(raftCtx, memberReadTimeout)
			defer cancelRaft()
			r := nodeRead{node: n}
			r.st, r.err = en.EtcdStatus(ctx, n)
			r.alarms, r.alarmsErr = en.EtcdAlarms(raftCtx, n)
			r.alarmsErr = causeOf(raftCtx, r.alarmsErr)
			return r, nil
		})
	}
	<-done
	var talosStatus []nodeRead
	for _, r := range reads {
		if r.err != nil {
			s.Errors = append(s.Errors, "etcd status of "+r.node+": "+r.err.Error())
		} else {
			talosStatus = append(talosStatus, r)
		}
		if r.alarmsErr != nil {
			s.Errors = append(s.Errors, "etcd alarms of "+r.node+": "+r.alarmsErr.Error())
		}
		for _, a := range r.alarms {
			alarms[etcd.Alarm{MemberID: etcd.ID(a.MemberID), Type: a.Type}] = true
		}
	}
	if directErr != nil {
		s.Errors = append(s.Errors, "etcd status: "+directErr.Error())
	}
	if directAlarmsErr != nil {
		s.Errors = append(s.Errors, "etcd alarms: "+directAlarmsErr.Error())
	}
	for _, a := range directAlarms {
		alarms[a] = true
	}
	ids := map[etcd.ID]bool{}
	for _, t := range talosStatus {
		ids[etcd.ID(t.st.MemberID)] = true
	}
	for _, d := range direct {
		if d.Error == "" {
			ids[d.MemberID] = true
		}
	}
	for id := range ids {
		s.Members = append(s.Members, MemberSpace{MemberID: id})
	}
	sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].MemberID < s.Members[j].MemberID })
	byID := map[etcd.ID]*MemberSpace{}
	for i := range s.Members {
		byID[s.Members[i].MemberID] = &s.Members[i]
	}
	for _, t := range talosStatus {
		m := byID[etcd.ID(t.st.MemberID)]
		m.Node, m.Leader, m.DBSize, m.DBSizeInUse = t.node, t.st.IsLeader(), t.st.DBSize, t.st.DBSizeInUse
	}
	for _, d := range direct {
		if d.Error != "" {
			continue
		}
		m := byID[d.MemberID]
		m.Endpoint, m.Leader, m.Quota, m.Revision = d.Endpoint, d.IsLeader, d.Quota, d.Revision
		if d.DBSize > m.DBSize {
			m.DBSize, m.DBSizeInUse = d.DBSize, d.DBSizeInUse
		}
	}
	for a := range alarms {
		if a.Type != "" && a.Type != "NONE" {
			s.Alarms = append(s.Alarms, a)
		}
	}
	sort.Slice(s.Alarms, func(i, j int) bool {
		if s.Alarms[i].MemberID != s.Alarms[j].MemberID {
			return s.Alarms[i].MemberID < s.Alarms[j].MemberID
		}
		return s.Alarms[i].Type < s.Alarms[j].Type
	})
	sort.Strings(s.Errors)
	return s
}

// noSpace concludes etcd-nospace when etcd says it is full (a NOSPACE
// alarm), or when a kube-apiserver that is not ready logs etcd refusing
// its writes for lack of space (etcd's own state could not be read).
func (r *Report) noSpace(ev *Evidence, suspect, ready []string) bool {
	logged := r.has("etcd-nospace")
	if !ev.Space.NoSpace() && !(logged && len(suspect) > 0) {
		if logged {
			r.Notes = append(r.Notes, "kube-apiserver logged etcd refusing writes for lack of space (mvcc: database space exceeded), though no NOSPACE alarm is seen now: if it comes back, breakglass etcd usage says what fills etcd")
		}
		return false
	}
	r.Verdict, r.Runbook = EtcdNoSpace, NoSpaceRunbook
	var why string
	if ev.Space.NoSpace() {
		why = "alarm " + etcd.AlarmsText(ev.Space.Alarms)
	} else {
		why = "kube-apiserver logs \"mvcc: database space exceeded\"; its alarms could not be read"
	}
	r.Summary = fmt.Sprintf("etcd is full and refuses every write (%s); %s", why, ev.Space.Figures())
	switch {
	case len(suspect) > 0:
		r.Summary += fmt.Sprintf("; kube-apiserver is not ready on %s: its start-up writes are refused", nodeList(suspect, len(ev.Nodes)))
	case len(ready) > 0:
		r.Summary += "; kube-apiserver still answers, but any restart (an upgrade, a config change) leaves it unable to start, and leases and status updates fail meanwhile"
	}
	r.addNext("breakglass recover   # runbook etcd-nospace: snapshot, compact, defragment each member, disarm, check a write")
	r.addNext("breakglass etcd usage   # what filled it, by resource and namespace")
	r.Notes = append(r.Notes, "do not restart kube-apiserver or turn admission plugins off now: a restarting kube-apiserver cannot finish its start-up writes on a full etcd")
	return true
}

// writeSpace writes each member's room, the fullest first; with the
// verdict etcd-nospace it is part of the brief, otherwise evidence.
func writeSpace(b *strings.Builder, s *SpaceEvidence) {
	if s == nil {
		return
	}
	b.WriteString("\netcd members:\n")
	members := slices.Clone(s.Members)
	sort.SliceStable(members, func(i, j int) bool { return members[i].DBSize > members[j].DBSize })
	for _, m := range members {
		fmt.Fprintf(b, "  %s", m.MemberID)
		if m.Node != "" {
			fmt.Fprintf(b, " on %s", m.Node)
		}
		if m.Leader {
			b.WriteString(" (leader)")
		}
		fmt.Fprintf(b, ": database %s, %s in use", etcd.FormatBytes(m.DBSize), etcd.FormatBytes(m.DBSizeInUse))
		if m.Quota > 0 {
			fmt.Fprintf(b, ", quota %s", etcd.FormatBytes(m.Quota))
		}
		if m.Revision > 0 {
			fmt.Fprintf(b, ", revision %d", m.Revision)
		}
		b.WriteString("\n")
	}
	if len(s.Alarms) > 0 {
		fmt.Fprintf(b, "  alarms: %s\n", etcd.AlarmsText(s.Alarms))
	}
	for _, e := range s.Errors {
		fmt.Fprintf(b, "  not read: %s\n", e)
	}
}
