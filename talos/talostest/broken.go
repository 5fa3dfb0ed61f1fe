package talostest

import (
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"
)

// BrokenEndpoints are Talos API endpoints on one loopback IP that each fail
// a client's connection in one way a network or a node can, always the
// same way, for tests of what a client says about it. The TLS endpoints'
// certificates are signed by CA, which Talosconfig trusts, except
// ForeignServerCert's; their client CA is CA, except RefuseCert*'s.
type BrokenEndpoints struct {
	Closed            string // nothing listens: connections are refused
	Silent            string // accepts TCP and never answers
	CloseOnAccept     string // accepts TCP and closes it at once
	CloseAfterTLS     string // completes TLS, the client certificate accepted, then closes
	RefuseCertTLS12   string // TLS 1.2: refuses the client certificate with an alert, in the handshake
	RefuseCertTLS13   string // TLS 1.3: refuses the client certificate once the client's handshake is done
	ForeignServerCert string // its certificate is signed by another CA

	CA *x509.PEMEncodedCertificateAndKey
	// Talosconfig trusts CA and holds an os:admin client certificate it
	// signed; its one context, "broken", has Silent as endpoint and node.
	Talosconfig *config.Config

	closers []io.Closer
	wg      sync.WaitGroup
}

// NewBrokenEndpoints starts them on ip (a loopback address).
func NewBrokenEndpoints(ip string) (b *BrokenEndpoints, err error) {
	b = &BrokenEndpoints{}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	ca, err := newCA()
	if err != nil {
		return nil, err
	}
	other, err := newCA()
	if err != nil {
		return nil, err
	}
	b.CA = x509.NewCertificateAndKeyFromCertificateAuthority(ca)
	cert, err := serverCert(ca, ip)
	if err != nil {
		return nil, err
	}
	foreign, err := serverCert(other, ip)
	if err != nil {
		return nil, err
	}
	ours, theirs := stdx509.NewCertPool(), stdx509.NewCertPool()
	ours.AddCert(ca.Crt)
	theirs.AddCert(other.Crt)
	mtls := func(clientCAs *stdx509.CertPool, version uint16) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs,
			MinVersion: version, MaxVersion: version, NextProtos: []string{"h2"}}
	}
	foreignConf := mtls(ours, tls.VersionTLS13)
	foreignConf.Certificates = []tls.Certificate{foreign}

	res, err := ports.Reserve(ip, 0)
	if err != nil {
		return nil, err
	}
	b.closers = append(b.closers, res)
	b.Closed = res.Addr()
	for _, s := range []struct {
		addr  *string
		serve func(net.Conn)
	}{
		{&b.Silent, func(c net.Conn) { io.Copy(io.Discard, c) }}, //nolint:errcheck
		{&b.CloseOnAccept, func(c net.Conn) {}},
		{&b.CloseAfterTLS, handshakeThenClose(mtls(ours, tls.VersionTLS13))},
		{&b.RefuseCertTLS12, handshakeThenClose(mtls(theirs, tls.VersionTLS12))},
		{&b.RefuseCertTLS13, handshakeThenClose(mtls(theirs, tls.VersionTLS13))},
		{&b.ForeignServerCert, handshakeThenClose(foreignConf)},
	} {
		if *s.addr, err = b.serve(ip, s.serve); err != nil {
			return nil, err
		}
	}
	crt, err := secrets.NewAdminCertificateAndKey(time.Now().Add(-time.Minute), b.CA, role.MakeSet(role.Admin), constants.TalosAPIDefaultCertificateValidityDuration)
	if err != nil {
		return nil, err
	}
	b.Talosconfig = config.NewConfig("broken", []string{b.Silent}, b.CA.Crt, crt)
	b.Talosconfig.Contexts["broken"].Nodes = []string{ip}
	return b, nil
}

func newCA() (*x509.CertificateAuthority, error) {
	return x509.NewSelfSignedCertificateAuthority(x509.Organization("talos"), x509.NotAfter(time.Now().Add(24*time.Hour)))
}

func serverCert(ca *x509.CertificateAuthority, ip string) (tls.Certificate, error) {
	kp, err := x509.NewKeyPair(ca, x509.IPAddresses([]net.IP{net.ParseIP(ip)}), x509.NotAfter(time.Now().Add(24*time.Hour)),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}))
	if err != nil {
		return tls.Certificate{}, err
	}
	return *kp.Certificate, nil
}

// handshakeThenClose answers TLS as conf says, then hangs up before
// sending anything: what a node does to a client whose certificate it
// refuses once TLS 1.3 has let the client finish its handshake.
func handshakeThenClose(conf *tls.Config) func(net.Conn) {
	return func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tls.Server(c, conf).Handshake()
	}
}

// serve accepts connections on ip and hands each to fn, closing it after.
func (b *BrokenEndpoints) serve(ip string, fn func(net.Conn)) (string, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", err
	}
	b.closers = append(b.closers, lis)
	var mu sync.Mutex
	var conns []net.Conn
	b.closers = append(b.closers, closeFunc(func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close() //nolint:errcheck
		}
		return nil
	}))
	b.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			b.wg.Go(func() {
				defer c.Close() //nolint:errcheck
				fn(c)
			})
		}
	})
	return lis.Addr().String(), nil
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }

// Close stops every endpoint and waits for their connections to end.
func (b *BrokenEndpoints) Close() {
	for _, c := range b.closers {
		c.Close() //nolint:errcheck
	}
	b.wg.Wait()
}
