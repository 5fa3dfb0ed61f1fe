package machined

import (
	"github.com/cosi-project/runtime/pkg/resource"

	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// publishServices writes machined's COSI Service resources (namespace
// runtime, Services.v1alpha1.talos.dev), which any role may read and which
// the static pod controller watches for etcd: Running, Healthy, or Unknown
// for a service without a health check. etcd follows the node's etcd health.
func (m *Machined) publishServices() {
	up := m.etcdUp()
	for _, d := range m.services() {
		if d.id == "etcd" && m.etcd != nil {
			continue // the real service writes its own (etcdservice.go)
		}

		spec := v1alpha1.ServiceSpec{Running: true, Healthy: d.healthCheck, Unknown: !d.healthCheck}
		if d.id == "etcd" {
			spec.Healthy = up
		}
		if err := m.st.Modify(m.ctx, v1alpha1.NewService(d.id), func(r resource.Resource) error {
			*r.(*v1alpha1.Service).TypedSpec() = spec

			return nil
		}); err != nil && m.ctx.Err() == nil {
			m.logf("writing Service %s: %v", d.id, err)
		}
	}

	m.publishMachineStatus()
}
