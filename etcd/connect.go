package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/breakglass-dev/breakglass/internal/ctxfile"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
)

// Config says how to reach etcd. TLS material comes either from files
// (etcdctl's --cacert/--cert/--key) or from PEM bytes in memory (a client
// certificate minted by MintClientCert); never both for the same item.
type Config struct {
	// Endpoints are URLs such as https://10.5.0.2:2379 or http://127.0.0.1:2379.
	// A bare host:port means https.
	Endpoints []string

	CACertFile, CertFile, KeyFile string
	CACertPEM, CertPEM, KeyPEM    []byte

	// Prefix is kube-apiserver's --etcd-prefix; empty means /registry.
	Prefix string

	// DialTimeout bounds the first request that proves etcd answers; default 5s.
	DialTimeout time.Duration
	// ReadTimeout bounds each later read request, and a snapshot's wait
	// for its next data; default DefaultReadTimeout (deadline.go).
	ReadTimeout time.Duration
}

// Client is a connection to one etcd cluster, scoped to a key prefix.
type Client struct {
	kv        *clientv3.Client
	prefix    string
	endpoints []string
	// certNotAfter is when the client certificate expires (zero without
	// one): after it, etcd refuses every new connection.
	certNotAfter time.Time
	readTimeout  time.Duration
	dialTimeout  time.Duration
}

// ID is an etcd cluster or member ID, written in hex as etcdctl shows it.
type ID uint64

func (id ID) String() string { return strconv.FormatUint(uint64(id), 16) }

// MarshalText writes the hex form, so JSON never rounds a 64-bit ID.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads the hex form.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 16, 64)
	if err != nil {
		return fmt.Errorf("invalid etcd id %q", b)
	}
	*id = ID(v)
	return nil
}

// ClusterInfo identifies where and when something was read.
type ClusterInfo struct {
	ClusterID ID    `json:"clusterID"`
	MemberID  ID    `json:"memberID"`
	Revision  int64 `json:"revision"`
}

func clusterInfo(h *etcdserverpb.ResponseHeader) ClusterInfo {
	if h == nil {
		return ClusterInfo{}
	}
	return ClusterInfo{ClusterID: ID(h.ClusterId), MemberID: ID(h.MemberId), Revision: h.Revision}
}

// Connect dials etcd and proves it answers (and accepts the certificate)
// with one cheap read, so that a wrong endpoint fails here with an
// *UnreachableError rather than later in the middle of a plan.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, &ConfigError{Reason: "no endpoints"}
	}
	endpoints, secure, err := normalizeEndpoints(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if secure {
		if tlsCfg, err = buildTLS(ctx, cfg); err != nil {
			return nil, err
		}
	} else if cfg.CertFile != "" || len(cfg.CertPEM) > 0 || cfg.CACertFile != "" || len(cfg.CACertPEM) > 0 {
		return nil, &ConfigError{Reason: "certificates given for plain http:// endpoints: use https://"}
	}
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	// The gRPC client retries a refused connection until its dial timeout;
	// mid-incident, "nothing listens there" should be said at once.
	if err := anyListening(ctx, endpoints, timeout); err != nil {
		return nil, &UnreachableError{Endpoints: endpoints, Err: err}
	}
	readTimeout := cfg.ReadTimeout
	if readTimeout <= 0 {
		readTimeout = DefaultReadTimeout
	}
	kv, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsCfg,
		DialTimeout: timeout,
		// The client logs to stderr by default; this package never writes output itself.
		Logger: zap.NewNop(),
		// Enough for a full snapshot listing of a large cluster.
		MaxCallRecvMsgSize: 1<<31 - 1,
		// Every read has a deadline (deadline.go); chained inside the
		// client's own retries, so each attempt has it.
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(readDeadlines(readTimeout, endpoints))},
	})
	if err != nil {
		return nil, &UnreachableError{Endpoints: endpoints, Err: err, TLS: looksLikeTLS(err)}
	}
	c := &Client{kv: kv, prefix: normalizePrefix(cfg.Prefix), endpoints: endpoints, readTimeout: readTimeout, dialTimeout: timeout}
	if tlsCfg != nil && tlsCfg.Certificates[0].Leaf != nil {
		c.certNotAfter = tlsCfg.Certificates[0].Leaf.NotAfter
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A serializable read: a member that lost its quorum still answers it,
	// and is reachable for what it can tell (its status, its data).
	if _, err := c.kv.Get(pctx, c.prefix, clientv3.WithKeysOnly(), clientv3.WithLimit(1), clientv3.WithSerializable()); err != nil {
		err = c.wrap(err)
		kv.Close()
		var ue *UnreachableError
		if errors.As(err, &ue) {
			// gRPC only says "deadline exceeded": find out why, per endpoint.
			if cause := diagnose(ctx, endpoints, tlsCfg); cause != nil {
				ue.Err, ue.TLS = cause, looksLikeTLS(cause)
			}
		}
		return nil, err
	}
	return c, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.kv.Close() }

// Prefix is the normalized key prefix, e.g. /registry.
func (c *Client) Prefix() string { return c.prefix }

// Endpoints are the normalized endpoint URLs.
func (c *Client) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// KV gives the underlying etcd client, for tests and tools that need more.
func (c *Client) KV() *clientv3.Client { return c.kv }

// Cluster reads the cluster ID, member ID and current revision.
func (c *Client) Cluster(ctx context.Context) (ClusterInfo, error) {
	h, err := c.header(ctx)
	if err != nil {
		return ClusterInfo{}, err
	}
	return clusterInfo(h), nil
}

// header reads one exact key (the prefix itself, normally absent): the
// cheapest request that returns a response header. Serializable: any
// member's header names the cluster, and one without quorum answers at once
// (a linearizable read would wait out its deadline).
func (c *Client) header(ctx context.Context) (*etcdserverpb.ResponseHeader, error) {
	resp, err := c.kv.Get(ctx, c.prefix, clientv3.WithKeysOnly(), clientv3.WithSerializable())
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Header, nil
}

// wrap turns transport failures into *UnreachableError and etcd's refusal
// for lack of space into *NoSpaceError; other errors pass.
func (c *Client) wrap(err error) error {
	if err == nil {
		return nil
	}
	var ue *UnreachableError
	var ns *NoSpaceError
	var st *StalledError
	if errors.As(err, &ue) || errors.As(err, &ns) || errors.As(err, &st) {
		return err
	}
	if IsNoSpace(err) {
		return &NoSpaceError{Err: err}
	}
	if looksLikeTLS(err) || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Unavailable") ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "DeadlineExceeded") {
		return &UnreachableError{Endpoints: c.endpoints, Err: err, TLS: looksLikeTLS(err)}
	}
	return fmt.Errorf("etcd: %w", err)
}

// anyListening returns nil as soon as one endpoint accepts a TCP
// connection, or all the dial errors when none does.
func anyListening(ctx context.Context, endpoints []string, timeout time.Duration) error {
	errs := make(chan error, len(endpoints))
	for _, ep := range endpoints {
		go func() {
			u, err := url.Parse(ep)
			if err != nil {
				errs <- err
				return
			}
			conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", u.Host)
			if err == nil {
				conn.Close()
				errs <- nil
				return
			}
			errs <- fmt.Errorf("%s: %w", ep, err)
		}()
	}
	var all []error
	for range endpoints {
		err := <-errs
		if err == nil {
			return nil
		}
		all = append(all, err)
	}
	return errors.Join(all...)
}

// diagnose dials each endpoint itself (TCP, then the TLS handshake, then
// one read, which is where a TLS 1.3 server's refusal of the client
// certificate arrives) and returns the failures, or nil if all look fine.
func diagnose(ctx context.Context, endpoints []string, tlsCfg *tls.Config) error {
	var errs []error
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			continue
		}
		d := &net.Dialer{Timeout: 2 * time.Second}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := d.DialContext(dctx, "tcp", u.Host)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		if tlsCfg == nil {
			// Plain http:// to a TLS etcd: gRPC only times out; say what it is.
			tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, ServerName: u.Hostname()}) //nolint:gosec // detection only, nothing is sent
			tc.SetDeadline(time.Now().Add(2 * time.Second))
			if tc.Handshake() == nil {
				errs = append(errs, fmt.Errorf("%s: the endpoint speaks TLS: use https:// with certificates", ep))
			}
		} else {
			cfg := tlsCfg.Clone()
			cfg.ServerName = u.Hostname()
			cfg.NextProtos = []string{"h2"}
			tc := tls.Client(conn, cfg)
			tc.SetDeadline(time.Now().Add(2 * time.Second))
			if err := tc.Handshake(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			} else {
				tc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				var ne net.Error
				if _, err := tc.Read(make([]byte, 1)); err != nil && !(errors.As(err, &ne) && ne.Timeout()) && looksLikeTLS(err) {
					errs = append(errs, fmt.Errorf("%s: %w", ep, err))
				}
			}
		}
		conn.Close()
	}
	return errors.Join(errs...)
}

func looksLikeTLS(err error) bool {
	s := err.Error()
	for _, m := range []string{"x509", "tls:", "certificate", "authentication handshake", "first record does not look like a TLS handshake"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

func normalizeEndpoints(in []string) (out []string, secure bool, err error) {
	var nHTTP, nHTTPS int
	for _, ep := range flaglist.Split(in...) {
		if !strings.Contains(ep, "://") {
			ep = "https://" + ep
		}
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			return nil, false, &ConfigError{Reason: fmt.Sprintf("invalid endpoint %q", ep)}
		}
		switch u.Scheme {
		case "https":
			nHTTPS++
		case "http":
			nHTTP++
		default:
			return nil, false, &ConfigError{Reason: fmt.Sprintf("endpoint %q: scheme must be https or http", ep)}
		}
		out = append(out, u.Scheme+"://"+u.Host)
	}
	if len(out) == 0 {
		return nil, false, &ConfigError{Reason: "no endpoints"}
	}
	if nHTTP > 0 && nHTTPS > 0 {
		return nil, false, &ConfigError{Reason: "endpoints mix http:// and https://"}
	}
	return out, nHTTPS > 0, nil
}

func buildTLS(ctx context.Context, cfg Config) (*tls.Config, error) {
	pick := func(what, file string, pem []byte) ([]byte, error) {
		switch {
		case file != "" && len(pem) > 0:
			return nil, &ConfigError{Reason: what + " given both as a file and in memory"}
		case file != "":
			b, err := ctxfile.ReadFile(ctx, file, 0)
			if ctx.Err() != nil {
				return nil, err // interrupted while a FIFO or a pipe kept it waiting
			}
			if err != nil {
				return nil, &ConfigError{Reason: fmt.Sprintf("read %s: %v", what, err)}
			}
			return b, nil
		}
		return pem, nil
	}
	caPEM, err := pick("CA certificate", cfg.CACertFile, cfg.CACertPEM)
	if err != nil {
		return nil, err
	}
	certPEM, err := pick("client certificate", cfg.CertFile, cfg.CertPEM)
	if err != nil {
		return nil, err
	}
	keyPEM, err := pick("client key", cfg.KeyFile, cfg.KeyPEM)
	if err != nil {
		return nil, err
	}
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, &ConfigError{Reason: "https endpoints need a client certificate and key (etcd on Talos requires client-certificate auth)"}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &ConfigError{Reason: fmt.Sprintf("client certificate: %v", err)}
	}
	t := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, &ConfigError{Reason: "CA certificate: no PEM certificate found"}
		}
		t.RootCAs = pool
	}
	return t, nil
}
