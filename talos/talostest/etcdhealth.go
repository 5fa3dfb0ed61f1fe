package talostest

// SetEtcdHealthy marks the node's etcd service healthy or not. On Talos the
// control-plane static pods are rendered only while the node's etcd service is
// healthy (internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go):
// while it is not, a config change is applied (MachineConfig, APIServerConfig)
// but the StaticPod resource and the kubelet keep the old pod; the render
// happens when etcd is healthy again.
func (n *Node) SetEtcdHealthy(healthy bool) {
	n.etcdDown.Store(!healthy)
	n.publishServices()
	n.etcdHealthChanged()
}

// EtcdHealthy reports the node's etcd service health (true unless SetEtcdHealthy(false)).
func (n *Node) EtcdHealthy() bool { return !n.etcdDown.Load() }

// etcdHealthChanged lets the static pod controller catch up: a render that
// waited for etcd happens once it is healthy again.
func (n *Node) etcdHealthChanged() {
	if n.kubelet == nil {
		return
	}

	n.cfgMu.Lock()
	defer n.cfgMu.Unlock()

	if n.renderPending && n.EtcdHealthy() {
		n.renderPodLocked()
	}
}
