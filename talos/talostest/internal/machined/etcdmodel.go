package machined

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
)

// EtcdModel is the cluster's etcd when no member runs on the nodes (no
// ClusterOptions.Etcd): its members are the control planes, each up while its node
// says so (SetEtcdHealthy, not rebooting), its leader the first one up while a quorum
// is. One per cluster, shared by the nodes' machineds as the members share their raft.
type EtcdModel struct {
	cluster string

	mu      sync.Mutex
	members []*etcdModelMember
}

type etcdModelMember struct {
	model *EtcdModel
	name  string
	ip    string
	id    uint64
	up    func() bool
}

// NewEtcdModel returns the model etcd of the named cluster, with no member yet.
func NewEtcdModel(cluster string) *EtcdModel { return &EtcdModel{cluster: cluster} }

// join makes the control plane name (at ip) a member, up while up says so.
func (e *EtcdModel) join(name, ip string, up func() bool) *etcdModelMember {
	e.mu.Lock()
	defer e.mu.Unlock()

	sum := sha256.Sum256([]byte(e.cluster + "/" + name))
	m := &etcdModelMember{model: e, name: name, ip: ip, up: up, id: binary.BigEndian.Uint64(sum[:8]) | 1} // never 0: "no member"
	e.members = append(e.members, m)

	return m
}

// view returns the members and the leader (nil without a quorum of members up).
func (e *EtcdModel) view() ([]*etcdModelMember, *etcdModelMember) {
	e.mu.Lock()
	members := slices.Clone(e.members)
	e.mu.Unlock()

	var up []*etcdModelMember

	for _, m := range members {
		if m.up() {
			up = append(up, m)
		}
	}

	if len(up) <= len(members)/2 {
		return members, nil
	}

	return members, up[0]
}

// anyUp tells whether any member's etcd answers.
func (e *EtcdModel) anyUp() bool {
	members, _ := e.view()

	return slices.ContainsFunc(members, func(m *etcdModelMember) bool { return m.up() })
}

// SetEtcdHealthy marks the node's etcd service healthy or not. On Talos the
// control-plane static pods are rendered only while the node's etcd service is
// healthy (internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go):
// while it is not, a config change is applied (MachineConfig, APIServerConfig)
// but the StaticPod resource and the kubelet keep the old pod; the render
// happens when etcd is healthy again.
//
// It models etcd on a node without a real member: with ClusterOptions.Etcd the health
// is the real service's (etcdservice.go), and calling it is a mistake (it panics).
func (m *Machined) SetEtcdHealthy(healthy bool) {
	if m.etcd != nil {
		panic("talostest: SetEtcdHealthy on a node that runs a real etcd member (ClusterOptions.Etcd)")
	}

	m.etcdDown.Store(!healthy)
	m.publishServices()
	m.etcdHealthChanged()
}

// EtcdHealthy reports the node's etcd service health: with ClusterOptions.Etcd, Running
// and its last health check passed; otherwise true unless SetEtcdHealthy(false).
func (m *Machined) EtcdHealthy() bool {
	if m.etcd != nil {
		_, healthy := m.etcdServiceStatus()

		return healthy
	}

	return !m.etcdDown.Load()
}
