// Package etcdclient is machined's etcd client (internal/pkg/etcd on a node): how
// machined and its etcd service reach the members, with machined's admin certificate.
package etcdclient

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
)

// Access is how a client reaches one member.
type Access struct {
	Endpoint string      // the member's client URL, e.g. https://127.0.0.11:2379
	TLS      *tls.Config // trusts the etcd CA and carries a client certificate it signed
}

// New makes a client of the endpoints, as machined does: a 5 s dial timeout.
func New(ctx context.Context, endpoints []string, tlsConf *tls.Config) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Context:     ctx,
		TLS:         tlsConf,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("error building etcd client: %w", err)
	}

	return c, nil
}

// Any makes a client of every member given, in random order, as machined's
// NewClientFromControlPlaneIPs does.
func Any(ctx context.Context, endpoints []string, tlsConf *tls.Config) (*clientv3.Client, error) {
	endpoints = append([]string(nil), endpoints...)
	rand.Shuffle(len(endpoints), func(i, j int) { endpoints[i], endpoints[j] = endpoints[j], endpoints[i] })

	return New(ctx, endpoints, tlsConf)
}

// Secrets are the node's etcd certificates (EtcdSecrets) and the etcd CA
// (EtcdRootSecrets), as machined's secrets controllers issued them into its state.
func Secrets(ctx context.Context, st state.State) (*secrets.EtcdCertsSpec, *x509.PEMEncodedCertificateAndKey, error) {
	certs, err := safe.StateGet[*secrets.Etcd](ctx, st, secrets.NewEtcd().Metadata())
	if err != nil {
		return nil, nil, fmt.Errorf("no etcd certificates on this node: %w", err)
	}

	root, err := safe.StateGet[*secrets.EtcdRoot](ctx, st, secrets.NewEtcdRoot(secrets.EtcdRootID).Metadata())
	if err != nil {
		return nil, nil, fmt.Errorf("no etcd CA on this node: %w", err)
	}

	return certs.TypedSpec(), root.TypedSpec().EtcdCA, nil
}

// AdminTLS is machined's client TLS: the node's admin certificate ("talos"), trusting
// the etcd CA.
func AdminTLS(ctx context.Context, st state.State) (*tls.Config, error) {
	certs, root, err := Secrets(ctx, st)
	if err != nil {
		return nil, err
	}

	admin, err := tls.X509KeyPair(certs.EtcdAdmin.Crt, certs.EtcdAdmin.Key)
	if err != nil {
		return nil, err
	}

	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(root.Crt)

	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{admin}, MinVersion: tls.VersionTLS12}, nil
}
