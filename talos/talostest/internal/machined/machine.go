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
	"time"

	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"gopkg.in/yaml.v3"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
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
