package etcd_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Issue 29: etcd usage against an etcd that stopped answering mid-read
// waited with no deadline (130 s and counting). Every read has one, and
// its error names the endpoint that stalled. The etcd is real (embedded,
// TLS), behind a proxy that forwards its first bytes and then nothing
// more, connections held open; what is asserted is the error, not a time
// (the bound only keeps a hang from passing unseen).
func TestReadsStalledMidReadEndWithTheEndpoint(t *testing.T) {
	srv, c := etcdtest.StartFilledTLS(t)
	for _, r := range []struct {
		name string
		read func(*etcd.Client) error
	}{
		{"usage", func(c *etcd.Client) error { _, err := c.Usage(ctx, etcd.UsageOptions{}); return err }},
		{"list", func(c *etcd.Client) error { _, err := c.List(ctx, kinds.All); return err }},
		{"snapshot", func(c *etcd.Client) error {
			_, err := c.Snapshot(ctx, filepath.Join(t.TempDir(), "snap.db"), etcd.RealWriter(c))
			return err
		}},
	} {
		t.Run(r.name, func(t *testing.T) {
			// 64 KiB: the connection and its first reads get through, the
			// 2 MB of values do not.
			proxy, err := etcdtest.NewStallProxy(srv.Endpoints[0], 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			ec, err := etcd.Connect(ctx, etcd.Config{Endpoints: []string{proxy.Endpoint}, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile, ReadTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer ec.Close()
			if r.name == "list" {
				// The admission objects are few: make the listing's read
				// the one that stalls.
				if err := etcdtest.Fill(ctx, c, "/registry/validatingwebhookconfigurations/big", 100, 20<<10); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- r.read(ec) }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%s against a stalled etcd still waits after a minute", r.name)
			}
			var stalled *etcd.StalledError
			if !errors.As(err, &stalled) {
				t.Fatalf("%s: got %v, want a stalled etcd named", r.name, err)
			}
			if !strings.Contains(err.Error(), "etcd at "+proxy.Endpoint+" stopped answering") || failure.Code(err) != int(failure.Unreachable) {
				t.Errorf("%s: %q (exit %d): want the endpoint %s named, exit 4", r.name, err, failure.Code(err), proxy.Endpoint)
			}
		})
	}
}
