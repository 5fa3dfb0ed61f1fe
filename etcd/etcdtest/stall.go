package etcdtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StallProxy is a TCP proxy in front of a server that forwards both ways
// until the server has sent After bytes in all, then forwards nothing
// more, either way, while it keeps every connection open, old and new: a
// member that took the request in and stopped answering mid-read (a
// stalled disk, a half-dead network). TLS passes through it untouched.
type StallProxy struct {
	// Endpoint is the proxy's URL, with the scheme of the server's.
	Endpoint string
	After    int64

	ln   net.Listener
	mu   sync.Mutex
	sent int64 // server to client, over all connections
	stop chan struct{}
	wg   sync.WaitGroup
	// conns are open until Close.
	conns []net.Conn
}

// NewStallProxy starts a proxy to the server at endpoint (a URL).
func NewStallProxy(endpoint string, after int64) (*StallProxy, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &StallProxy{Endpoint: u.Scheme + "://" + ln.Addr().String(), After: after, ln: ln, stop: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			select {
			case <-p.stop: // closed meanwhile
				p.mu.Unlock()
				c.Close()
				s.Close()
				return
			default:
			}
			p.conns = append(p.conns, c, s)
			p.wg.Add(2)
			p.mu.Unlock()
			go p.pipe(c, s, true)  // server to client
			go p.pipe(s, c, false) // client to server
		}
	}()
	return p, nil
}

// pipe copies from src to dst; from the server (fromServer), only up to
// the proxy's budget. Once the budget is spent it stops copying in both
// directions and waits for Close.
func (p *StallProxy) pipe(dst, src net.Conn, fromServer bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		if p.stalled() {
			<-p.stop
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			allowed := int64(n)
			if fromServer {
				allowed = p.spend(int64(n))
			} else if p.stalled() {
				allowed = 0
			}
			if allowed > 0 {
				if _, werr := dst.Write(buf[:allowed]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if err == io.EOF {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// spend takes up to n bytes of the budget and returns how many it got.
func (p *StallProxy) spend(n int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	left := max(p.After-p.sent, 0)
	got := min(n, left)
	p.sent += got
	return got
}

func (p *StallProxy) stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent >= p.After
}

// Close stops the proxy and closes every connection.
func (p *StallProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// StartFilledTLS is StartTLS holding 2,000 ConfigMaps of 1 KiB, and a
// client of it: reading them carries 2 MB, far more than the first bytes a
// StallProxy forwards, so that a read of them stalls in the middle.
func StartFilledTLS(t TB, opts ...Option) (*Server, *clientv3.Client) {
	t.Helper()
	srv := StartTLS(t, opts...)
	c := srv.TestClient(t)
	if err := Fill(context.Background(), c, "/registry/configmaps/fill/cm", 2000, 1024); err != nil {
		t.Fatalf("etcdtest: fill: %v", err)
	}
	return srv, c
}

// Fill puts n keys of size bytes under prefix (PREFIX-000000, ...), 50 to
// a transaction: data enough for a read to stall in the middle of.
func Fill(ctx context.Context, c *clientv3.Client, prefix string, n, size int) error {
	value := strings.Repeat("v", size)
	for i := 0; i < n; i += 50 {
		ops := make([]clientv3.Op, 0, 50)
		for j := i; j < min(i+50, n); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s-%06d", prefix, j), value))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
	}
	return nil
}
