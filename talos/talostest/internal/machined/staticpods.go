package machined

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/breakglass-dev/breakglass/internal/encryption"
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
	// talos.dev/secrets-version: the encryption configuration the node
	// renders into kube-apiserver's secrets directory; a change of it is a
	// new pod, which reads the new file.
	secrets := secretsVersion(m.running.raw)
	if m.rendered != nil && m.rendered.Equal(rendered) && m.renderedVersion == version && m.renderedSecrets == secrets {
		return
	}

	m.rendered, m.renderedVersion, m.renderedSecrets = &rendered, version, secrets

	pod, err := staticpod.Manifest(rendered, version, secrets)
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

// secretsVersion stands for the version of the files Talos renders into
// kube-apiserver's secrets directory that follow the machine config: a hash
// of the encryption configuration it renders ("" when it renders none).
func secretsVersion(raw []byte) string {
	c, _, err := encryption.FromMachineConfig(raw)
	if err != nil {
		return ""
	}

	f, err := c.File()
	if err != nil {
		return ""
	}

	sum := sha256.Sum256(f)

	return hex.EncodeToString(sum[:8])
}

// WaitRendered waits until the static pod controller rendered the pod, or failed to.
func (m *Machined) WaitRendered(ctx context.Context) error {
	return m.waitUntil(ctx, func() bool {
		r, err := m.Rendered()

		return r != nil || err != nil
	})
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
