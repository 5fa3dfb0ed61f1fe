package talos

// Connections to the Talos API endpoints, watched: each is bounded by the
// connect timeout (grpc-go alone waits 20 s), says on the progress writer
// when it keeps the operator waiting, and leaves a note of what its
// endpoint did, so that a failed call can be explained by the endpoint
// that failed it (see explain.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/dialer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// DefaultConnectTimeout bounds one connection to an endpoint when Options
// say nothing: TCP, TLS and the endpoint's first gRPC answer.
const DefaultConnectTimeout = 10 * time.Second

// ProgressDelay is how long a connection may keep the operator waiting
// before the progress writer hears of it. A variable: tests shorten it.
var ProgressDelay = 3 * time.Second

// attempt is what an endpoint did with one connection.
type attempt struct {
	dialErr   error       // the TCP dial failed (set before the attempt is noted)
	connected atomic.Bool // TCP is up
	spoke     atomic.Bool // the endpoint sent something (a TLS answer)
	hungUp    atomic.Bool // the endpoint closed it before sending anything
	closed    atomic.Bool // we closed it (done, or the connect timeout)
	timedOut  atomic.Bool // the connect timeout ended it
}

// watch dials the endpoints for gRPC and keeps each one's last attempt.
type watch struct {
	endpoints []string // host:port, as dialled
	timeout   time.Duration
	delay     time.Duration // ProgressDelay when connected
	progress  io.Writer     // nil: say nothing
	ready     atomic.Pointer[func() bool]

	mu    sync.Mutex
	last  map[string]*attempt
	told  map[string]bool
	probe map[string]*probeCache
}

func newWatch(endpoints []string, timeout time.Duration, progress io.Writer) *watch {
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	return &watch{endpoints: endpoints, timeout: timeout, delay: ProgressDelay, progress: progress,
		last: map[string]*attempt{}, told: map[string]bool{}, probe: map[string]*probeCache{}}
}

// dialOptions bound every connection attempt by the timeout: the backoff
// never stretches it (grpc-go gives an attempt the larger of the two).
func (w *watch) dialOptions() []grpc.DialOption {
	bo := backoff.DefaultConfig
	bo.MaxDelay = w.timeout
	return []grpc.DialOption{
		grpc.WithContextDialer(w.dial),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: w.timeout}),
		grpc.WithChainUnaryInterceptor(readDeadline),
	}
}

// ReadTimeout bounds one read of a node (its etcd's status or members, its
// services, a resource) that its caller gave no sooner deadline: a node
// whose etcd does not run, or that stopped answering, must not keep a
// command waiting for ever mid-incident. Changes keep their callers'
// deadlines (a defragmentation or an apply may rightly take minutes).
const ReadTimeout = 15 * time.Second

// readMethods are the unary calls that only read.
var readMethods = []string{
	"/machine.MachineService/Version", "/machine.MachineService/ServiceList", "/machine.MachineService/Containers",
	"/machine.MachineService/EtcdStatus", "/machine.MachineService/EtcdMemberList", "/machine.MachineService/EtcdAlarmList",
	"/cosi.resource.State/Get", "/cosi.resource.State/List",
}

func readDeadline(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, set := ctx.Deadline(); !set && slices.Contains(readMethods, method) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ReadTimeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// endpointOf names the endpoint an address belongs to: a single endpoint
// may resolve to other addresses.
func (w *watch) endpointOf(addr string) string {
	if len(w.endpoints) == 1 && !slices.Contains(w.endpoints, addr) {
		return w.endpoints[0]
	}
	return addr
}

// dial is talosctl's dialer (it honours HTTPS_PROXY), watched.
func (w *watch) dial(ctx context.Context, addr string) (net.Conn, error) {
	ep, a := w.endpointOf(addr), &attempt{}
	// ctx is grpc-go's connect context: it ends with DeadlineExceeded at
	// the connect timeout, Canceled once the connection is made or given up.
	context.AfterFunc(ctx, func() { a.timedOut.Store(errors.Is(ctx.Err(), context.DeadlineExceeded)) })
	timer := time.AfterFunc(w.delay, func() { w.sayWaiting(ep, a) })
	conn, err := dialer.DynamicProxyDialer(ctx, addr)
	if err != nil {
		timer.Stop()
		a.dialErr = err
		w.note(ep, a)
		return nil, err
	}
	a.connected.Store(true)
	w.note(ep, a)
	return &watchedConn{Conn: conn, a: a, stop: timer.Stop}, nil
}

func (w *watch) note(ep string, a *attempt) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last[ep] = a
}

func (w *watch) lastAttempt(ep string) *attempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[ep]
}

// sayWaiting tells, once per endpoint, that a connection still has no
// answer; not when another connection already serves the calls.
func (w *watch) sayWaiting(ep string, a *attempt) {
	if w.progress == nil || a.closed.Load() {
		return
	}
	if ready := w.ready.Load(); ready != nil && (*ready)() {
		return
	}
	w.mu.Lock()
	told := w.told[ep]
	w.told[ep] = true
	w.mu.Unlock()
	if told {
		return
	}
	state := "no TCP answer yet"
	switch {
	case a.spoke.Load():
		state = "connected, TLS started, no gRPC answer yet"
	case a.connected.Load():
		state = "connected, no answer yet"
	}
	fmt.Fprintf(w.progress, "waiting for %s (Talos API): %s; giving up after %s (--connect-timeout)\n", ep, state, w.timeout)
}

// watchedConn notes whether the endpoint ever spoke and who hung up first.
type watchedConn struct {
	net.Conn
	a    *attempt
	stop func() bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	switch {
	case n > 0:
		c.a.spoke.Store(true)
	case err != nil && !c.a.spoke.Load() && !c.a.closed.Load():
		c.a.hungUp.Store(true)
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.a.closed.Store(true)
	c.stop()
	return c.Conn.Close()
}
