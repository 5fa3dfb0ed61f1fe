package machined

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

// etcdHealthChanged lets the static pod controller catch up: a render that
// waited for etcd happens once it is healthy again, and the pods are torn
// down while the etcd service does not run (its Service resource is gone).
func (m *Machined) etcdHealthChanged() {
	if m.kubelet == nil {
		return
	}

	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()

	if m.running == nil {
		return // the node is still being made
	}

	if running, healthy := m.etcdServiceStatus(); (m.renderPending && healthy) || !running {
		m.renderPodLocked()
	}
}

// teardownPodsLocked is the static pod controller's teardownAll: the StaticPod resource
// goes, and the kubelet stops the pod at its next poll.
func (m *Machined) teardownPodsLocked() {
	m.renderPending = true

	if m.rendered == nil {
		return
	}

	m.rendered, m.renderedVersion = nil, ""

	if err := m.st.Destroy(m.ctx, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID).Metadata()); err != nil && !state.IsNotFoundError(err) && m.ctx.Err() == nil {
		m.logf("removing StaticPod: %v", err)
	}

	m.logf("k8s.ControlPlaneStaticPodController: etcd service is not running, static pods torn down")
}

// etcdServiceStatus is the etcd service as the static pod controller reads it: its
// Service resource, there only while it runs, and whether it is healthy.
func (m *Machined) etcdServiceStatus() (running, healthy bool) {
	svc, err := safe.StateGetByID[*v1alpha1.Service](m.ctx, m.st, "etcd")
	if err != nil {
		return false, false
	}

	return svc.TypedSpec().Running, svc.TypedSpec().Healthy
}
