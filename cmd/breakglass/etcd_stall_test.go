package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

// Issue 29: breakglass etcd usage against an etcd that stops answering
// mid-read waited with no deadline (130 s and counting), while etcd
// webhooks gave up after 7 s. A real etcd (embedded, TLS) behind a proxy
// that forwards its first 64 KiB and then nothing, connections held open:
// the command ends on its own deadline with the endpoint named, exit 4.
// The minute is only a bound that keeps a hang from passing unseen.
func TestEtcdUsageStalledMidRead(t *testing.T) {
	srv, _ := etcdtest.StartFilledTLS(t)
	proxy, err := etcdtest.NewStallProxy(srv.Endpoints[0], 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("BREAKGLASS_STATE_DIR", filepath.Join(dir, "state"))
	args := []string{"breakglass", "etcd", "usage", "--etcd-endpoints", proxy.Endpoint, "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), args, streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	}()
	var code int
	select {
	case code = <-done:
	case <-time.After(time.Minute):
		t.Fatal("etcd usage against a stalled etcd still waits after a minute")
	}
	want := "breakglass: etcd at " + proxy.Endpoint + " stopped answering: no answer to a range read within 10s"
	if code != 4 || !strings.Contains(errOut.String(), want) || !strings.Contains(errOut.String(), "hint: ") {
		t.Errorf("exit %d:\n%s\nwant exit 4 and %q with hints", code, errOut.String(), want)
	}
}
