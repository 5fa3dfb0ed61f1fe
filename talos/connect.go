package talos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/client/resolver"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/connectivity"

	"github.com/breakglass-dev/breakglass/internal/flaglist"
)

// Options say where the talosconfig is and which nodes to talk to, as
// talosctl's global flags do.
type Options struct {
	Talosconfig string   // path; empty means the default
	Context     string   // empty: the talosconfig's current context
	Endpoints   []string // override the context's endpoints
	Nodes       []string // override the context's nodes

	// ConnectTimeout bounds each connection to an endpoint (TCP, TLS, its
	// first gRPC answer); 0 is DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Progress hears, once per endpoint, of a connection that keeps the
	// operator waiting (stderr); nil says nothing.
	Progress io.Writer
}

// Client is a connection to a Talos cluster through its endpoints.
type Client struct {
	api         *client.Client
	nodes       []string
	role        string
	context     string
	talosconfig string      // the path given, for the commands hints name
	watch       *watch      // the connections to the endpoints
	tlsConf     *tls.Config // the client's TLS settings, for probes
	cert        clientCert  // the client certificate, to say why apid refuses it
}

// Connect opens a client from a talosconfig. It does not dial yet: the first
// call on a node does, so an unreachable node is reported by name then.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	// Read it ourselves: the machinery's Open creates a missing file, and a
	// recovery tool must not leave an empty talosconfig behind.
	cfg, name, err := readTalosconfig(ctx, opts.Talosconfig, opts.Context)
	if err != nil {
		return nil, err
	}
	tctx := cfg.Contexts[name]
	if len(opts.Endpoints) > 0 {
		tctx.Endpoints = opts.Endpoints
	}
	if len(tctx.Endpoints) == 0 {
		return nil, &talosconfigError{fmt.Sprintf("talosconfig context %q has no endpoints", name), "give them with -e ENDPOINT[,ENDPOINT...] (or: talosctl config endpoint IP)"}
	}
	nodes := opts.Nodes
	if len(nodes) == 0 {
		nodes = tctx.Nodes
	}
	if len(nodes) == 0 {
		// talosctl falls back to the endpoints; so do we, as they are nodes too.
		nodes = tctx.Endpoints
	}
	cfg.Context = name
	w := newWatch(endpointAddrs(tctx.Endpoints), opts.ConnectTimeout, opts.Progress)
	api, err := client.New(ctx, client.WithConfig(cfg), client.WithContextName(name), client.WithGRPCDialOptions(w.dialOptions()...))
	if err != nil {
		return nil, &configError{err}
	}
	ready := func() bool { return api.Conn().GetState() == connectivity.Ready }
	w.ready.Store(&ready)
	// "-n a,b" as well as "-n a -n b".
	cert, _ := readClientCert(tctx) // unreadable: the machinery already refused it
	return &Client{api: api, nodes: flaglist.Split(nodes...), role: certRole(tctx.Crt), context: name,
		talosconfig: opts.Talosconfig, watch: w, tlsConf: probeTLS(tctx), cert: cert}, nil
}

// endpointAddrs are the endpoints as the client dials them, host:port
// (the machinery's rules: a bare host gets the Talos API port, an https
// URL its own port or 443).
func endpointAddrs(endpoints []string) []string {
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		if u, err := url.Parse(e); err == nil && u.Scheme != "" && u.Host != "" {
			e = u.Host
			if u.Port() == "" && u.Scheme == "https" {
				e = net.JoinHostPort(u.Hostname(), "443")
			}
		}
		out[i] = resolver.EnsureEndpointsHavePorts([]string{e}, constants.ApidPort)[0]
	}
	return out
}

// probeTLS is the client's TLS configuration, rebuilt from the context as
// the machinery builds it (the talosconfig was checked when read).
func probeTLS(tctx *clientconfig.Context) *tls.Config {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca, err := base64.StdEncoding.DecodeString(tctx.CA); err == nil && len(ca) > 0 {
		conf.RootCAs = x509.NewCertPool()
		conf.RootCAs.AppendCertsFromPEM(ca)
	}
	if crt, err := client.CertificateFromConfigContext(tctx); err == nil && crt != nil {
		conf.Certificates = []tls.Certificate{*crt}
	}
	return conf
}

// talosctlFlags select the same talosconfig and context for talosctl.
func (c *Client) talosctlFlags() string {
	return fmt.Sprintf("--talosconfig %s --context %s ", c.talosconfig, c.context)
}

// Close releases the connection.
func (c *Client) Close() error { return c.api.Close() }

// Nodes are the target nodes, in the order given.
// A nil client (a run that reaches etcd only) targets none.
func (c *Client) Nodes() []string {
	if c == nil {
		return nil
	}
	return c.nodes
}

// ContextName is the talosconfig context the client uses ("" for a nil
// client).
func (c *Client) ContextName() string {
	if c == nil {
		return ""
	}
	return c.context
}

// WithNodes is the same connection targeting other nodes (an incident's
// recorded ones). The copy shares the connection: close only the original.
func (c *Client) WithNodes(nodes []string) *Client {
	if c == nil {
		return nil
	}
	cp := *c
	cp.nodes = append([]string(nil), nodes...)
	return &cp
}

// Role is the highest Talos role of the talosconfig's client certificate
// (os:admin, os:operator, os:reader, os:etcd:backup), or "" if unknown.
func (c *Client) Role() string { return c.role }

// CanApply tells whether the role may change a machine config.
func (c *Client) CanApply() bool { return c.role == "" || c.role == string(role.Admin) }

// certRole reads the role from the client certificate's Organization, as the
// node does. Unknown or unreadable certificates give "".
func certRole(crtB64 string) string {
	raw, err := base64.StdEncoding.DecodeString(crtB64)
	if err != nil {
		return ""
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return ""
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	best := ""
	rank := map[string]int{string(role.Admin): 4, string(role.Operator): 3, string(role.Reader): 2, string(role.EtcdBackup): 1}
	for _, o := range crt.Subject.Organization {
		if rank[o] > rank[best] {
			best = o
		}
	}
	return best
}

type configError struct{ err error }

func (e *configError) Error() string   { return e.err.Error() }
func (e *configError) Unwrap() []error { return []error{ErrConfig, e.err} }
func (e *configError) Hints() []string {
	if errors.Is(e.err, os.ErrNotExist) || strings.Contains(e.err.Error(), "no such file") {
		return []string{"pass --talosconfig PATH or set TALOSCONFIG"}
	}
	return []string{"check the talosconfig with: talosctl config info"}
}

// RequireAdmin fails early, before any node is touched, when the
// talosconfig's role cannot change a machine config (an Omni break-glass
// talosconfig is os:operator: it can read logs and snapshot etcd, not patch).
func (c *Client) RequireAdmin(what string) error {
	if c.CanApply() {
		return nil
	}
	return &NodeError{Node: "all nodes", Op: what,
		Err:   fmt.Errorf("%w: this talosconfig's role is %s; %s needs os:admin", ErrPermission, c.role, what),
		hints: []string{roleHint(c.role)}}
}
