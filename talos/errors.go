// Package talos speaks the Talos API for breakglass: connecting from a
// talosconfig, reading a node's machine config and its kube-apiserver static
// pod, and applying configs without a reboot. It knows nothing of etcd or of
// the recovery steps.
package talos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Kinds of failure callers tell apart, each of a failure category.
var (
	ErrPermission      = failure.New(failure.Credentials, "permission denied")
	ErrCertificate     = failure.New(failure.Credentials, "certificate mismatch")
	ErrClientCert      = failure.New(failure.Credentials, "client certificate refused")
	ErrUnreachable     = failure.New(failure.Unreachable, "unreachable")
	ErrRejected        = failure.New(failure.Refused, "rejected by the node")
	ErrBusy            = failure.New(failure.Conflict, "the node is busy with another change")
	ErrNeedsReboot     = failure.New(failure.Refused, "the change needs a reboot")
	ErrNotControlPlane = failure.New(failure.Refused, "not a control-plane node")
	ErrConfig          = failure.New(failure.BadInput, "talosconfig problem")
	ErrEtcdUnhealthy   = failure.New(failure.Refused, "the node's etcd is not healthy")
)

// NodeError is a failure on one node, named by its address.
type NodeError struct {
	Node  string
	Op    string // what was being done, e.g. "read machine config"
	Err   error  // wraps one of the kinds above when known
	hints []string
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("node %s: %s: %v", e.Node, e.Op, e.Err)
}

func (e *NodeError) Unwrap() error { return e.Err }

// Hints names the next thing to try.
func (e *NodeError) Hints() []string { return e.hints }

// nodeError classifies a gRPC error from the node into one of the kinds.
func nodeError(node, op string, err error, role string) error {
	if err == nil {
		return nil
	}
	ne := &NodeError{Node: node, Op: op, Err: err}
	st, ok := status.FromError(err)
	if !ok {
		return ne
	}
	msg := st.Message()
	switch st.Code() {
	case codes.PermissionDenied:
		ne.Err = fmt.Errorf("%w: %s", ErrPermission, msg)
		ne.hints = []string{roleHint(role)}
	case codes.Unavailable, codes.DeadlineExceeded:
		ne.Err = fmt.Errorf("%w: %s", ErrUnreachable, shortTransport(msg))
		ne.hints = []string{fmt.Sprintf("check the node answers: talosctl -n %s version", node)}
	case codes.InvalidArgument:
		// machined refuses a live apply of a change that needs a reboot
		// with InvalidArgument and this message.
		if strings.HasPrefix(msg, "this config change can't be applied in immediate mode") {
			ne.Err = fmt.Errorf("%w: %s", ErrNeedsReboot, msg)
		} else {
			ne.Err = fmt.Errorf("%w: %s", ErrRejected, msg)
		}
	case codes.FailedPrecondition:
		ne.Err = fmt.Errorf("%w: %s", ErrBusy, msg)
		ne.hints = []string{"wait for the other change to finish, then run the same command again"}
	default:
		ne.Err = errors.New(msg)
	}
	return ne
}

// nodeError is the package's nodeError for a call made through c: a
// transport failure is told by what the endpoints did (explain.go), with
// the endpoint named and the certificates blamed only when they are at fault.
func (c *Client) nodeError(ctx context.Context, node, op string, err error) error {
	failedAt := time.Now()
	e := nodeError(node, op, err, c.role)
	var ne *NodeError
	if c.watch == nil || !errors.Is(e, ErrUnreachable) || !errors.As(e, &ne) {
		return e
	}
	found, ok := c.watch.explain(ctx, failedAt, c.tlsConf)
	if !ok {
		return e
	}
	kind := ErrUnreachable
	if slices.ContainsFunc(found, finding.credentials) && !slices.ContainsFunc(found, func(f finding) bool { return f.outcome == answers }) {
		kind = ErrCertificate
	}
	if why, ep := c.refusedCertificate(found); why != "" {
		ne.Err = fmt.Errorf("%w: %s", ErrClientCert, why)
		ne.hints = newTalosconfigHints(c.context, ep)
		return ne
	}
	ne.Err = fmt.Errorf("%w: %s", kind, joinFindings(found, node, shortTransport(status.Convert(err).Message()), c.watch.timeout))
	ne.hints = nil
	for _, f := range found {
		ne.hints = append(ne.hints, f.hints(node, c.talosctlFlags())...)
	}
	return ne
}

// refusedCertificate says why apid refuses the client certificate, read
// from the certificate itself (expired, its key usage, another CA), and
// which endpoint refused it, when an endpoint refused or dropped the
// connection at or after the TLS handshake; "" when the certificate shows
// nothing wrong (the node may not trust its CA: explain.go says so).
func (c *Client) refusedCertificate(found []finding) (why, endpoint string) {
	i := slices.IndexFunc(found, func(f finding) bool {
		return f.outcome == refusedCert || f.outcome == hungUpAfterTLS || f.outcome == hungUpInTLS
	})
	if i < 0 {
		return "", ""
	}
	var reasons []string
	for _, r := range c.cert.refusals(time.Now()) {
		reasons = append(reasons, r.what)
	}
	if len(reasons) == 0 {
		return "", ""
	}
	f := found[i]
	said := fmt.Sprintf("endpoint %s refused it", f.endpoint)
	if f.detail != "" {
		said += " (" + f.detail + ")"
	}
	return strings.Join(reasons, "; ") + "; " + said, f.endpoint
}

func roleHint(role string) string {
	if role == "" {
		role = "unknown"
	}
	return fmt.Sprintf("this talosconfig has role %s; reading or changing the machine config needs os:admin: use an admin talosconfig (talosctl config new, or --talosconfig PATH)", role)
}

// shortTransport trims gRPC's long connection error to its useful part.
func shortTransport(msg string) string {
	if i := strings.Index(msg, "connection error: desc = "); i >= 0 {
		return strings.Trim(msg[i+len("connection error: desc = "):], `"`)
	}
	return msg
}

// NewNodeError names a failure on one node, with optional next steps.
func NewNodeError(node, op string, err error, hints ...string) *NodeError {
	return &NodeError{Node: node, Op: op, Err: err, hints: hints}
}
