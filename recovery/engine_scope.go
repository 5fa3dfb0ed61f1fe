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
// member (members on nodes said to be gone excepted). When the members
// cannot be listed it goes on, saying so: preflight and the diagnosis say
// why etcd does not answer.
func (r *run) coversEveryMember(ctx context.Context, t *IncidentType) error {
	nodes := r.tc.Nodes()
	covered := map[uint64]bool{}
	for _, n := range nodes {
		if st, err := r.tc.EtcdStatus(ctx, n); err == nil {
			covered[st.MemberID] = true
		}
	}
	var members []talos.EtcdMember
	var err error
	for _, n := range nodes {
		if members, err = r.tc.EtcdMembers(ctx, n); err == nil {
			break
		}
	}
	if err != nil {
		r.warn(fmt.Sprintf("cannot list etcd's members (%s): make sure -n names every control plane, %s acts on every member", shortErr(err), t.Name))
		return nil
	}
	var left, hosts []string
	for _, m := range members {
		host := m.Host()
		// A member whose node is given counts even when its etcd does not
		// answer: that is the member a lost-member incident acts on.
		if covered[m.ID] || slices.Contains(nodes, host) || slices.Contains(r.gone, host) {
			continue
		}
		left = append(left, fmt.Sprintf("%s (%s, %s)", talos.MemberIDString(m.ID), orDefault(m.Hostname, "no name"), orDefault(host, "no client URL")))
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
