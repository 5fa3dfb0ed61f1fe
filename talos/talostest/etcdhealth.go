package talostest

// SetEtcdHealthy marks the node's etcd service healthy or not. On Talos the
// control-plane static pods are rendered only while the node's etcd service is
// healthy (internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go):
// while it is not, a config change never reaches the kube-apiserver pod.
func (n *Node) SetEtcdHealthy(healthy bool) {
	n.etcdDown.Store(!healthy)
	n.etcdHealthChanged()
}

// EtcdHealthy reports the node's etcd service health (true unless SetEtcdHealthy(false)).
func (n *Node) EtcdHealthy() bool { return !n.etcdDown.Load() }

// etcdHealthChanged lets the static pod controller catch up (filled in with the kubelet model).
func (n *Node) etcdHealthChanged() {}
