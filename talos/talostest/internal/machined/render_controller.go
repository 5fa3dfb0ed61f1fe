package machined

import (
	"context"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// Rendered returns the kube-apiserver container rendered from the running config
// (nil on a worker), and the error when the last render failed (the pod then stays as it was).
func (m *Machined) Rendered() (*ContainerConfig, error) {
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()

	if m.rendered == nil {
		return nil, m.renderErr
	}

	c := *m.rendered

	return &c, m.renderErr
}

// renderPodLocked is machined's ControlPlaneStaticPodController: the StaticPod
// resource, which the kubelet fetches, rendered from the config, but only while
// the node's etcd is healthy (a render waits for it otherwise).
func (m *Machined) renderPodLocked() {
	running, healthy := m.etcdServiceStatus()
	if !running {
		m.teardownPodsLocked()

		return
	}

	if !healthy {
		if !m.renderPending {
			m.logf("k8s.ControlPlaneStaticPodController: etcd is not healthy, not rendering static pods")
		}

		m.renderPending = true

		return
	}

	m.renderPending = false
	spec := apiServerConfigSpec(m.running.prov)
	asc := k8s.NewAPIServerConfig()

	baseArgs := m.opts.BaseArgs
	if baseArgs == nil {
		baseArgs = TalosBaseArgs
	}

	cmd, err := renderCommand(baseArgs(&spec), spec.ExtraArgs)
	if err != nil {
		// machined's static pod controller fails the same way and leaves the pod as it was
		m.renderErr = err
		m.logf("k8s.ControlPlaneStaticPodController: error rendering kube-apiserver: %v", err)

		return
	}

	m.renderErr = nil
	rendered := ContainerConfig{Image: spec.Image, Command: cmd}

	cur, _ := m.st.Get(m.ctx, asc.Metadata())
	version := ""

	if cur != nil {
		version = cur.Metadata().Version().String()
	}

	// The manifest carries the APIServerConfig's version (talos.dev/config-version):
	// every change of that config is a new manifest, and so a new pod, even where
	// the container comes out as one that ran before.
	if m.rendered != nil && m.rendered.Equal(rendered) && m.renderedVersion == version {
		return
	}

	m.rendered, m.renderedVersion = &rendered, version

	pod, err := staticpod.Manifest(rendered, version)
	if err != nil {
		m.logf("rendering static pod: %v", err)

		return
	}

	if err := m.st.Modify(m.ctx, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID), func(r resource.Resource) error {
		r.(*k8s.StaticPod).TypedSpec().Pod = pod

		return nil
	}); err != nil {
		m.logf("writing StaticPod: %v", err)
	}
}

// WaitRendered waits until the static pod controller rendered the pod, or failed to.
func (m *Machined) WaitRendered(ctx context.Context) error {
	for {
		if r, err := m.Rendered(); r != nil || err != nil {
			return nil
		}

		if !sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}
