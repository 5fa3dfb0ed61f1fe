package main

import (
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/recovery"
)

// lock status shows a lock value breakglass cannot read, made safe; lock
// break removes it only after confirmation.
func TestLockUnreadableCommands(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	ec, err := recovery.ConnectEtcd(t.Context(), nil, recovery.EtcdOptions{Endpoints: srv.Endpoints, CACert: srv.CAFile, Cert: srv.CertFile, Key: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	if _, err := ec.KV().Put(t.Context(), "/breakglass/lock", "\x1b[31mmanual hold"); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--etcd-endpoints", strings.Join(srv.Endpoints, ","), "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}
	bg := func(args ...string) (int, string, string) {
		return runInProcess(t, append(append([]string{"--state-dir", t.TempDir()}, args...), conn...)...)
	}
	code, out, errOut := bg("lock", "status")
	if code != 0 || !strings.Contains(out, `cannot read: \x1b[31mmanual hold`) || strings.Contains(out, "\x1b") || !strings.Contains(out, "breakglass lock break") {
		t.Errorf("lock status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = bg("lock", "break") // no answer: declined
	if code != 8 || !strings.Contains(out, `\x1b[31mmanual hold`) {
		t.Errorf("lock break without confirmation: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := bg("lock", "status"); code != 0 || !strings.Contains(out, "cannot read") {
		t.Fatalf("declined, yet the lock is gone: %s", out)
	}
	code, out, errOut = bg("lock", "break", "--yes")
	if code != 0 || !strings.Contains(out, "lock broken") {
		t.Errorf("lock break --yes: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := bg("lock", "status"); code != 0 || !strings.Contains(out, "free") {
		t.Errorf("after break: %s", out)
	}
}
