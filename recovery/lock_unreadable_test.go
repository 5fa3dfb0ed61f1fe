package recovery_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
)

// A cluster lock breakglass cannot read (written by hand, another tool or
// another version, here with terminal escapes in it): the dry run warns of
// it, recover stops before any change saying how to get past it, both show
// the value made safe, and lock break removes it.
func TestUnreadableClusterLock(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	raw := "\x1b[2J\x1b]0;owned\x07{not json"
	if _, err := env.kv.Put(t.Context(), "/breakglass/lock", raw); err != nil {
		t.Fatal(err)
	}
	const shown = `\x1b[2J\x1b]0;owned\x07{not json`

	dry, err := recoverRun(t, env, recoverRequest{DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if msg := dry.step("preflight").Message; !strings.Contains(msg, "WARNING: the cluster lock /breakglass/lock holds a value breakglass cannot read: "+shown) ||
		!strings.Contains(msg, "a real run would stop here") || !strings.Contains(msg, "breakglass lock break") {
		t.Errorf("dry-run preflight says %q; want a warning about the unreadable lock", msg)
	}

	res, err := recoverRun(t, env, recoverRequest{})
	var unreadable *etcd.UnreadableLockError
	if !errors.As(err, &unreadable) || failure.Code(err) != int(failure.Conflict) {
		t.Fatalf("recover: %v (exit %d), want the unreadable lock, exit 6", err, failure.Code(err))
	}
	if strings.Contains(err.Error(), "\x1b") || !strings.Contains(err.Error(), shown) {
		t.Errorf("the raw value is not shown safely: %q", err.Error())
	}
	if hints := strings.Join(failure.Hints(err), "\n"); !strings.Contains(hints, "breakglass lock status") || !strings.Contains(hints, "breakglass lock break") {
		t.Errorf("hints %q do not say how to get past it", hints)
	}
	if got := res.step("disable").Outcome; got != "" {
		t.Errorf("disable ran (%s) past an unreadable lock", got)
	}
	if recs := admissionRecords(t, env); len(recs) != 0 {
		t.Errorf("admission changed on %v", recs)
	}

	ec, err := recovery.ConnectEtcd(t.Context(), nil, env.etcdOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	if _, err := ec.ReadLock(t.Context()); !errors.As(err, &unreadable) || string(unreadable.Raw) != raw {
		t.Fatalf("read lock: %v, want the raw value", err)
	}
	if h, err := ec.BreakLock(t.Context()); h != nil || err != nil {
		t.Fatalf("break: %+v, %v", h, err)
	}
	if lockHolder(t, env) != "" {
		t.Error("the unreadable lock is still there after lock break")
	}
}
