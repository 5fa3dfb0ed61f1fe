package machined

import (
	"context"
	stdx509 "crypto/x509"
	"fmt"
	"net"
	"time"

	"github.com/siderolabs/crypto/x509"

	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
)

// publishStatic writes the resources that do not follow the config.
func (m *Machined) publishStatic(ctx context.Context, cfg *nodeConfig) error {
	mt := config.NewMachineType()
	mt.SetMachineType(m.typ)

	if err := m.st.Create(ctx, mt); err != nil {
		return err
	}

	nn := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	nn.TypedSpec().Nodename = m.host.Name
	nn.TypedSpec().HostnameVersion = "1"

	if err := m.st.Create(ctx, nn); err != nil {
		return err
	}

	if m.typ != machinetype.TypeControlPlane {
		return nil
	}

	root := secrets.NewEtcdRoot(secrets.EtcdRootID)
	root.TypedSpec().EtcdCA = cfg.prov.Cluster().Etcd().CA()

	if err := m.st.Create(ctx, root); err != nil {
		return err
	}

	certs, err := m.etcdCerts(root.TypedSpec().EtcdCA)
	if err != nil {
		return fmt.Errorf("issuing etcd certificates: %w", err)
	}

	etcd := secrets.NewEtcd()
	*etcd.TypedSpec() = *certs

	return m.st.Create(ctx, etcd)
}

// etcdCerts issues the node's etcd certificates from the etcd CA, as machined's
// secrets.EtcdController does: server and peer certificates for the node's addresses,
// client certificates "talos" (admin) and "kube-apiserver".
func (m *Machined) etcdCerts(caPEM *x509.PEMEncodedCertificateAndKey) (*secrets.EtcdCertsSpec, error) {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(caPEM)
	if err != nil {
		return nil, err
	}

	issue := func(cn string, usage []stdx509.ExtKeyUsage, ips []net.IP, dns []string) (*x509.PEMEncodedCertificateAndKey, error) {
		kp, err := x509.NewKeyPair(ca,
			x509.CommonName(cn),
			x509.IPAddresses(ips),
			x509.DNSNames(dns),
			x509.NotAfter(time.Now().Add(365*24*time.Hour)),
			x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
			x509.ExtKeyUsage(usage),
		)
		if err != nil {
			return nil, err
		}

		return x509.NewCertificateAndKeyFromKeyPair(kp), nil
	}

	both := []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth, stdx509.ExtKeyUsageClientAuth}
	client := []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}
	ips := []net.IP{net.ParseIP(m.host.IP), net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	dns := []string{m.host.Name, "localhost"}

	var spec secrets.EtcdCertsSpec

	if spec.Etcd, err = issue(m.host.Name, both, ips, dns); err != nil {
		return nil, err
	}

	// etcd checks a peer's certificate against the address its connection comes from,
	// and looks its DNS names up when no address matches: on loopback connections come
	// from 127.0.0.1, and no name may be looked up (nothing leaves loopback), so the
	// peer certificate names that address and no host name (on a node: its addresses
	// and hostname)
	if spec.EtcdPeer, err = issue(m.host.Name, both, ips[:2], nil); err != nil {
		return nil, err
	}

	if spec.EtcdAdmin, err = issue("talos", client, nil, nil); err != nil {
		return nil, err
	}

	if spec.EtcdAPIServer, err = issue("kube-apiserver", client, nil, nil); err != nil {
		return nil, err
	}

	return &spec, nil
}

// EtcdCerts returns the etcd certificates the node serves as the EtcdSecrets resource
// (server and peer for its addresses, clients "talos" and "kube-apiserver"), nil on a worker.
func (m *Machined) EtcdCerts() *secrets.EtcdCertsSpec {
	r, err := m.st.Get(m.ctx, secrets.NewEtcd().Metadata())
	if err != nil {
		return nil
	}

	return r.(*secrets.Etcd).TypedSpec()
}
