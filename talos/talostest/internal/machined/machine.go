package machined

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	stdx509 "crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"gopkg.in/yaml.v3"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/authz"
)

// machineService implements the MachineService calls breakglass uses; every other
// method answers Unimplemented.
type machineService struct {
	machine.UnimplementedMachineServiceServer

	m *Machined

	etcdHealth etcdHealthLog // services.go
}

// Version implements machine.MachineServiceServer.
func (s *machineService) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{
		Messages: []*machine.Version{{
			Version: &machine.VersionInfo{
				Tag:       s.m.talosVersion,
				Sha:       "talostest",
				GoVersion: "go1.26",
				Os:        "linux",
				Arch:      "amd64",
			},
			Platform: &machine.PlatformInfo{Name: "metal", Mode: "metal"},
			Features: &machine.FeaturesInfo{Rbac: true},
		}},
	}, nil
}

// ApplyConfiguration follows machined's handler (v1alpha1_server.go) step by step.
func (s *machineService) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	m := s.m

	if !m.applyMu.TryLock() {
		return nil, status.Error(codes.FailedPrecondition, "another apply configuration is already in progress")
	}
	defer m.applyMu.Unlock()

	if m.rebooting.Load() {
		return nil, status.Error(codes.FailedPrecondition, "configuration was already applied and node is rebooting, cannot apply more configuration changes until next reboot")
	}

	if !authz.Roles(ctx).Includes(role.Admin) {
		return nil, authz.ErrNotAuthorized
	}

	if hook := m.opts.ApplyHook; hook != nil {
		hook()
	}

	mode := in.Mode.String()
	modeDetails := "Applied configuration with a reboot"
	modeErr := ""

	// machined cancels a pending try-mode rollback before it even looks at the new
	// config: any non-TRY request, dry run or invalid included, cancels it
	if in.Mode != machine.ApplyConfigurationRequest_TRY {
		m.cancelRollback()
	}

	cfg, err := m.parseConfig(in.GetData())
	if err != nil {
		return nil, err
	}

	warnings := configWarnings(cfg)

	switch in.Mode { //nolint:exhaustive
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err := m.canApplyImmediate(cfg); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}

		modeDetails = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_STAGED:
		modeDetails = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_AUTO:
		if err := m.canApplyImmediate(cfg); err != nil {
			in.Mode = machine.ApplyConfigurationRequest_REBOOT
			modeDetails = "Applied configuration with a reboot"
			modeErr = ": " + err.Error()
		} else {
			in.Mode = machine.ApplyConfigurationRequest_NO_REBOOT
			modeDetails = "Applied configuration without a reboot"
		}

		mode = fmt.Sprintf("%s(%s)", mode, in.Mode)
	}

	if in.DryRun {
		diff, err := configdiff.DiffConfigs(m.currentConfig().prov, cfg.prov)
		if err != nil {
			return nil, fmt.Errorf("failed to generate diff: %w", err)
		}

		if diff == "" {
			diff = "No changes."
		}

		return &machine.ApplyConfigurationResponse{
			Messages: []*machine.ApplyConfiguration{{
				Mode:        in.Mode,
				ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\nConfig diff:\n\n%s", modeDetails, diff),
			}},
		}, nil
	}

	m.logf("apply config request: mode %s", strings.ToLower(mode))

	switch in.Mode { //nolint:exhaustive
	case machine.ApplyConfigurationRequest_TRY:
		timeout := constants.ConfigTryTimeout
		if in.TryModeTimeout != nil {
			timeout = in.TryModeTimeout.AsDuration()
		}

		modeDetails += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout.String())

		m.cfgMu.Lock()
		m.rollbackAfterLocked(m.host.Scaled(timeout))
		m.setRunningLocked(cfg)
		m.cfgMu.Unlock()
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		m.cfgMu.Lock()
		m.setPersistentLocked(cfg)
		m.setRunningLocked(cfg)
		m.cfgMu.Unlock()
	case machine.ApplyConfigurationRequest_STAGED:
		m.cfgMu.Lock()
		m.setPersistentLocked(cfg)
		m.cfgMu.Unlock()
	case machine.ApplyConfigurationRequest_REBOOT:
		m.cfgMu.Lock()
		m.setPersistentLocked(cfg)
		m.cfgMu.Unlock()

		m.rebooting.Store(true)

		go m.reboot()
	default:
		return nil, fmt.Errorf("incorrect mode '%s' specified for the apply config call", in.Mode.String())
	}

	return &machine.ApplyConfigurationResponse{
		Messages: []*machine.ApplyConfiguration{{
			Mode:        in.Mode,
			Warnings:    warnings,
			ModeDetails: modeDetails + modeErr,
		}},
	}, nil
}

// configWarnings are the warnings machined returns with an apply (not with a dry run,
// whose reply it builds before): those of the config's Validate, then those of its
// RuntimeValidate that do not depend on the machine (it also looks for sd-boot, and
// refuses Kubernetes images this Talos does not support, which the emulator does not).
func configWarnings(cfg *nodeConfig) []string {
	warnings, _ := cfg.prov.Validate(validationMode{}) //nolint:errcheck // parseConfig refused the errors

	if raw := cfg.prov.RawV1Alpha1(); raw != nil && raw.MachineConfig != nil && len(raw.MachineConfig.Install().Extensions()) > 0 {
		warnings = append(warnings, ".machine.install.extensions is deprecated, please see https://docs.siderolabs.com/talos/latest/platform-specific-installations/boot-assets")
	}

	return warnings
}

// canApplyImmediate is machined's Runtime.CanApplyImmediate: the v1alpha1 documents
// must be equal once the sections Talos applies live are copied over from the
// running config (.debug, .cluster and a list of .machine keys).
func (m *Machined) canApplyImmediate(cfg *nodeConfig) error {
	currentConfig := m.currentConfig().prov.RawV1Alpha1()
	if currentConfig == nil {
		return errors.New("current config is not v1alpha1")
	}

	newConfig := cfg.prov.RawV1Alpha1()
	if newConfig == nil {
		return errors.New("new config is not v1alpha1")
	}

	newConfig = newConfig.DeepCopy()

	newConfig.ConfigDebug = currentConfig.ConfigDebug
	newConfig.ClusterConfig = currentConfig.ClusterConfig

	if newConfig.MachineConfig != nil && currentConfig.MachineConfig != nil {
		nm, cm := newConfig.MachineConfig, currentConfig.MachineConfig
		nm.MachineCA = cm.MachineCA
		nm.MachineAcceptedCAs = cm.MachineAcceptedCAs
		nm.MachineTime = cm.MachineTime //nolint:staticcheck
		nm.MachineCertSANs = cm.MachineCertSANs
		nm.MachineInstall = cm.MachineInstall
		nm.MachineNetwork = cm.MachineNetwork //nolint:staticcheck
		nm.MachineSysfs = cm.MachineSysfs
		nm.MachineSysctls = cm.MachineSysctls
		nm.MachineLogging = cm.MachineLogging
		nm.MachineControlPlane = cm.MachineControlPlane
		nm.MachineKubelet = cm.MachineKubelet
		nm.MachineKernel = cm.MachineKernel
		nm.MachineRegistries = cm.MachineRegistries //nolint:staticcheck
		nm.MachinePods = cm.MachinePods
		nm.MachineSeccompProfiles = cm.MachineSeccompProfiles
		nm.MachineNodeAnnotations = cm.MachineNodeAnnotations
		nm.MachineNodeLabels = cm.MachineNodeLabels
		nm.MachineNodeTaints = cm.MachineNodeTaints

		if nm.MachineFeatures != nil && cm.MachineFeatures != nil {
			nm.MachineFeatures.KubernetesTalosAPIAccessConfig = cm.MachineFeatures.KubernetesTalosAPIAccessConfig
			nm.MachineFeatures.KubePrismSupport = cm.MachineFeatures.KubePrismSupport
			nm.MachineFeatures.HostDNSSupport = cm.MachineFeatures.HostDNSSupport
			nm.MachineFeatures.ImageCacheSupport = cm.MachineFeatures.ImageCacheSupport
			nm.MachineFeatures.FeatureNodeAddressSortAlgorithm = cm.MachineFeatures.FeatureNodeAddressSortAlgorithm
		}
	}

	if !reflect.DeepEqual(currentConfig, newConfig) {
		diff, err := configdiff.DiffConfigs(container.NewV1Alpha1(currentConfig), container.NewV1Alpha1(newConfig))
		if err != nil {
			return fmt.Errorf("error calculating diff: %w", err)
		}

		return fmt.Errorf("this config change can't be applied in immediate mode\ndiff:\n%s", diff)
	}

	return nil
}

// rollbackAfterLocked arms the try-mode rollback to the config running now, replacing
// any pending one (as machined does: two TRYs in a row lose the first original).
func (m *Machined) rollbackAfterLocked(timeout time.Duration) {
	orig := m.running

	if m.rollbackTimer != nil {
		m.rollbackTimer.Stop()
	}

	var t *time.Timer

	t = time.AfterFunc(timeout, func() {
		m.cfgMu.Lock()
		defer m.cfgMu.Unlock()

		if m.rollbackTimer != t {
			return // cancelled or replaced meanwhile
		}

		m.rollbackTimer = nil
		m.rollbackDeadline = time.Time{}

		m.logf("rolling back the configuration")
		m.setRunningLocked(orig)
	})

	m.rollbackTimer = t
	m.rollbackDeadline = time.Now().Add(timeout)
}

func (m *Machined) cancelRollback() {
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()

	if m.rollbackTimer != nil {
		m.rollbackTimer.Stop()
		m.rollbackTimer = nil
		m.rollbackDeadline = time.Time{}
	}
}

// reboot emulates the reboot after a REBOOT apply: the Talos API goes away for
// ClusterOptions.RebootDuration, then the node comes back running its persistent config.
func (m *Machined) reboot() {
	// the reboot sequence starts after the reply is on its way, as on a node
	select {
	case <-m.ctx.Done():
		return
	case <-time.After(100 * time.Millisecond):
	}

	m.logf("rebooting")

	wasUp := m.api.Up()
	m.api.Stop()

	select {
	case <-m.ctx.Done():
		return
	case <-time.After(m.rebootDuration()):
	}

	m.cancelRollback()

	m.cfgMu.Lock()
	m.setRunningLocked(m.persistent)
	m.cfgMu.Unlock()

	m.rebooting.Store(false)

	if wasUp {
		if err := m.api.Start(); err != nil {
			m.logf("restarting API after reboot: %v", err)
		}
	}
}

// criInspector checks a Logs/Containers request's namespace and driver as machined does.
func criInspector(namespace string, driver common.ContainerDriver) error {
	if namespace == "" {
		return status.Errorf(codes.InvalidArgument, "namespace can't be empty")
	}

	switch driver {
	case common.ContainerDriver_CRI:
		if namespace != constants.K8sContainerdNamespace {
			return errors.New("CRI inspector is supported only for K8s namespace")
		}

		return nil
	case common.ContainerDriver_CONTAINERD:
		return nil
	default:
		return status.Errorf(codes.InvalidArgument, "unsupported driver %q", driver)
	}
}

// Logs serves machined's and kubelet's logs (namespace "system") and the kube-apiserver
// container's logs (namespace k8s.io, CRI driver, id "kube-system/kube-apiserver-<node>:kube-apiserver[:<container id>]").
func (s *machineService) Logs(req *machine.LogsRequest, srv machine.MachineService_LogsServer) error {
	m := s.m
	send := func(b []byte) error { return srv.Send(&common.Data{Bytes: b}) }

	if req.Namespace == constants.SystemContainerdNamespace || req.Id == "kubelet" {
		buf, ok := m.host.Logs.Get(req.Id)
		if !ok {
			return status.Errorf(codes.NotFound, "log %q is not available on this emulated node", req.Id)
		}

		return buf.Stream(srv.Context(), int(req.TailLines), req.Follow, send)
	}

	if err := criInspector(req.Namespace, req.Driver); err != nil {
		return err
	}

	if req.Driver != common.ContainerDriver_CRI || req.Namespace != constants.K8sContainerdNamespace {
		return fmt.Errorf("container %q not found", req.Id)
	}

	if m.kubelet == nil {
		return fmt.Errorf("container %q not found", req.Id)
	}

	log, err := m.kubelet.ContainerLog(req.Id)
	if err != nil {
		return err
	}

	return log.Stream(srv.Context(), int(req.TailLines), req.Follow, send)
}

// Containers lists the kube-apiserver pod sandboxes that are ready and their
// containers, exited ones included, in random order (the kubelet's CRI).
func (s *machineService) Containers(_ context.Context, in *machine.ContainersRequest) (*machine.ContainersResponse, error) {
	if err := criInspector(in.Namespace, in.Driver); err != nil {
		return nil, err
	}

	var list []*machine.ContainerInfo

	if s.m.kubelet != nil && in.Namespace == constants.K8sContainerdNamespace && in.Driver == common.ContainerDriver_CRI {
		list = s.m.kubelet.Containers(in.Namespace)
	}

	return &machine.ContainersResponse{Messages: []*machine.Container{{Containers: list}}}, nil
}

func (m *Machined) checkControlPlane(api string) error {
	if m.typ != machinetype.TypeControlPlane {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	return nil
}

// Kubeconfig returns an admin kubeconfig signed by the cluster CA, wrapped in a .tar.gz as Talos does.
func (s *machineService) Kubeconfig(_ *emptypb.Empty, srv machine.MachineService_KubeconfigServer) error {
	if err := s.m.checkControlPlane("kubeconfig"); err != nil {
		return err
	}

	kc, err := s.m.AdminKubeconfig()
	if err != nil {
		return err
	}

	var buf bytes.Buffer

	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)

	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "kubeconfig", Size: int64(len(kc)), ModTime: time.Now(), Mode: 0o600}); err != nil {
		return err
	}

	if _, err := tw.Write(kc); err != nil {
		return err
	}

	if err := tw.Close(); err != nil {
		return err
	}

	if err := zw.Close(); err != nil {
		return err
	}

	return srv.Send(&common.Data{Bytes: buf.Bytes()})
}

// adminCredentials is the admin client certificate machined mints from the cluster CA
// for a kubeconfig, and the CAs the kubeconfig trusts.
func (m *Machined) adminCredentials() (*x509.KeyPair, []byte, error) {
	cl := m.currentConfig().prov.Cluster()

	issuing := cl.IssuingCA()
	if issuing == nil {
		return nil, nil, errors.New("no Kubernetes CA in the config")
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(issuing)
	if err != nil {
		return nil, nil, fmt.Errorf("error getting Kubernetes CA: %w", err)
	}

	kp, err := x509.NewKeyPair(ca,
		x509.CommonName(cl.AdminKubeconfig().CommonName()),
		x509.Organization(cl.AdminKubeconfig().CertOrganization()),
		x509.NotBefore(time.Now().Add(-10*time.Second)),
		x509.NotAfter(time.Now().Add(cl.AdminKubeconfig().CertLifetime())),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("error generating Kubernetes client certificate: %w", err)
	}

	var caData []byte
	for _, a := range cl.AcceptedCAs() {
		caData = append(caData, a.Crt...)
	}

	return kp, append(caData, issuing.Crt...), nil
}

// AdminKubeconfig returns an admin kubeconfig for the cluster endpoint, as the Kubeconfig call does.
func (m *Machined) AdminKubeconfig() ([]byte, error) {
	cl := m.currentConfig().prov.Cluster()

	kp, caData, err := m.adminCredentials()
	if err != nil {
		return nil, err
	}

	name := cl.Name()
	user := "admin@" + name
	b64 := base64.StdEncoding.EncodeToString

	type named struct {
		Name    string         `yaml:"name"`
		Cluster map[string]any `yaml:"cluster,omitempty"`
		User    map[string]any `yaml:"user,omitempty"`
		Context map[string]any `yaml:"context,omitempty"`
	}

	doc := struct {
		APIVersion     string         `yaml:"apiVersion"`
		Kind           string         `yaml:"kind"`
		Clusters       []named        `yaml:"clusters"`
		Contexts       []named        `yaml:"contexts"`
		CurrentContext string         `yaml:"current-context"`
		Preferences    map[string]any `yaml:"preferences"`
		Users          []named        `yaml:"users"`
	}{
		APIVersion:     "v1",
		Kind:           "Config",
		Clusters:       []named{{Name: name, Cluster: map[string]any{"server": cl.Endpoint().String(), "certificate-authority-data": b64(caData)}}},
		Contexts:       []named{{Name: user, Context: map[string]any{"cluster": name, "namespace": "default", "user": user}}},
		CurrentContext: user,
		Preferences:    map[string]any{},
		Users:          []named{{Name: user, User: map[string]any{"client-certificate-data": b64(kp.CrtPEM), "client-key-data": b64(kp.KeyPEM)}}},
	}

	return yaml.Marshal(doc)
}

// EtcdSnapshot streams a snapshot through ClusterOptions.EtcdSnapshot, else of the node's
// member (ClusterOptions.EtcdMember).
func (s *machineService) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv machine.MachineService_EtcdSnapshotServer) error {
	if err := s.m.checkControlPlane("etcd snapshot"); err != nil {
		return err
	}

	hook := s.m.opts.EtcdSnapshot
	if hook == nil && s.m.realEtcd() {
		return s.m.etcdSnapshotFromMember(srv.Context(), func(b []byte) error { return srv.Send(&common.Data{Bytes: b}) })
	}

	if hook == nil {
		return status.Error(codes.Unavailable, "failed to create etcd client: "+errNoEtcdHook.Error())
	}

	w := &chunkWriter{send: func(b []byte) error { return srv.Send(&common.Data{Bytes: b}) }}

	if err := hook(srv.Context(), w); err != nil {
		return fmt.Errorf("failed reading etcd snapshot: %w", err)
	}

	return nil
}

type chunkWriter struct {
	send func([]byte) error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += 1 << 20 {
		end := min(off+1<<20, len(p))
		if err := w.send(bytes.Clone(p[off:end])); err != nil {
			return off, err
		}
	}

	return len(p), nil
}

var _ io.Writer = (*chunkWriter)(nil)

// Events implements machine.MachineServiceServer (host.Bus.Stream).
func (s *machineService) Events(req *machine.EventsRequest, srv machine.MachineService_EventsServer) error {
	return s.m.host.Events.Stream(srv.Context(), req, srv.Send)
}

func (m *Machined) rebootDuration() time.Duration {
	if m.opts.RebootDuration <= 0 {
		return time.Second
	}

	return m.opts.RebootDuration
}
