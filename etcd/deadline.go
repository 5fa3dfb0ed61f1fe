package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Every read of etcd has a deadline (issue 29): a member that takes the
// request in and then stops answering (a stalled disk, a half-dead
// proxy, a network that drops packets without a reset) would otherwise
// keep a command waiting for ever, mid-incident. The rule lives in one
// place, the client's gRPC interceptor, so that no read can forget it:
//
//   - each read request (a range, a read-only transaction, a member's
//     status, the alarm list, the member list) that its caller gave no
//     sooner deadline gets ReadTimeout;
//   - a snapshot, a stream that may rightly take minutes, fails when no
//     data has come for ReadTimeout;
//   - the error names the endpoint that stalled and what it was asked
//     (*StalledError).
//
// Writes keep their callers' deadlines: a write cut short by a deadline
// may still have been applied, and the callers that write decide what
// that means.

// DefaultReadTimeout bounds one read request when Config.ReadTimeout is
// zero: a page of a range is a few MiB at most, served in milliseconds by
// a healthy member and in seconds by a loaded one.
const DefaultReadTimeout = 10 * time.Second

// StalledError is a read that etcd took in and did not answer within its
// deadline: the endpoint that stalled, what it was asked, for how long.
type StalledError struct {
	Endpoint string // the endpoint URL (or address) the request went to
	What     string // "a range read"
	After    time.Duration
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("etcd at %s stopped answering: no answer to %s within %s", e.Endpoint, e.What, e.After)
}

// Unwrap: the member could not be reached, for all purposes.
func (e *StalledError) Unwrap() error { return failure.Unreachable }

// Hints implements the hint convention of cmd/breakglass.
func (e *StalledError) Hints() []string {
	return []string{
		"see how that member is: talosctl -n NODE service etcd; talosctl -n NODE logs etcd",
		"read through another member: --etcd-endpoints https://OTHER-NODE:2379",
	}
}

// readDeadlines is the interceptor that gives read requests their
// deadline; endpoints are the client's, to name an address by its URL.
func readDeadlines(timeout time.Duration, endpoints []string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		what := readRequest(method, req)
		if what == "" {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) <= timeout {
			return invoker(ctx, method, req, reply, cc, opts...) // the caller's own, sooner
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var p peer.Peer
		err := invoker(rctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
		if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return &StalledError{Endpoint: endpointOf(p.Addr, cc, endpoints), What: what, After: timeout}
		}
		return err
	}
}

// readRequest says what a request reads ("a range read"), or "" when it
// is not a read (a write, a compaction, a defragmentation).
func readRequest(method string, req any) string {
	switch r := req.(type) {
	case *etcdserverpb.RangeRequest:
		return "a range read"
	case *etcdserverpb.TxnRequest:
		for _, ops := range [][]*etcdserverpb.RequestOp{r.Success, r.Failure} {
			for _, op := range ops {
				if op.GetRequestRange() == nil {
					return ""
				}
			}
		}
		return "a read transaction"
	case *etcdserverpb.StatusRequest:
		return "a status request"
	case *etcdserverpb.AlarmRequest:
		if r.Action == etcdserverpb.AlarmRequest_GET {
			return "the alarm list"
		}
	case *etcdserverpb.MemberListRequest:
		return "the member list"
	}
	return ""
}

// endpointOf names the endpoint a request went to: its URL when the
// address is one of the client's endpoints, the address otherwise; the
// connection's target when no address is known.
func endpointOf(addr net.Addr, cc *grpc.ClientConn, endpoints []string) string {
	if addr == nil {
		if len(endpoints) == 1 {
			return endpoints[0]
		}
		return strings.Join(endpoints, ", ")
	}
	for _, ep := range endpoints {
		if u, err := url.Parse(ep); err == nil && u.Host == addr.String() {
			return ep
		}
	}
	return addr.String()
}

// stallWatch is a stream read with a deadline on progress: when no data
// has come for timeout, the stream's context is cancelled with a
// *StalledError as its cause.
type stallWatch struct {
	r       io.Reader
	timeout time.Duration
	timer   *time.Timer
	cancel  context.CancelCauseFunc
	mu      sync.Mutex
	err     *StalledError
}

// watchStalls gives the stream read through the returned context its
// progress deadline; stop releases the timer.
func watchStalls(ctx context.Context, timeout time.Duration, endpoint, what string) (context.Context, *stallWatch) {
	sctx, cancel := context.WithCancelCause(ctx)
	w := &stallWatch{timeout: timeout, cancel: cancel}
	w.timer = time.AfterFunc(timeout, func() {
		w.mu.Lock()
		w.err = &StalledError{Endpoint: endpoint, What: what, After: timeout}
		w.mu.Unlock()
		cancel(w.err)
	})
	return sctx, w
}

// Read reads, and pushes the deadline back when data came.
func (w *stallWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.timer.Reset(w.timeout)
	}
	if err != nil && err != io.EOF {
		if stalled := w.stalled(); stalled != nil {
			return n, stalled
		}
	}
	return n, err
}

// stalled is the stall that cancelled the stream, if one did.
func (w *stallWatch) stalled() *StalledError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *stallWatch) stop() {
	w.timer.Stop()
	w.cancel(nil)
}
