package recovery

// What a run must cover: an incident type that acts on every etcd member
// (hence every control plane, each of which runs one) refuses, before any
// change, a run whose nodes leave one out, naming it.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
)

// coversEveryMember refuses a run of t whose nodes leave out an etcd
// member (members on nodes said to be gone excepted). A node given by
// address or by name covers its member either way. When the members cannot
// be listed it goes on, saying so: preflight and the diagnosis say why etcd
// does not answer. The nodes are read at once, each with a deadline:
// without quorum, a member list waits for a leader until then.
func (r *run) coversEveryMember(ctx context.Context, t *IncidentType) error {
	nodes := r.tc.Nodes()
	now := r.members(ctx)
	var unread []string
	for _, n := range now.Nodes {
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
	var left, hosts, unreachable []string
	for _, m := range now.Members {
		// A member whose node is given counts even when its etcd does not
		// answer: that is the member a lost-member incident acts on.
		if _, ok := now.NodeOf(m); ok || m.Gone {
			continue
		}
		left = append(left, fmt.Sprintf("%s (%s, %s)", talos.MemberIDString(uint64(m.ID)), orDefault(m.Hostname, "no name"), orDefault(m.Host, "no client URL")))
		if m.Host != "" {
			hosts = append(hosts, m.Host)
			if m.HostSays == "unreachable" {
				unreachable = append(unreachable, m.Host)
			}
		}
	}
	if len(left) == 0 {
		return nil
	}
	all := Target{Context: r.target.Context, Nodes: append(slices.Clone(nodes), hosts...)}
	hints := []string{"run it on every control plane: " + all.NodesCmd("recover")}
	if len(unreachable) > 0 {
		hints = append(hints, fmt.Sprintf("if %s is gone for good (replaced without talosctl etcd leave), say so, and its member is removed: %s --nodes-gone %s",
			strings.Join(unreachable, ", "), r.target.NodesCmd("recover"), strings.Join(unreachable, ",")))
	}
	return &refusedError{err: failure.Input("", "%s acts on every etcd member, hence on every control plane, and -n leaves out %s; nothing was changed", t.Name, strings.Join(left, ", ")),
		hints: hints}
}
