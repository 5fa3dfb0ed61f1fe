package talos

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
)

// Discovery lists every node of the cluster, its address and machine type,
// through any node, with the weakest role.
func TestDiscoveredMembers(t *testing.T) {
	c, _, _ := memberCluster(t)
	cl := connectRole(t, c, role.Reader)
	ms, err := cl.DiscoveredMembers(t.Context(), c.Nodes[0].IP)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("members %+v", ms)
	}
	for i, n := range c.Nodes {
		m := ms[i]
		if m.ID != n.Name || m.Hostname != n.Name || len(m.Addresses) != 1 || m.Addresses[0] != n.IP || m.ControlPlane != (i == 0) || m.OS != "Talos (v1.13.8)" {
			t.Errorf("member %d: %+v, node %s %s", i, m, n.Name, n.IP)
		}
	}
}
