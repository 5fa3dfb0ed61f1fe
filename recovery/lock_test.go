package recovery

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Two engineers at once: the second is refused with the first one's name;
// once released, or broken, the lock can be taken again.
func TestClusterLock(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	ctx := context.Background()
	connect := func() *etcd.Client {
		ec, err := ConnectEtcd(ctx, nil, EtcdOptions{Endpoints: srv.Endpoints, CACert: srv.CAFile, Cert: srv.CertFile, Key: srv.KeyFile})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ec.Close() })
		return ec
	}
	alice, bob := connect(), connect()
	first, err := alice.AcquireLock(ctx, etcd.LockHolder{By: "alice@laptop", Since: time.Now(), Incident: "inc-1", Command: "recover"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.AcquireLock(ctx, etcd.LockHolder{By: "bob@desk", Since: time.Now(), Command: "admission disable"})
	var held *etcd.LockHeldError
	if !errors.As(err, &held) || held.Holder.By != "alice@laptop" || held.Holder.Incident != "inc-1" || !errors.Is(err, failure.Conflict) {
		t.Fatalf("second lock: %v, want held by alice", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := bob.AcquireLock(ctx, etcd.LockHolder{By: "bob@desk", Since: time.Now(), Command: "recover"})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	// bob's process dies without releasing: alice breaks the lock deliberately.
	h, err := alice.BreakLock(ctx)
	if err != nil || h == nil || h.By != "bob@desk" {
		t.Fatalf("break: holder %+v, err %v", h, err)
	}
	if h, err := alice.ReadLock(ctx); err != nil || h != nil {
		t.Fatalf("after break: holder %+v, err %v", h, err)
	}
	_ = second.Release(ctx) // its key is gone already; revoking the lease still works
	if _, err := alice.AcquireLock(ctx, etcd.LockHolder{By: "alice@laptop", Since: time.Now(), Command: "recover"}); err != nil {
		t.Fatalf("after break: %v", err)
	}
}

// Issue 21, case 7: a run killed (SIGKILL, power loss) leaves its
// lock.pid; by the time the operator resumes, its process id may belong to
// another live process. On main the id alone was checked, so that process
// counted as the incident's live run and blocked resume until the file was
// removed by hand. The record now carries the process's start time and
// boot id: another process with the same id is not the run.
func TestStaleLockPIDByStartTime(t *testing.T) {
	if processStart(os.Getpid()) == "" {
		t.Fatal("/proc does not tell this process's start time: the check would fall back to the id alone")
	}
	// Another process, alive, that got the dead run's id.
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	pid := other.Process.Pid

	// What the dead run (this test process's record, as takeLock writes it)
	// left, with its id now taken by the other process.
	mine := string(lockPIDRecord(os.Getpid()))
	reused := strconv.Itoa(pid) + strings.TrimPrefix(mine, strconv.Itoa(os.Getpid()))
	if got, alive := lockPIDAlive([]byte(reused)); got != pid || alive {
		t.Errorf("lock.pid %q, its id reused by a live process: (%d, alive %v), want (%d, gone)", reused, got, alive, pid)
	}
	// The recorded process itself, still running: the incident is busy.
	if got, alive := lockPIDAlive(lockPIDRecord(pid)); got != pid || !alive {
		t.Errorf("lock.pid of the live process itself: (%d, alive %v), want (%d, alive)", got, alive, pid)
	}
	// Another boot: whatever has that id now is not the run.
	fields := strings.Fields(string(lockPIDRecord(pid)))
	otherBoot := fields[0] + " " + fields[1] + " 00000000-0000-0000-0000-000000000000\n"
	if _, alive := lockPIDAlive([]byte(otherBoot)); alive {
		t.Errorf("lock.pid %q from another boot counts as alive", otherBoot)
	}
	// A record written before start times were kept: the id alone decides.
	if _, alive := lockPIDAlive([]byte(strconv.Itoa(pid) + "\n")); !alive {
		t.Error("an old lock.pid naming a live process counts as gone")
	}
	if err := other.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = other.Wait()
	if _, alive := lockPIDAlive(lockPIDRecord(os.Getpid())); alive {
		t.Error("this process's own record counts as another run")
	}
	if _, alive := lockPIDAlive([]byte(reused)); alive {
		t.Error("a process that is gone counts as alive")
	}
}

// A run killed with SIGKILL whose parent has not reaped it yet is a
// zombie: signal 0 still reaches it, and resume said the incident was being
// run by it (seen on a lab: recover -y killed from a script, resume one
// second later). A zombie holds no lock.
func TestKilledRunNotYetReapedHoldsNoLock(t *testing.T) {
	run := exec.Command("sleep", "60")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	record := lockPIDRecord(run.Process.Pid)
	if _, alive := lockPIDAlive(record); !alive {
		t.Fatal("the running process counts as gone")
	}
	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if procStat(run.Process.Pid) == nil {
		t.Skip("/proc does not tell a process's state here (not Linux): a zombie counts as the run")
	}
	deadline := time.Now().Add(time.Minute)
	for st := procStat(run.Process.Pid); len(st) == 0 || st[0] != "Z"; st = procStat(run.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the killed process is not a zombie after a minute: %v", st)
		}
		time.Sleep(time.Millisecond) // not reaped: this test is its parent and has not waited
	}
	if _, alive := lockPIDAlive(record); alive {
		t.Error("a killed run not yet reaped (a zombie) counts as alive")
	}
}

// Issue 21, case 11: etcd that did not answer is tried again at its next
// use. On main the first connection error was kept for the whole run: one
// timeout at preflight failed every later etcd step.
func TestEtcdRetriedAfterAFailure(t *testing.T) {
	ca, err := etcdtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPEM, keyPEM, err := ca.IssueClient("breakglass", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.crt": ca.CertPEM, "client.crt": certPEM, "client.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A free port: nothing listens there yet.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &run{opts: RecoverOptions{Etcd: EtcdOptions{
		Endpoints: []string{"https://127.0.0.1:" + strconv.Itoa(port)},
		CACert:    filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "client.crt"), Key: filepath.Join(dir, "client.key"),
	}}}
	ctx := t.Context()
	if _, err := r.etcdClient(ctx); err == nil {
		t.Fatal("etcd answered before it was started")
	}
	etcdtest.StartTLS(t, etcdtest.WithCA(ca), etcdtest.WithClientPort(port))
	ec, err := r.etcdClient(ctx)
	if err != nil {
		t.Fatalf("etcd answers now, but the run keeps the first failure: %v", err)
	}
	defer ec.Close()
	if again, _ := r.etcdClient(ctx); again != ec {
		t.Error("a connection that works is not kept")
	}
}
