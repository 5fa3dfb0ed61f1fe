package talostest

import (
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// SetEtcdHealthy marks the node's etcd service healthy or not. On Talos the
// control-plane static pods are rendered only while the node's etcd service is
// healthy (internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go):
// while it is not, a config change is applied (MachineConfig, APIServerConfig)
// but the StaticPod resource and the kubelet keep the old pod; the render
// happens when etcd is healthy again.
//
// It models etcd on a node without a real member: with ClusterOptions.Etcd the health
// is the real service's (etcdservice.go), and calling it is a mistake (it panics).
func (n *Node) SetEtcdHealthy(healthy bool) {
	if n.etcd != nil {
		panic("talostest: SetEtcdHealthy on a node that runs a real etcd member (ClusterOptions.Etcd)")
	}

	n.etcdDown.Store(!healthy)
	n.publishServices()
	n.etcdHealthChanged()
}

// EtcdHealthy reports the node's etcd service health: with ClusterOptions.Etcd, Running
// and its last health check passed; otherwise true unless SetEtcdHealthy(false).
func (n *Node) EtcdHealthy() bool {
	if n.etcd != nil {
		return n.etcd.HealthyRunning()
	}

	return !n.etcdDown.Load()
}

// etcdHealthChanged lets the static pod controller catch up: a render that
// waited for etcd happens once it is healthy again, and the pods are torn
// down while the etcd service does not run (its Service resource is gone).
func (n *Node) etcdHealthChanged() {
	if n.kubelet == nil {
		return
	}

	n.cfgMu.Lock()
	defer n.cfgMu.Unlock()

	if n.running == nil {
		return // the node is still being made
	}

	if running, healthy := n.etcdServiceStatus(); (n.renderPending && healthy) || !running {
		n.renderPodLocked()
	}
}

// teardownPodsLocked is the static pod controller's teardownAll: the StaticPod resource
// goes, and the kubelet stops the pod at its next poll.
func (n *Node) teardownPodsLocked() {
	n.renderPending = true

	if n.rendered == nil {
		return
	}

	n.rendered, n.renderedVersion = nil, ""

	if err := n.st.Destroy(n.ctx, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID).Metadata()); err != nil && !state.IsNotFoundError(err) && n.ctx.Err() == nil {
		n.logf("removing StaticPod: %v", err)
	}

	n.logf("k8s.ControlPlaneStaticPodController: etcd service is not running, static pods torn down")
}

// etcdServiceStatus is the etcd service as the static pod controller reads it: its
// Service resource, there only while it runs, and whether it is healthy.
func (n *Node) etcdServiceStatus() (running, healthy bool) {
	svc, err := safe.StateGetByID[*v1alpha1.Service](n.ctx, n.st, "etcd")
	if err != nil {
		return false, false
	}

	return svc.TypedSpec().Running, svc.TypedSpec().Healthy
}
