// Package etcdtest starts a real embedded etcd for tests and the lab: TLS
// with client-certificate auth (as on Talos) or plain http, on loopback,
// free ports by default, data in a directory the caller owns.
package etcdtest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd.
type Server struct {
	Etcd      *embed.Etcd
	Endpoints []string
	Dir       string

	// TLS only: the CA, and a client certificate it signed, as PEM and as
	// files under Dir (mode 0600).
	CA                         *CA
	CACertPEM, CertPEM, KeyPEM []byte
	CAFile, CertFile, KeyFile  string

	closeOnce sync.Once
}

// Option adjusts Start.
type Option func(*options)

type options struct {
	ca            *CA
	plain         bool
	host          string
	clientPort    int
	snapshotCount uint64
	quota         int64
	noFsync       bool
}

// WithCA makes the server and client certificates from this CA (e.g. the
// etcd CA of a generated Talos config) instead of a fresh one.
func WithCA(ca *CA) Option { return func(o *options) { o.ca = ca } }

// Plain serves http:// without TLS.
func Plain() Option { return func(o *options) { o.plain = true } }

// WithHost listens on this loopback address (default 127.0.0.1).
func WithHost(host string) Option { return func(o *options) { o.host = host } }

// WithClientPort listens for clients on this port (default: a free one).
func WithClientPort(port int) Option { return func(o *options) { o.clientPort = port } }

// WithSnapshotCount sets etcd's --snapshot-count; a small value bounds memory when loading many keys.
func WithSnapshotCount(n uint64) Option { return func(o *options) { o.snapshotCount = n } }

// WithQuota sets etcd's --quota-backend-bytes.
func WithQuota(bytes int64) Option { return func(o *options) { o.quota = bytes } }

// WithoutFsync sets --unsafe-no-fsync: for loading bulk data in benchmarks only.
func WithoutFsync() Option { return func(o *options) { o.noFsync = true } }

// TB is the part of testing.TB that StartTLS and StartPlain use: a
// *testing.T or *testing.B satisfies it. Taking this rather than
// testing.TB keeps package testing out of the binaries that link etcdtest
// (breakglass-lab).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// StartTLS starts an etcd with TLS and client-certificate auth in
// t.TempDir(), stopped when the test ends.
func StartTLS(t TB, opts ...Option) *Server {
	t.Helper()
	s, err := Start(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartPlain starts an etcd serving plain http:// in t.TempDir().
func StartPlain(t TB, opts ...Option) *Server {
	t.Helper()
	return StartTLS(t, append(opts, Plain())...)
}

// Start starts an etcd with its data and certificates under dir.
func Start(dir string, opts ...Option) (*Server, error) {
	o := options{host: "127.0.0.1"}
	for _, f := range opts {
		f(&o)
	}
	if ip := net.ParseIP(o.host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("etcdtest listens on loopback only, not %q", o.host)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Server{Dir: dir}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	if o.snapshotCount > 0 {
		cfg.SnapshotCount = o.snapshotCount
		cfg.SnapshotCatchUpEntries = o.snapshotCount
	}
	if o.quota > 0 {
		cfg.QuotaBackendBytes = o.quota
	}
	cfg.UnsafeNoFsync = o.noFsync

	scheme := "https"
	if o.plain {
		scheme = "http"
	} else {
		if err := s.writeTLS(o); err != nil {
			return nil, err
		}
		certPEM, keyPEM, err := s.CA.IssueServer([]string{o.host, "127.0.0.1", "::1", "localhost"}, 24*time.Hour)
		if err != nil {
			return nil, err
		}
		serverCert, serverKey := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
		if err := writeFiles(map[string][]byte{serverCert: certPEM, serverKey: keyPEM}); err != nil {
			return nil, err
		}
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: s.CAFile, ClientCertAuth: true,
		}
	}

	// Free ports can be taken between probe and bind: retry a few times.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		clientPort := o.clientPort
		if clientPort == 0 {
			clientPort = freePort(o.host)
		}
		peerPort := freePort(o.host)
		curl := url.URL{Scheme: scheme, Host: net.JoinHostPort(o.host, strconv.Itoa(clientPort))}
		purl := url.URL{Scheme: "http", Host: net.JoinHostPort(o.host, strconv.Itoa(peerPort))}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			os.RemoveAll(cfg.Dir)
			if o.clientPort != 0 {
				break
			}
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			e.Close()
			return nil, fmt.Errorf("embedded etcd failed: %w", err)
		case <-time.After(60 * time.Second):
			e.Close()
			return nil, errors.New("embedded etcd not ready after 60s")
		}
		s.Etcd = e
		s.Endpoints = []string{curl.String()}
		return s, nil
	}
	return nil, lastErr
}

// ClientTLS is a TLS config for a client of the server: its client certificate,
// trusting its CA (TLS servers only).
func (s *Server) ClientTLS() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(s.CertPEM, s.KeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CACertPEM) {
		return nil, errors.New("etcdtest: no CA certificate")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Close stops etcd; calling it again does nothing.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		if s.Etcd != nil {
			s.Etcd.Close()
		}
	})
}

// Client is a plain etcd client of s (with its client certificate when it
// serves TLS), for a test to look at or change etcd behind breakglass's
// back. The caller closes it.
func (s *Server) Client() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: s.Endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
	if len(s.CertPEM) > 0 {
		pair, err := tls.X509KeyPair(s.CertPEM, s.KeyPEM)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.CACertPEM)
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return clientv3.New(cfg)
}

// TestClient is Client, closed when the test ends.
func (s *Server) TestClient(t TB) *clientv3.Client {
	t.Helper()
	c, err := s.Client()
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s *Server) writeTLS(o options) error {
	ca := o.ca
	if ca == nil {
		var err error
		if ca, err = NewCA(); err != nil {
			return err
		}
	}
	certPEM, keyPEM, err := ca.IssueClient("etcdtest-client", 24*time.Hour)
	if err != nil {
		return err
	}
	s.CA, s.CACertPEM, s.CertPEM, s.KeyPEM = ca, ca.CertPEM, certPEM, keyPEM
	s.CAFile, s.CertFile, s.KeyFile = filepath.Join(s.Dir, "ca.crt"), filepath.Join(s.Dir, "client.crt"), filepath.Join(s.Dir, "client.key")
	return writeFiles(map[string][]byte{s.CAFile: ca.CertPEM, s.CertFile: certPEM, s.KeyFile: keyPEM})
}

func writeFiles(files map[string][]byte) error {
	for p, b := range files {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func freePort(host string) int {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
