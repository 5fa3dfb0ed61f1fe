package talos

// Explaining a call that failed at the transport (gRPC Unavailable): which
// endpoint, and what it did. grpc-go's own words depend on timing: with TLS
// 1.3 a node that refuses the client certificate is seen as its alert, a
// broken pipe or an EOF, whichever comes first. So the endpoint's last
// connection decides when it is enough (no TCP, or no answer at all), and
// otherwise one probe of our own, with the client's TLS settings, asks the
// endpoint in a way that always gives the same answer.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/dialer"
)

// outcome is what an endpoint did with a connection.
type outcome int

const (
	answers        outcome = iota // it speaks gRPC: the failure is past it
	refused                       // nothing listens
	noTCP                         // TCP did not connect (timeout, no route, no such host)
	silent                        // TCP accepted, no TLS answer
	hungUpNoTLS                   // TCP accepted, closed without a TLS answer
	hungUpInTLS                   // closed during the TLS handshake
	foreignCA                     // its certificate is not signed by the talosconfig's CA
	wrongName                     // its certificate does not name the address dialled
	badServerCert                 // its certificate fails verification otherwise (expired...)
	refusedCert                   // it refused our client certificate with a TLS alert
	hungUpAfterTLS                // TLS done, closed before its first answer: a refused client certificate
	noGRPC                        // TLS done, no gRPC answer
)

// finding is an endpoint's outcome and the error that showed it.
type finding struct {
	endpoint string
	outcome  outcome
	detail   string
}

// credentials tells whether the talosconfig's certificates are to blame.
func (f finding) credentials() bool {
	switch f.outcome {
	case foreignCA, wrongName, badServerCert, refusedCert, hungUpAfterTLS:
		return true
	}
	return false
}

// fromAttempt reads an outcome off the endpoint's last connection when it
// settles the matter: TCP failed, or the endpoint hung up or kept silent
// without TLS, or the connect timeout ended it. A connection still under
// way says nothing yet.
func fromAttempt(ep string, a *attempt) (finding, bool) {
	switch {
	case a == nil:
		return finding{}, false
	case a.dialErr != nil:
		return dialFinding(ep, a.dialErr), true
	case a.hungUp.Load():
		return finding{endpoint: ep, outcome: hungUpNoTLS}, true
	case !a.timedOut.Load():
		return finding{}, false
	case a.spoke.Load():
		return finding{endpoint: ep, outcome: noGRPC}, true
	}
	return finding{endpoint: ep, outcome: silent}, true
}

func dialFinding(ep string, err error) finding {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return finding{endpoint: ep, outcome: refused, detail: err.Error()}
	}
	return finding{endpoint: ep, outcome: noTCP, detail: err.Error()}
}

// probeCache keeps an endpoint's last probe: callers that failed before it
// finished share it, instead of probing once each.
type probeCache struct {
	mu   sync.Mutex
	at   time.Time
	last finding
}

// explain finds what each endpoint did; failedAt is when the call failed.
// It is false when an endpoint needed a probe and ctx has no time left.
func (w *watch) explain(ctx context.Context, failedAt time.Time, tlsConf *tls.Config) ([]finding, bool) {
	out := make([]finding, len(w.endpoints))
	known := make([]bool, len(w.endpoints))
	var wg sync.WaitGroup
	for i, ep := range w.endpoints {
		wg.Go(func() { out[i], known[i] = w.explainOne(ctx, ep, failedAt, tlsConf) })
	}
	wg.Wait()
	return out, !slices.Contains(known, false)
}

func (w *watch) explainOne(ctx context.Context, ep string, failedAt time.Time, tlsConf *tls.Config) (finding, bool) {
	if f, ok := fromAttempt(ep, w.lastAttempt(ep)); ok {
		return f, true
	}
	if ctx.Err() != nil {
		return finding{}, false
	}
	w.mu.Lock()
	pc := w.probe[ep]
	if pc == nil {
		pc = &probeCache{}
		w.probe[ep] = pc
	}
	w.mu.Unlock()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.at.After(failedAt) {
		return pc.last, true
	}
	f := probe(ctx, ep, w.timeout, tlsConf)
	if ctx.Err() != nil {
		return finding{}, false // the caller gave up: the probe was cut, not answered
	}
	pc.last, pc.at = f, time.Now()
	return f, true
}

// http2Preface is what a gRPC client sends first: the connection preface
// and an empty SETTINGS frame. Every HTTP/2 server answers it.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// probe connects to the endpoint as the client does (TCP, TLS with its
// configuration, the HTTP/2 preface) and waits for its first answer.
func probe(ctx context.Context, ep string, timeout time.Duration, tlsConf *tls.Config) finding {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := dialer.DynamicProxyDialer(ctx, ep)
	if err != nil {
		return dialFinding(ep, err)
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	host, _, _ := net.SplitHostPort(ep)
	conf := tlsConf.Clone()
	conf.ServerName, conf.NextProtos = host, []string{"h2"}
	conn := tls.Client(raw, conf)
	if err := conn.HandshakeContext(ctx); err != nil {
		return handshakeFinding(ep, err)
	}
	if _, err := conn.Write([]byte(http2Preface)); err != nil {
		return afterHandshakeFinding(ep, err)
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return afterHandshakeFinding(ep, err)
	}
	return finding{endpoint: ep, outcome: answers}
}

func handshakeFinding(ep string, err error) finding {
	f := finding{endpoint: ep, detail: err.Error()}
	var verr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var name x509.HostnameError
	switch {
	case errors.As(err, &unknownCA):
		f.outcome, f.detail = foreignCA, "x509: certificate signed by unknown authority" // without x509's guesses at why
	case errors.As(err, &name):
		f.outcome = wrongName
	case errors.As(err, &verr):
		f.outcome = badServerCert
	case isAlert(err):
		f.outcome = refusedCert
	case isTimeout(err):
		f.outcome = silent
	default:
		f.outcome = hungUpInTLS
	}
	return f
}

func afterHandshakeFinding(ep string, err error) finding {
	f := finding{endpoint: ep, detail: err.Error()}
	switch {
	case isAlert(err):
		f.outcome = refusedCert
	case isTimeout(err):
		f.outcome = noGRPC
	default: // EOF, reset, broken pipe
		f.outcome = hungUpAfterTLS
	}
	return f
}

// isAlert tells a TLS alert the endpoint sent ("remote error: tls: ...").
func isAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}

// hostOf is the host of host:port.
func hostOf(ep string) string {
	if h, _, err := net.SplitHostPort(ep); err == nil {
		return h
	}
	return ep
}

// say is the finding in words, for the call on node that failed with msg.
func (f finding) say(node, msg string, timeout time.Duration) string {
	ep := "endpoint " + f.endpoint
	switch f.outcome {
	case answers:
		if hostOf(f.endpoint) == node {
			return fmt.Sprintf("%s answers now, but the call failed: %s", ep, msg)
		}
		return fmt.Sprintf("%s answers, but could not reach node %s: %s", ep, node, msg)
	case refused:
		return ep + " refused the connection: nothing listens there"
	case noTCP:
		return fmt.Sprintf("%s could not be reached: %s", ep, f.detail)
	case silent:
		return fmt.Sprintf("%s accepted TCP but did not answer TLS or gRPC within %s", ep, timeout)
	case hungUpNoTLS:
		return ep + " accepted TCP and closed the connection without a TLS answer"
	case hungUpInTLS:
		return fmt.Sprintf("%s closed the connection during the TLS handshake (%s)", ep, f.detail)
	case foreignCA:
		return fmt.Sprintf("%s's certificate is not signed by the talosconfig's CA: a CA mismatch, the talosconfig is for another cluster or the cluster's CA changed (%s)", ep, f.detail)
	case wrongName:
		return fmt.Sprintf("%s's certificate is not valid for %s (%s)", ep, hostOf(f.endpoint), f.detail)
	case badServerCert:
		return fmt.Sprintf("%s's certificate cannot be verified (%s)", ep, f.detail)
	case refusedCert:
		return fmt.Sprintf("%s refused the talosconfig's client certificate (%s): a CA mismatch (it is signed by a CA the node does not trust), or it expired", ep, f.detail)
	case hungUpAfterTLS:
		return fmt.Sprintf("%s closed the connection after the TLS handshake, before its first answer (%s): most likely it refused the talosconfig's client certificate, a CA mismatch (signed by another cluster's CA)", ep, f.detail)
	case noGRPC:
		return fmt.Sprintf("%s completed TLS but sent no gRPC answer within %s", ep, timeout)
	}
	return ep + ": " + f.detail
}

// hints are the next steps for the finding; tc names the talosconfig as
// given (path and context) for the commands to try.
func (f finding) hints(node, tc string) []string {
	ep := f.endpoint
	try := fmt.Sprintf("talosctl %s-e %s -n %s version", tc, ep, node)
	notTalos := fmt.Sprintf("check that %s is the Talos API (apid, port 50000), not another service or a proxy that holds connections: %s", ep, try)
	mismatch := fmt.Sprintf("check that the talosconfig's context is this cluster's: %s", try)
	newConfig := "use this cluster's talosconfig (--talosconfig PATH, --context NAME; omnictl talosconfig for Omni), or make one with a talosconfig that works: talosctl config new PATH"
	switch f.outcome {
	case answers:
		if hostOf(ep) == node {
			return []string{fmt.Sprintf("run the command again; if it fails again, see what the node says: talosctl -n %s version (through that endpoint: -e %s)", node, ep)}
		}
		return []string{fmt.Sprintf("check that node %s is up and reachable from endpoint %s: talosctl -n %s version (through that endpoint: -e %s); the cluster's members: talosctl -e %s get members", node, ep, node, ep, ep)}
	case refused:
		return []string{fmt.Sprintf("check the endpoint's address and port (the Talos API listens on 50000) and that the machine is up: %s", try)}
	case noTCP:
		return []string{fmt.Sprintf("check the route from here to %s (VPN, firewall, HTTPS_PROXY), then: %s", ep, try)}
	case silent, noGRPC:
		return []string{notTalos, "if the node is only slow to answer, give it longer: --connect-timeout 30s"}
	case hungUpNoTLS:
		return []string{notTalos}
	case hungUpInTLS:
		return []string{notTalos, mismatch}
	case foreignCA, refusedCert, hungUpAfterTLS:
		return []string{mismatch, newConfig}
	case wrongName:
		return []string{fmt.Sprintf("use an address the node's certificate names (its IPs and machine.certSANs) with -e, or add %s to machine.certSANs", hostOf(ep))}
	case badServerCert:
		return []string{"check the clocks here and on the node (a certificate not yet or no longer valid), then: " + try}
	}
	return []string{try}
}

// joinFindings is every endpoint's finding in one sentence.
func joinFindings(fs []finding, node, msg string, timeout time.Duration) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.say(node, msg, timeout)
	}
	return strings.Join(parts, "; ")
}
