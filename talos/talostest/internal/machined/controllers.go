package machined

import (
	"context"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// runControllers starts the controllers that follow what other parts write: the
// MachineStatus follows the Service resources and the static pods' status (the
// MachineStatusController), and the static pods follow the etcd service (the
// ControlPlaneStaticPodController).
func (m *Machined) runControllers() error {
	services := resource.NewMetadata(v1alpha1.NamespaceName, v1alpha1.ServiceType, "", resource.VersionUndefined)

	if err := follow(m.ctx, m.st, m.publishMachineStatus, services,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodStatusType, "", resource.VersionUndefined)); err != nil {
		return err
	}

	return follow(m.ctx, m.st, m.etcdHealthChanged, services)
}

// follow calls react after changes of resources of the kinds, as machined's controllers
// react to their inputs, until ctx ends. The watches are set before it returns; a burst
// of changes may make one call.
func follow(ctx context.Context, st state.State, react func(), kinds ...resource.Kind) error {
	kick := make(chan struct{}, 1)

	for _, kind := range kinds {
		ch := make(chan state.Event)
		if err := st.WatchKind(ctx, kind, ch); err != nil {
			return err
		}

		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-ch:
					select {
					case kick <- struct{}{}:
					default:
					}

					if ev.Type == state.Errored { // the watch fell behind and ended: watch again
						ch = make(chan state.Event)
						if st.WatchKind(ctx, kind, ch) != nil {
							return
						}
					}
				}
			}
		}()
	}

	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
				react()
			}
		}
	}()

	return nil
}
