package talos

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// syncBuffer is a progress writer read while connections write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// connectTo connects with the talosconfig at path through one endpoint.
func connectTo(t *testing.T, path, endpoint, node string, timeout time.Duration, progress *syncBuffer) *Client {
	t.Helper()
	opts := Options{Talosconfig: path, Endpoints: []string{endpoint}, Nodes: []string{node}, ConnectTimeout: timeout}
	if progress != nil {
		opts.Progress = progress
	}
	c, err := Connect(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// brokenEndpoints are Talos API endpoints on 127.0.0.1 that each fail in
// their own way, closed with the test, and the path of a talosconfig for
// them.
func brokenEndpoints(t *testing.T) (*talostest.BrokenEndpoints, string) {
	t.Helper()
	b, err := talostest.NewBrokenEndpoints("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := b.Talosconfig.Save(path); err != nil {
		t.Fatal(err)
	}
	return b, path
}

// A connection that fails at the transport is told by what its endpoint
// did: a certificate problem (exit 3) from nothing listening or nothing
// answering (exit 4), the endpoint named. Each endpoint fails the same way
// every time; what grpc-go happens to see first (TLS 1.3: the alert, a
// broken pipe or EOF) does not change the verdict.
func TestConnectionFailuresTold(t *testing.T) {
	b, path := brokenEndpoints(t)
	for _, tc := range []struct {
		name, endpoint string
		kind           failure.Category
		msg, hint      string
	}{
		{"closed port", b.Closed, failure.Unreachable, `refused the connection: nothing listens there`, `the Talos API listens on 50000`},
		{"silent", b.Silent, failure.Unreachable, `accepted TCP but did not answer TLS or gRPC within 2s`, `--connect-timeout 30s`},
		{"closed on accept", b.CloseOnAccept, failure.Unreachable, `accepted TCP and closed the connection without a TLS answer`, `is the Talos API \(apid, port 50000\)`},
		{"closed after TLS", b.CloseAfterTLS, failure.Credentials, `closed the connection after the TLS handshake, before its first answer .*most likely it refused the talosconfig's client certificate, a CA mismatch`, `talosctl --talosconfig .* --context broken -e .* version`},
		{"TLS 1.2 refusal", b.RefuseCertTLS12, failure.Credentials, `refused the talosconfig's client certificate \(remote error: tls: .*\): a CA mismatch`, `talosctl config new`},
		{"TLS 1.3 refusal", b.RefuseCertTLS13, failure.Credentials, `(refused the talosconfig's client certificate|closed the connection after the TLS handshake).*CA mismatch`, `context is this cluster's`},
		{"foreign server certificate", b.ForeignServerCert, failure.Credentials, `certificate is not signed by the talosconfig's CA: a CA mismatch.*x509: certificate signed by unknown authority`, `context is this cluster's`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := connectTo(t, path, tc.endpoint, "127.0.0.1", 2*time.Second, nil)
			start := time.Now()
			_, err := c.Version(t.Context(), "127.0.0.1")
			took := time.Since(start)
			t.Logf("%v\nhints: %q", err, failure.Hints(err))
			if got := failure.Code(err); got != int(tc.kind) {
				t.Fatalf("exit %d, want %d: %v", got, tc.kind, err)
			}
			if !strings.Contains(err.Error(), "endpoint "+tc.endpoint) || !regexp.MustCompile(tc.msg).MatchString(err.Error()) {
				t.Errorf("error %q does not name endpoint %s or say %q", err, tc.endpoint, tc.msg)
			}
			if h := strings.Join(failure.Hints(err), "\n"); !regexp.MustCompile(tc.hint).MatchString(h) {
				t.Errorf("hints %q do not say %q", h, tc.hint)
			}
			if took > 5*time.Second {
				t.Errorf("took %s with --connect-timeout 2s", took)
			}
		})
	}
}

// A node that accepts TCP and never answers: the wait is said once on the
// progress writer, and the call gives up after the connect timeout.
func TestSilentNodeProgress(t *testing.T) {
	b, path := brokenEndpoints(t)
	defer func(d time.Duration) { ProgressDelay = d }(ProgressDelay)
	ProgressDelay = 100 * time.Millisecond
	var progress syncBuffer
	c := connectTo(t, path, b.Silent, "127.0.0.1", 2*time.Second, &progress)
	start := time.Now()
	_, err := c.Version(t.Context(), "127.0.0.1")
	if took := time.Since(start); took < 2*time.Second || took > 5*time.Second {
		t.Errorf("gave up after %s, want the connect timeout, 2s", took)
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("%v, want unreachable", err)
	}
	want := "waiting for " + b.Silent + " (Talos API): connected, no answer yet; giving up after 2s (--connect-timeout)\n"
	if got := progress.String(); got != want {
		t.Errorf("progress %q, want once %q", got, want)
	}
	// A second call is not announced again.
	_, _ = c.Version(t.Context(), "127.0.0.1")
	if got := progress.String(); got != want {
		t.Errorf("progress after a second call %q, want once %q", got, want)
	}
}

// Against the emulator's real gRPC servers with mTLS: a client certificate
// from another cluster's CA (TLS 1.3: the node refuses it after the
// client's handshake), a talosconfig trusting another CA, and a node the
// endpoint cannot reach, which names both.
func TestConnectionFailuresRealNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := talostest.NewCluster(ctx, talostest.ClusterOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	other, err := talostest.NewCluster(ctx, talostest.ClusterOptions{IPs: []string{"127.0.0.21"}, Secrets: newBundle(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	node := c.Nodes[0]
	// A talosconfig of the other cluster's, trusting ca ("": its own).
	save := func(name string, ca []byte) string {
		cfg, err := other.TalosconfigWith(role.MakeSet(role.Admin), []string{node.Addr}, []string{node.IP})
		if err != nil {
			t.Fatal(err)
		}
		if ca != nil {
			cfg.Contexts[cfg.Context].CA = base64.StdEncoding.EncodeToString(ca)
		}
		path := filepath.Join(t.TempDir(), name)
		if err := cfg.Save(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// other's CA signs the client certificate; c's CA is trusted: the node refuses the client
	foreignClient := save("foreign-client", c.OSCA().Crt)
	// other's CA is trusted: the client refuses the node
	foreignServer := save("foreign-server", nil)
	admin, err := c.Talosconfig(role.Admin)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, talosconfig, node string
		kind                    failure.Category
		msg                     string
	}{
		{"foreign client certificate", foreignClient, node.IP, failure.Credentials, `client certificate is signed by \(talos\) key ID \w+, not by the talosconfig's CA .*; endpoint ` + node.Addr + ` refused it`},
		{"foreign server certificate", foreignServer, node.IP, failure.Credentials, `endpoint ` + node.Addr + `'s certificate is not signed by the talosconfig's CA`},
		{"unknown node", admin, "10.9.9.9", failure.Unreachable, `node 10.9.9.9: read version: unreachable: endpoint ` + node.Addr + ` answers, but could not reach node 10.9.9.9: .*dial tcp 10.9.9.9:50000`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := connectTo(t, tc.talosconfig, node.Addr, tc.node, 5*time.Second, nil)
			_, err := cl.Version(ctx, tc.node)
			t.Logf("%v\nhints: %q", err, failure.Hints(err))
			if got := failure.Code(err); got != int(tc.kind) {
				t.Fatalf("exit %d, want %d: %v", got, tc.kind, err)
			}
			if !regexp.MustCompile(tc.msg).MatchString(err.Error()) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
		})
	}
	// and the same talosconfig works: the probe did not make things up
	cl := connectTo(t, admin, node.Addr, node.IP, 5*time.Second, nil)
	if _, err := cl.Version(ctx, node.IP); err != nil {
		t.Fatal(err)
	}
}

// Only a connection that is over tells what its endpoint did: one still
// being made (the RPC failed elsewhere, through another endpoint) says
// nothing, or a healthy endpoint would be called silent.
func TestFromAttempt(t *testing.T) {
	at := func(set func(a *attempt)) *attempt {
		a := &attempt{}
		set(a)
		return a
	}
	for _, tc := range []struct {
		name    string
		a       *attempt
		want    outcome
		decides bool
	}{
		{"none", nil, 0, false},
		{"refused", at(func(a *attempt) { a.dialErr = &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED} }), refused, true},
		{"connecting", at(func(a *attempt) { a.connected.Store(true) }), 0, false},
		{"TLS under way", at(func(a *attempt) { a.connected.Store(true); a.spoke.Store(true) }), 0, false},
		{"timed out silent", at(func(a *attempt) { a.connected.Store(true); a.timedOut.Store(true) }), silent, true},
		{"timed out after TLS", at(func(a *attempt) { a.connected.Store(true); a.spoke.Store(true); a.timedOut.Store(true) }), noGRPC, true},
		{"hung up", at(func(a *attempt) { a.connected.Store(true); a.hungUp.Store(true) }), hungUpNoTLS, true},
	} {
		f, ok := fromAttempt("127.0.0.1:1", tc.a)
		if ok != tc.decides || ok && f.outcome != tc.want {
			t.Errorf("%s: %v %v, want %v %v", tc.name, f.outcome, ok, tc.want, tc.decides)
		}
	}
}
