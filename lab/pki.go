package lab

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	sidero "github.com/siderolabs/crypto/x509"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/breakglass-dev/breakglass/internal/encryption"
)

// The files a Talos control-plane node writes for kube-apiserver under
// /system/secrets/kubernetes/kube-apiserver and /etc/kubernetes, written
// here per node under DIR/nodes/IP/, made from the machine config's own
// CAs (cluster.ca, cluster.aggregatorCA, cluster.serviceAccount,
// cluster.etcd.ca) as machined makes them.
const (
	fileCA              = "ca.crt"
	fileServingCrt      = "apiserver.crt"
	fileServingKey      = "apiserver.key"
	fileAggregatorCA    = "aggregator-ca.crt"
	fileFrontProxyCrt   = "front-proxy-client.crt"
	fileFrontProxyKey   = "front-proxy-client.key"
	fileEtcdCA          = "etcd-client-ca.crt"
	fileEtcdCrt         = "etcd-client.crt"
	fileEtcdKey         = "etcd-client.key"
	fileKubeletCrt      = "apiserver-kubelet-client.crt"
	fileKubeletKey      = "apiserver-kubelet-client.key"
	fileSAPub           = "service-account.pub"
	fileSAKey           = "service-account.key"
	fileEncryption      = "encryptionconfig.yaml"
	fileAdmissionConfig = "admission-control-config.yaml"
	fileAuthzConfig     = "authorization-config.yaml"
)

const certLifetime = 7 * 24 * time.Hour

// writeNodeSecrets writes one node's kube-apiserver files into dir, from
// the node's machine config (the parsed cluster section, and its text for
// the encryption configuration).
func writeNodeSecrets(dir, ip string, cl talosconfig.ClusterConfig, machineConfig []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	k8sCA, err := sidero.NewCertificateAuthorityFromCertificateAndKey(cl.IssuingCA())
	if err != nil {
		return fmt.Errorf("cluster CA: %w", err)
	}
	serving, err := sidero.NewKeyPair(k8sCA,
		sidero.CommonName("kube-apiserver"),
		sidero.DNSNames([]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}),
		sidero.IPAddresses([]net.IP{net.ParseIP(ip), net.ParseIP("127.0.0.1"), net.ParseIP("10.1.0.1")}),
		sidero.NotAfter(time.Now().Add(certLifetime)),
		sidero.KeyUsage(x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment),
		sidero.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	kubelet, err := clientCert(k8sCA, "apiserver-kubelet-client", sidero.Organization("system:masters"))
	if err != nil {
		return err
	}
	aggCA, err := sidero.NewCertificateAuthorityFromCertificateAndKey(cl.AggregatorCA())
	if err != nil {
		return fmt.Errorf("aggregator CA: %w", err)
	}
	frontProxy, err := clientCert(aggCA, "front-proxy-client")
	if err != nil {
		return err
	}
	etcdCA, err := sidero.NewCertificateAuthorityFromCertificateAndKey(cl.Etcd().CA())
	if err != nil {
		return fmt.Errorf("etcd CA: %w", err)
	}
	etcdClient, err := clientCert(etcdCA, "kube-apiserver")
	if err != nil {
		return err
	}
	saPub, err := publicKeyPEM(cl.ServiceAccount().Key)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	enc, _, err := encryption.FromMachineConfig(machineConfig)
	if err != nil {
		return err
	}
	encFile, err := enc.File()
	if err != nil {
		return fmt.Errorf("encryption configuration: %w", err)
	}
	files := map[string][]byte{
		fileCA:              cl.IssuingCA().Crt,
		fileServingCrt:      serving.CrtPEM,
		fileServingKey:      serving.KeyPEM,
		fileKubeletCrt:      kubelet.CrtPEM,
		fileKubeletKey:      kubelet.KeyPEM,
		fileAggregatorCA:    cl.AggregatorCA().Crt,
		fileFrontProxyCrt:   frontProxy.CrtPEM,
		fileFrontProxyKey:   frontProxy.KeyPEM,
		fileEtcdCA:          cl.Etcd().CA().Crt,
		fileEtcdCrt:         etcdClient.CrtPEM,
		fileEtcdKey:         etcdClient.KeyPEM,
		fileSAPub:           saPub,
		fileSAKey:           cl.ServiceAccount().Key,
		fileEncryption:      encFile,
		fileAdmissionConfig: []byte(admissionConfig),
		fileAuthzConfig:     []byte(authorizationConfig),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// clientCert is kube-apiserver's client certificate for cn, signed by ca,
// valid for certLifetime; opts add to it (an organization).
func clientCert(ca *sidero.CertificateAuthority, cn string, opts ...sidero.Option) (*sidero.KeyPair, error) {
	return sidero.NewKeyPair(ca, append([]sidero.Option{
		sidero.CommonName(cn),
		sidero.NotAfter(time.Now().Add(certLifetime)),
		sidero.KeyUsage(x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment),
		sidero.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}),
	}, opts...)...)
}

func publicKeyPEM(keyPEM []byte) ([]byte, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, fmt.Errorf("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported key type %T", key)
	}
	der, err := x509.MarshalPKIXPublicKey(signer.Public())
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// admissionConfig is Talos's default: PodSecurity at baseline, kube-system exempt.
const admissionConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1alpha1
      kind: PodSecurityConfiguration
      defaults:
        audit: restricted
        audit-version: latest
        enforce: baseline
        enforce-version: latest
        warn: restricted
        warn-version: latest
      exemptions:
        namespaces:
          - kube-system
        runtimeClasses: []
        usernames: []
`

// authorizationConfig is Talos's default for Kubernetes 1.30+: Node, then RBAC.
const authorizationConfig = `apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthorizationConfiguration
authorizers:
  - type: Node
    name: node
  - type: RBAC
    name: rbac
`
