package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// spaceQuota is the test etcd's quota: small, so that filling it is quick.
const spaceQuota = 8 << 20

// etcdMember gives each node's Talos API the test etcd as its own member
// (one member for every node).
func (e *engineEnv) etcdMember() func(*talostest.Node) (talostest.EtcdAccess, error) {
	return func(*talostest.Node) (talostest.EtcdAccess, error) {
		tlsConf, err := e.etcd.ClientTLS()
		return talostest.EtcdAccess{Endpoint: e.etcd.Endpoints[0], TLS: tlsConf}, err
	}
}

// noSpace tells whether etcd's NOSPACE alarm is raised.
func (e *engineEnv) noSpace(ctx context.Context) bool {
	resp, err := e.kv.AlarmList(ctx)
	if err != nil {
		return false
	}
	for _, a := range resp.Alarms {
		if a.Alarm.String() == "NOSPACE" {
			return true
		}
	}
	return false
}

// fill writes as a cluster fills etcd: an event flood in one namespace,
// then a status rewritten in a loop, until etcd refuses for lack of space.
func (e *engineEnv) fill() {
	e.t.Helper()
	e.writeUntilFull(func(ctx context.Context, i int) error {
		var ops []clientv3.Op
		for j := range 50 {
			k := fmt.Sprintf("/registry/events/flood/crashing-%05d.%02d", i, j)
			ops = append(ops, clientv3.OpPut(k, strings.Repeat("e", 1000)))
		}
		if i >= 60 {
			ops = []clientv3.Op{clientv3.OpPut("/registry/example.com/widgets/team-a/w1", fmt.Sprintf("%d%s", i, strings.Repeat("s", 16<<10)))}
		}
		_, err := e.kv.Txn(ctx).Then(ops...).Commit()
		return err
	})
}

// writeUntilFull calls write with 0, 1, 2, ... until etcd refuses a write
// for lack of space.
func (e *engineEnv) writeUntilFull(write func(ctx context.Context, i int) error) {
	e.t.Helper()
	for i := 0; ; i++ {
		err := write(e.t.Context(), i)
		if errors.Is(err, rpctypes.ErrNoSpace) || err != nil && strings.Contains(err.Error(), "database space exceeded") {
			return
		}
		if err != nil {
			e.t.Fatal(err)
		}
		if i > 100_000 {
			e.t.Fatal("etcd never filled")
		}
	}
}

// liveKeys are etcd's keys and values now.
func (e *engineEnv) liveKeys() map[string]string {
	e.t.Helper()
	resp, err := e.kv.Get(e.t.Context(), "", clientv3.WithFromKey(), clientv3.WithSerializable()) // a member without quorum answers it
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func (e *engineEnv) waitReadyOrNot(ready bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		hs, _ := recovery.CheckHealth(e.t.Context(), e.tc)
		if len(hs) > 0 && hs[0].Ready == ready {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("kube-apiserver never became ready=%v: %+v", ready, hs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A full etcd: the plain recover's diagnosis says etcd-nospace and follows
// runbook etcd-nospace (snapshot, usage, compact, defragment, disarm,
// wait); its dry run and a declined confirmation change nothing; a run
// told to use the admission runbook stops before any change (exit 30);
// the real run brings writes and /readyz back and loses no live key.
func TestEngineFullEtcd(t *testing.T) {
	env := newEngineEnv(t, envOptions{etcdQuota: spaceQuota})
	env.fill()
	if !env.noSpace(t.Context()) {
		t.Fatal("etcd refused a write but raised no NOSPACE alarm")
	}
	env.waitReadyOrNot(false)
	before := env.liveKeys()
	st, err := env.kv.Status(t.Context(), env.etcd.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	sizeBefore := st.DbSize

	// An admission runbook named by the operator would restart
	// kube-apiserver into a full etcd: it stops before any change.
	rb, _ := runbooks.Resolve("webhook-deadlock")
	opts := recovery.RecoverOptions{Runbook: rb.Metadata.Name, RunbookExplicit: true, Steps: recovery.StepsOf(rb), Etcd: env.etcdOptions(), ToolVersion: "engine-test", Command: "recover"}
	_, err = recovery.Recover(t.Context(), env.tc, env.state(), env.effects(false), newTestUI(t, engineHooks{}), opts)
	if failure.Code(err) != int(failure.DiagnoseNoSpace) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("recover --runbook webhook-deadlock on a full etcd: %v (exit %d), want exit 30 and nothing changed", err, failure.Code(err))
	}

	// Turning admission plugins off would restart kube-apiserver into the
	// full etcd: refused before any change.
	if _, err := standaloneDisable(t, env, []string{"ValidatingAdmissionWebhook"}); failure.Code(err) != int(failure.DiagnoseNoSpace) || !strings.Contains(err.Error(), "etcd is full") {
		t.Errorf("admission disable on a full etcd: %v (exit %d), want refused with exit 30", err, failure.Code(err))
	}
	for ip, cfg := range env.original {
		if got := env.cluster.Node(ip).RunningConfig(); string(got) != string(cfg) {
			t.Errorf("node %s: its config changed", ip)
		}
	}

	// The dry run walks the whole etcd-nospace runbook, changing nothing.
	out, err := recoverRun(t, env, recoverRequest{DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	want := []string{"preflight", "diagnose", "snapshot", "usage", "compact", "defragment", "disarm", "wait-apiserver"}
	if got := out.Begun; !slicesEqual(got, want) {
		t.Errorf("dry run steps %q, want the etcd-nospace runbook's %q", got, want)
	}
	if d := out.step("diagnose"); !strings.Contains(d.Message, "runbook etcd-nospace from here, 8 steps in all") {
		t.Errorf("the diagnose step does not say the run switched to the 8 steps of etcd-nospace: %q", d.Message)
	}
	if u := out.step("usage"); u.Outcome != recovery.OutcomeOK || !strings.Contains(u.Message, "events in namespace flood") {
		t.Errorf("dry run usage step: %+v, want the flood named", u)
	}
	for _, s := range []string{"compact", "defragment", "disarm"} {
		if o := out.step(s); !strings.HasPrefix(o.Message, "dry run: ") {
			t.Errorf("dry run step %s: %+v", s, o)
		}
	}
	if !env.noSpace(t.Context()) || !maps.Equal(env.liveKeys(), before) {
		t.Fatal("the dry run changed etcd")
	}

	// Declined at the compaction: nothing changed, exit 8.
	declined, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{confirm: func(q string) error {
		return recovery.Declined("not confirmed")
	}}})
	if !errorIs(err, "aborted") || !env.noSpace(t.Context()) {
		t.Fatalf("declined: %v; alarm still raised: %v", err, env.noSpace(t.Context()))
	}

	// Resumed, that incident follows its journaled diagnosis (etcd-nospace's
	// steps), not the runbook it was started with.
	var asked []string
	out, err = resumeRun(t, env, declined.Incident, engineHooks{confirm: func(q string) error {
		asked = append(asked, q)
		return nil
	}})
	if err != nil || out.Outcome != "completed" {
		t.Fatalf("recover: %v, outcome %q\n%+v", err, out.Outcome, out.Steps)
	}
	if len(asked) != 3 {
		t.Errorf("asked %q, want the compaction, the defragmentation and the disarm", asked)
	}
	if env.noSpace(t.Context()) {
		t.Error("NOSPACE still raised after the recovery")
	}
	if _, err := env.kv.Put(t.Context(), "/registry/configmaps/default/after", "x"); err != nil {
		t.Errorf("a write after the recovery: %v", err)
	}
	after := env.liveKeys()
	delete(after, "/registry/configmaps/default/after")
	if !maps.Equal(after, before) {
		t.Errorf("live keys changed: %d before, %d after", len(before), len(after))
	}
	st, err = env.kv.Status(t.Context(), env.etcd.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.DbSize >= sizeBefore {
		t.Errorf("database %d bytes after, %d before: nothing freed", st.DbSize, sizeBefore)
	}
	if d := out.step("defragment"); !strings.Contains(d.Message, "1 member(s) defragmented") {
		t.Errorf("defragment: %+v", d)
	}
	if !containsAny(out.Next, "what filled etcd: events in namespace flood") || !containsAny(out.Next, "quota-backend-bytes") {
		t.Errorf("the summary does not name the source and the quota: %q", out.Next)
	}
	if lockHeld(t, env) {
		t.Error("the cluster lock is still held after the run")
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func containsAny(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func lockHeld(t *testing.T, env *engineEnv) bool {
	t.Helper()
	resp, err := env.kv.Get(t.Context(), "/breakglass/lock", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count > 0
}

// Killed right after each record of a change of etcd-nospace (the change
// made, the next record never written: the crash between a transaction and
// its journal record), the incident resumes to the end: each step finds
// its change already made and goes on.
func TestEngineFullEtcdKilledAtEachRecord(t *testing.T) {
	for _, step := range []string{"compact", "defragment", "disarm"} {
		for _, kind := range []string{"apply", "end"} {
			t.Run(kind+"-"+step, func(t *testing.T) {
				env := newEngineEnv(t, envOptions{etcdQuota: spaceQuota})
				env.fill()
				env.waitReadyOrNot(false)
				before := env.liveKeys()
				first, err := recoverRun(t, env, recoverRequest{})
				if err != nil || first.Outcome != "completed" {
					t.Fatalf("recover: %v %+v", err, first.Steps)
				}
				simulateKillAfter(t, env, first.Incident, kind, step)
				res, err := resumeRun(t, env, first.Incident, engineHooks{})
				if err != nil || res.Outcome != "completed" {
					t.Fatalf("resume after a kill after %s of %s: %v, outcome %q %+v", kind, step, err, res.Outcome, res.Steps)
				}
				if !hasStep(res.Begun, step) != (kind == "end") {
					t.Errorf("resume ran %v: the step %s must run again after its %s record, not after its end", res.Begun, step, kind)
				}
				if env.noSpace(t.Context()) {
					t.Error("NOSPACE raised after the resume")
				}
				after := env.liveKeys()
				if !maps.Equal(after, before) {
					t.Errorf("live keys changed: %d before, %d after", len(before), len(after))
				}
				if lockHeld(t, env) {
					t.Error("the cluster lock is still held")
				}
			})
		}
	}
}

// Killed while streaming the snapshot (seen in the lab's random-kill test):
// the incident's own etcd.snapshot.part is left, and its journal ends at
// the snapshot's begin record. The resume, holding the incident, removes
// that leftover, takes the snapshot again and recovers the full etcd.
func TestEngineFullEtcdKilledWhileSnapshotting(t *testing.T) {
	env := newEngineEnv(t, envOptions{etcdQuota: spaceQuota})
	env.fill()
	before := env.liveKeys()
	first, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{confirm: func(string) error { return declined() }}})
	if failure.Code(err) != int(failure.Declined) {
		t.Fatalf("recover, declined at the compaction: %v", err)
	}
	simulateKillAfter(t, env, first.Incident, "begin", "snapshot")
	snap := filepath.Join(incident(t, env, first.Incident).Dir, "etcd.snapshot")
	if err := os.Rename(snap, snap+".part"); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(snap+".part", 4096); err != nil {
		t.Fatal(err)
	}

	res, err := resumeRun(t, env, first.Incident, engineHooks{})
	if err != nil || res.Outcome != "completed" {
		t.Fatalf("resume after a kill mid-snapshot: %v, outcome %q %+v", err, res.Outcome, res.Steps)
	}
	if _, err := etcd.VerifySnapshotFile(snap); err != nil {
		t.Errorf("the snapshot taken again: %v", err)
	}
	if _, err := os.Stat(snap + ".part"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the partial snapshot is still there: %v", err)
	}
	if env.noSpace(t.Context()) {
		t.Error("NOSPACE raised after the resume")
	}
	if after := env.liveKeys(); !maps.Equal(after, before) {
		t.Errorf("live keys changed: %d before, %d after", len(before), len(after))
	}
}

// A full etcd defers this run's lock (taking it is a write), but a lock
// another run holds still keeps it out: read, not written.
func TestEngineFullEtcdLockHeldByAnother(t *testing.T) {
	env := newEngineEnv(t, envOptions{etcdQuota: spaceQuota})
	release := holdLock(t, env, "alice@laptop", "20260101-000000-alice1")
	defer release()
	env.fill()
	_, err := recoverRun(t, env, recoverRequest{})
	var held *etcd.LockHeldError
	if !errors.As(err, &held) || held.Holder.Incident != "20260101-000000-alice1" {
		t.Fatalf("recover on a full etcd while alice holds the lock: %v, want refused as held by her", err)
	}
	if !env.noSpace(t.Context()) {
		t.Error("the run changed etcd while alice held the lock")
	}
}

// fillLive fills etcd with live keys only, each written once: no history
// for a compaction to free.
func (e *engineEnv) fillLive() {
	e.t.Helper()
	e.writeUntilFull(func(ctx context.Context, i int) error {
		_, err := e.kv.Put(ctx, fmt.Sprintf("/registry/example.com/widgets/team-a/w%06d", i), strings.Repeat("l", 16<<10))
		return err
	})
}

// An etcd full of live data: the plan says before the compaction that it
// would not help (etcd would stay full), says to raise the quota, and stops
// there (exit 30) without compacting, which nothing could undo. Before, it
// compacted, defragmented every member, asked for the disarm, and failed
// "still full", the quota said only on success.
func TestEngineFullOfLiveDataStopsBeforeCompaction(t *testing.T) {
	env := newEngineEnv(t, envOptions{etcdQuota: spaceQuota})
	env.fillLive()
	if !env.noSpace(t.Context()) {
		t.Fatal("etcd refused a write but raised no NOSPACE alarm")
	}
	before := env.liveKeys()
	rev, err := env.kv.Get(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	out, err := recoverRun(t, env, recoverRequest{})
	if failure.Code(err) != int(failure.DiagnoseNoSpace) || out.Outcome != "stopped" {
		t.Fatalf("recover on an etcd full of live data: %v (exit %d), outcome %s; want stopped, exit 30", err, failure.Code(err), out.Outcome)
	}
	if c := out.step("compact"); !strings.Contains(c.Message, "would not help") {
		t.Errorf("compact step: %+v, want it to say compacting would not help", c)
	}
	if !containsAny(out.Next, "quota-backend-bytes") {
		t.Errorf("next %q does not say how to raise the quota", out.Next)
	}
	if slices.Contains(out.Begun, "defragment") {
		t.Errorf("went on past the compaction: %q", out.Begun)
	}
	if !env.noSpace(t.Context()) || !maps.Equal(env.liveKeys(), before) {
		t.Fatal("etcd changed")
	}
	// Not compacted: the revision before the run can still be read.
	if _, err := env.kv.Get(t.Context(), "/", clientv3.WithRev(rev.Header.Revision-1)); err != nil {
		t.Errorf("etcd's history was compacted: %v", err)
	}
}

// A history compacted already (by hand, say) is not compacted again: the
// step says so and asks nothing; the run goes on and frees what the
// defragmentation frees.
func TestEngineCompactedAlreadyIsNotAsked(t *testing.T) {
	env := newEngineEnv(t, envOptions{etcdQuota: spaceQuota})
	env.fill()
	st, err := env.kv.Status(t.Context(), env.etcd.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.kv.Compact(t.Context(), st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	var asked []string
	var shown strings.Builder
	out, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		confirm: func(q string) error { asked = append(asked, q); return nil },
		show:    func(s string) { shown.WriteString(s) },
	}})
	wantOutcome(t, out, err, "completed", false)
	if c := out.step("compact"); c.Outcome != recovery.OutcomeSkipped || !strings.Contains(c.Message, "compacted up to revision") {
		t.Errorf("compact step: %+v, want skipped: compacted already", c)
	}
	if containsAny(asked, "compact") {
		t.Errorf("asked %q: the compaction was asked for", asked)
	}
	// The deferred lock is said, marked, and stays on the screen.
	if !strings.Contains(shown.String(), "WARNING: cannot take the cluster lock yet") {
		t.Errorf("the deferred lock was not shown as a warning:\n%s", shown.String())
	}
	if info := incident(t, env, out.Incident); info.Runbook != "etcd-nospace" {
		t.Errorf("journal list names runbook %q, want the one followed (etcd-nospace)", info.Runbook)
	}
}
