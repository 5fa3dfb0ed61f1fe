package talos

import (
	"context"
	"sort"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
)

// DiscoveredMember is a node of the cluster as Talos discovery knows it
// (talosctl get members): what its affiliate published, up or not (an
// affiliate is kept for its TTL).
type DiscoveredMember struct {
	ID           string   // the resource ID: the node's name
	Hostname     string   // its hostname
	Addresses    []string // its addresses, the first the one it is reached at
	ControlPlane bool     // its machine type is controlplane (or init)
	OS           string   // "Talos (v1.13.8)"
}

// DiscoveredMembers lists the cluster's members as the node's discovery
// knows them (COSI Members in the cluster namespace), sorted by ID.
func (c *Client) DiscoveredMembers(ctx context.Context, node string) ([]DiscoveredMember, error) {
	list, err := safe.StateListAll[*cluster.Member](client.WithNode(ctx, node), c.api.COSI)
	if err != nil {
		return nil, c.nodeError(ctx, node, "list discovery members", err)
	}
	var out []DiscoveredMember
	for m := range list.All() {
		spec := m.TypedSpec()
		dm := DiscoveredMember{ID: m.Metadata().ID(), Hostname: spec.Hostname, OS: spec.OperatingSystem,
			ControlPlane: spec.MachineType == machine.TypeControlPlane || spec.MachineType == machine.TypeInit}
		for _, a := range spec.Addresses {
			dm.Addresses = append(dm.Addresses, a.String())
		}
		out = append(out, dm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
