package talos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// The etcd maintenance calls of the machine API (talosctl etcd status|members|alarm
// list|alarm disarm|defrag). Each acts on the etcd member of the node it is sent to,
// which must be a control plane: machined makes a client of its local member for it.
// Roles (machined's table): status, members and alarm list for os:admin, os:operator,
// os:reader and os:etcd:backup; alarm disarm and defragment for os:admin and os:operator.

// EtcdMemberStatus is one member's view of itself, as EtcdStatus returns it. The
// machine API does not carry the member's revision.
type EtcdMemberStatus struct {
	MemberID         uint64
	Leader           uint64 // the leader's member ID as this member knows it; 0: none
	ProtocolVersion  string // the etcd version, e.g. "3.6.5"
	StorageVersion   string
	DBSize           int64 // bytes of the backend file: what the space quota counts
	DBSizeInUse      int64 // bytes holding live data; the rest is freed by a defragmentation
	RaftIndex        uint64
	RaftAppliedIndex uint64
	RaftTerm         uint64
	IsLearner        bool
	Errors           []string // the member's errors, e.g. "memberID:N alarm:NOSPACE " while an alarm is raised
}

// IsLeader tells whether the member is the leader.
func (s EtcdMemberStatus) IsLeader() bool { return s.Leader != 0 && s.Leader == s.MemberID }

// EtcdAlarm is an alarm raised by one member. Alarms are replicated: every member lists
// those of the whole cluster.
type EtcdAlarm struct {
	MemberID uint64
	Type     string // "NOSPACE", "CORRUPT" or "NONE"
}

// EtcdMember is a member of the etcd cluster, as the node's member lists it.
type EtcdMember struct {
	ID         uint64
	Hostname   string // the member's name: the Talos node's hostname
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// Host is the address the member serves its clients on: its node.
func (m EtcdMember) Host() string {
	for _, u := range m.ClientURLs {
		if p, err := url.Parse(u); err == nil && p.Hostname() != "" {
			return p.Hostname()
		}
	}
	return ""
}

// MemberIDString writes a member ID as talosctl and etcdctl do (hex, 16 digits).
func MemberIDString(id uint64) string { return fmt.Sprintf("%016x", id) }

// EtcdStatus reads the status of the node's etcd member.
func (c *Client) EtcdStatus(ctx context.Context, node string) (EtcdMemberStatus, error) {
	const op = "read etcd status"
	resp, err := c.api.EtcdStatus(client.WithNode(ctx, node))
	if err != nil {
		return EtcdMemberStatus{}, c.etcdError(ctx, node, op, err, false)
	}
	for _, m := range resp.GetMessages() {
		if st := m.GetMemberStatus(); st != nil {
			return EtcdMemberStatus{
				MemberID:         st.GetMemberId(),
				Leader:           st.GetLeader(),
				ProtocolVersion:  st.GetProtocolVersion(),
				StorageVersion:   st.GetStorageVersion(),
				DBSize:           st.GetDbSize(),
				DBSizeInUse:      st.GetDbSizeInUse(),
				RaftIndex:        st.GetRaftIndex(),
				RaftAppliedIndex: st.GetRaftAppliedIndex(),
				RaftTerm:         st.GetRaftTerm(),
				IsLearner:        st.GetIsLearner(),
				Errors:           st.GetErrors(),
			}, nil
		}
	}
	return EtcdMemberStatus{}, &NodeError{Node: node, Op: op, Err: errors.New("empty answer")}
}

// EtcdAlarms lists the cluster's etcd alarms as the node's member knows them, sorted.
func (c *Client) EtcdAlarms(ctx context.Context, node string) ([]EtcdAlarm, error) {
	resp, err := c.api.EtcdAlarmList(client.WithNode(ctx, node))
	if err != nil {
		return nil, c.etcdError(ctx, node, "list etcd alarms", err, false)
	}
	return alarms(resp.GetMessages()), nil
}

// EtcdAlarmDisarm disarms every alarm of the cluster, whichever member raised it (etcd's
// client does so for the empty request machined sends), through the node's member, and
// returns those it disarmed. A NOSPACE alarm disarmed while the database is still over
// its quota is raised again by the next write.
func (c *Client) EtcdAlarmDisarm(ctx context.Context, node string) ([]EtcdAlarm, error) {
	resp, err := c.api.EtcdAlarmDisarm(client.WithNode(ctx, node))
	if err != nil {
		return nil, c.etcdError(ctx, node, "disarm etcd alarms", err, true)
	}
	return alarms(resp.GetMessages()), nil
}

// EtcdDefragment defragments the node's member. The member serves nothing until it is
// done (seconds to minutes with a large database): one member at a time, the leader last.
func (c *Client) EtcdDefragment(ctx context.Context, node string) error {
	if _, err := c.api.EtcdDefragment(client.WithNode(ctx, node)); err != nil {
		return c.etcdError(ctx, node, "defragment etcd", err, true)
	}
	return nil
}

// EtcdMembers lists the etcd cluster's members as the node's own member knows them
// (QueryLocal, as talosctl etcd members asks).
func (c *Client) EtcdMembers(ctx context.Context, node string) ([]EtcdMember, error) {
	resp, err := c.api.EtcdMemberList(client.WithNode(ctx, node), &machine.EtcdMemberListRequest{QueryLocal: true})
	if err != nil {
		return nil, c.etcdError(ctx, node, "list etcd members", err, false)
	}
	var out []EtcdMember
	for _, m := range resp.GetMessages() {
		for _, e := range m.GetMembers() {
			out = append(out, EtcdMember{
				ID:         e.GetId(),
				Hostname:   e.GetHostname(),
				PeerURLs:   e.GetPeerUrls(),
				ClientURLs: e.GetClientUrls(),
				IsLearner:  e.GetIsLearner(),
			})
		}
	}
	return out, nil
}

// alarms gathers the alarms of the answer's messages, sorted by member and type
// (etcd lists them in map order).
func alarms[M interface {
	GetMemberAlarms() []*machine.EtcdMemberAlarm
}](messages []M) []EtcdAlarm {
	out := []EtcdAlarm{}
	for _, m := range messages {
		for _, a := range m.GetMemberAlarms() {
			out = append(out, EtcdAlarm{MemberID: a.GetMemberId(), Type: a.GetAlarm().String()})
		}
	}
	slices.SortFunc(out, func(a, b EtcdAlarm) int {
		return cmp.Or(cmp.Compare(a.MemberID, b.MemberID), cmp.Compare(a.Type, b.Type))
	})
	return out
}

// etcdError is nodeError for an etcd call: a worker's refusal becomes
// ErrNotControlPlane, and a refused role is told which roles the call needs.
func (c *Client) etcdError(ctx context.Context, node, op string, err error, changes bool) error {
	if isNotControlPlane(err) {
		return NewNodeError(node, op, fmt.Errorf("%w: etcd does not run there", ErrNotControlPlane),
			"target only the control-plane nodes: -n CP1,CP2,CP3")
	}
	e := c.nodeError(ctx, node, op, err)
	var ne *NodeError
	if errors.Is(e, ErrPermission) && errors.As(e, &ne) {
		role := c.role
		if role == "" {
			role = "unknown"
		}
		needs := "os:admin, os:operator, os:reader or os:etcd:backup"
		if changes {
			needs = "os:admin or os:operator"
		}
		ne.hints = []string{fmt.Sprintf("this talosconfig has role %s; %s needs %s: use such a talosconfig (--talosconfig PATH)", role, op, needs)}
	}
	return e
}

// isNotControlPlane recognises machined's refusal of a control-plane call on a
// worker (Unimplemented, "... is only available on control plane nodes").
func isNotControlPlane(err error) bool {
	return err != nil && strings.Contains(err.Error(), "only available on control plane nodes")
}
