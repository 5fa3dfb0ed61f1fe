package recovery

// What a run must cover: an incident type that acts on every etcd member
// (hence every control plane, each of which runs one) refuses, before any
// change, a run whose nodes leave one out, naming it.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
)

// coversEveryMember refuses a run of t whose nodes leave out an etcd
// member (members on nodes said to be gone excepted). When the members
// cannot be listed it goes on, saying so: preflight and the diagnosis say
// why etcd does not answer. The nodes are read at once, each with a
// deadline: without quorum, a member list waits for a leader until then.
func (r *run) coversEveryMember(ctx context.Context, t *IncidentType) error {
	nodes := r.tc.Nodes()
	now := r.members(ctx)
	covered := map[etcd.ID]bool{}
	var unread []string
	for _, n := range now.Nodes {
		if n.MemberID != 0 {
			covered[n.MemberID] = true
		}
		unread = append(unread, n.Errors...)
	}
	if len(now.Members) == 0 {
		why := "no node runs an etcd member"
		if len(unread) > 0 {
			why = strings.Join(unread, "; ")
		}
		r.warn(fmt.Sprintf("cannot list etcd's members (%s): make sure -n names every control plane, %s acts on every member", why, t.Name))
		return nil
	}
	var left, hosts []string
	for _, m := range now.Members {
		host := m.Host
		// A member whose node is given counts even when its etcd does not
		// answer: that is the member a lost-member incident acts on.
		if covered[m.ID] || slices.Contains(nodes, host) || slices.Contains(r.gone, host) {
			continue
		}
		left = append(left, fmt.Sprintf("%s (%s, %s)", talos.MemberIDString(uint64(m.ID)), orDefault(m.Hostname, "no name"), orDefault(host, "no client URL")))
		if host != "" {
			hosts = append(hosts, host)
		}
	}
	if len(left) == 0 {
		return nil
	}
	all := Target{Context: r.target.Context, Nodes: append(slices.Clone(nodes), hosts...)}
	return &refusedError{err: failure.Input("", "%s acts on every etcd member, hence on every control plane, and -n leaves out %s; nothing was changed", t.Name, strings.Join(left, ", ")),
		hints: []string{"run it on every control plane: " + all.NodesCmd("recover")}}
}
