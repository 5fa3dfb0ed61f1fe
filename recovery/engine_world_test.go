package recovery_test

// Incident notes: what the etcd runbooks met when the world moved between
// their plan and their act, or when what they were told was not so. Each
// test is one such note, on the emulated cluster (real etcd members, real
// Talos API servers): what happened, and what breakglass must do then.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// etcdDying keeps the node's etcd dying (an etcd OOM-killed over and over:
// machined restarts it, its data whole, and it is killed again as soon as
// it starts) until the returned function is called.
func (e *engineEnv) etcdDying(n *talostest.Node) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			_ = n.KillEtcd()
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	e.t.Cleanup(stop)
	// Until its member is seen down: the kills have begun to land.
	ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
	defer cancel()
	if _, err := n.WaitEtcd(ctx, func(s talostest.EtcdServiceState) bool { return s.State != talostest.ServiceRunning || !s.Healthy }); err != nil {
		e.t.Fatal(err)
	}
	return stop
}

// bootIDs are every control plane's boot ID, by address.
func (e *engineEnv) bootIDs() map[string]string {
	out := map[string]string{}
	for _, n := range e.cluster.ControlPlanes() {
		out[n.IP] = n.BootID()
	}
	return out
}

// wantNotReset fails for each node whose boot changed since boots.
func (e *engineEnv) wantNotReset(boots map[string]string) {
	e.t.Helper()
	for _, n := range e.cluster.ControlPlanes() {
		if n.BootID() != boots[n.IP] {
			e.t.Errorf("node %s was reset (boot %s, was %s)", n.IP, n.BootID(), boots[n.IP])
		}
	}
}

// wantUntouched waits until every member is healthy, and fails for a
// member removed or a node reset since members and boots were read.
func (e *engineEnv) wantUntouched(members []string, boots map[string]string) {
	e.t.Helper()
	e.waitMembersHealthy()
	if got := e.memberIDs(); !slicesEqual(got, members) {
		e.t.Errorf("members %q, were %q: one was removed", got, members)
	}
	e.wantNotReset(boots)
}

// appliedSteps are the steps whose change the incident journaled as applied.
func appliedSteps(t *testing.T, env *engineEnv, id string) []string {
	t.Helper()
	var out []string
	for _, e := range applies(t, env, id) {
		out = append(out, e.Step)
	}
	return out
}

// waitMembersHealthy waits until every member is healthy again.
func (e *engineEnv) waitMembersHealthy() {
	e.t.Helper()
	if !e.membersHealthy() {
		e.t.Fatal("the members are not all healthy")
	}
}

// 03:12, a control plane's etcd is OOM-killed as fast as machined restarts
// it; its data is whole. recover --yes runs. On main the diagnosis read it
// down once, called it lost, removed it and wiped its node. A member is
// lost only on evidence that it will not come back by itself: here none,
// so the diagnosis watches it, and when machined's restart sticks (the
// memory pressure gone) it is back, and nothing is removed or reset.
func TestEngineMemberDownWithItsDataIsNotLost(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	cp3 := env.cluster.ControlPlanes()[2]
	members, boots := env.memberIDs(), env.bootIDs()
	stop := env.etcdDying(cp3)
	var watched bool
	out, _ := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		progress: func(_, msg string) {
			if strings.Contains(msg, "watching whether it comes back") {
				watched = true
				stop()
			}
		},
		begin: func(step string) {
			if step == "remove-member" {
				stop() // main: too late
			}
		},
	}})
	stop()
	if !watched {
		t.Errorf("the diagnosis did not watch the member down: %+v", out.step("diagnose"))
	}
	if out.step("remove-member").Outcome != "" || out.step("reset-node").Outcome != "" {
		t.Errorf("a member whose data is whole was acted on: %+v", out.Steps)
	}
	env.wantUntouched(members, boots)
}

// The member is down long enough to count as lost (its etcd killed at
// every start for the whole window), the removal is planned and asked; the
// operator reads it, meanwhile the memory pressure goes and machined's
// restart sticks: the member is healthy when the "yes" comes. On main the
// removal was not read again after the "yes": a healthy member was removed
// and its node wiped. The engine reads the fact again after the
// confirmation: nothing is removed, and it says why.
func TestEngineMemberBackBeforeRemovalConfirmed(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	defer recovery.SetLostAfter(2 * time.Second)()
	cp3 := env.cluster.ControlPlanes()[2]
	members, boots := env.memberIDs(), env.bootIDs()
	stop := env.etcdDying(cp3)
	out, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		confirm: func(q string) error {
			if strings.Contains(q, "remove etcd member") {
				stop()
				env.waitMembersHealthy()
			}
			return nil
		},
	}})
	stop()
	wantOutcome(t, out, err, "failed", true)
	if !errorIs(err, "conflict") || !strings.Contains(err.Error(), "healthy") || !strings.Contains(err.Error(), "nothing was done") {
		t.Errorf("the removal confirmed after the member came back: %v; want a conflict saying it is healthy and nothing was done", err)
	}
	if got := appliedSteps(t, env, out.Incident); len(got) > 0 {
		t.Errorf("changes journaled as applied: %q", got)
	}
	env.wantUntouched(members, boots)
}

// Two operators on one lost quorum, each on a laptop of their own (no
// cluster lock without quorum). A reads the reset's plan and types the
// first address slowly; meanwhile B resets every control plane and stops
// before its bootstrap. A confirms. On main A's stale "yes" reset all three
// again (no member was healthy to object) and both runs went on. Each node
// is not where A's plan saw it (another boot): A resets nothing, says what
// it sees, and the way out it gives is true.
func TestEngineQuorumLostTwoOperators(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	otherState := t.TempDir()
	var afterOther map[string]string
	out, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		confirmText: func(_, _ string) error {
			if afterOther == nil {
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				b, err := recoverRun(t, env, recoverRequest{Ctx: ctx, StateDir: otherState, Hooks: engineHooks{begin: func(step string) {
					if step == "bootstrap" {
						cancel(errors.New("B stops to look (Ctrl-C)"))
					}
				}}})
				wantOutcome(t, b, err, "aborted", true)
				afterOther = env.bootIDs()
			}
			return nil
		},
	}})
	wantOutcome(t, out, err, "failed", true)
	if !errorIs(err, "conflict") || !strings.Contains(err.Error(), "nothing was done") || !strings.Contains(err.Error(), "boot") {
		t.Errorf("A's stale reset: %v; want a conflict saying the nodes are in another boot and nothing was done", err)
	}
	if got := appliedSteps(t, env, out.Incident); len(got) > 0 {
		t.Errorf("A journaled %q as applied", got)
	}
	env.wantNotReset(afterOther)
	if !strings.Contains(strings.Join(out.Next, "\n"), "breakglass journal close "+out.Incident) {
		t.Errorf("A's way out %q does not offer to close its incident", out.Next)
	}

	// B finishes its recovery; A's resume is refused with the same true
	// way out, and A closes its incident.
	list, err := recovery.State{Dir: otherState}.Incidents()
	if err != nil || len(list) != 1 {
		t.Fatalf("B's incidents: %v, %v", list, err)
	}
	ui := newTestUI(t, engineHooks{})
	b, err := recovery.Resume(t.Context(), env.tc, recovery.State{Dir: otherState}, env.effects(false), ui, recovery.IncidentOptions{ID: list[0].ID})
	wantOutcome(t, outcomeOf(b, ui), err, "completed", false)
	again, err := resumeRun(t, env, out.Incident, engineHooks{})
	if err == nil || !strings.Contains(strings.Join(append(failure.Hints(err), again.Next...), "\n"), "breakglass journal close "+out.Incident) {
		t.Errorf("A's resume after B's recovery: %v, next %q; want it refused, offering to close the incident", err, again.Next)
	}
	env.waitMembersHealthy()
	closing, err := env.state().PlanClose(out.Incident, "superseded by B's recovery")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.state().Close(closing); err != nil {
		t.Fatal(err)
	}
	if info := incident(t, env, out.Incident); info.State != "closed" {
		t.Errorf("A's incident is %s after closing it", info.State)
	}
	if _, err := resumeRun(t, env, out.Incident, engineHooks{}); !errorIs(err, "invalid-input") {
		t.Errorf("resume of the closed incident: %v", err)
	}
}

// incidentCopy is the copy of etcd's data the incident journaled.
func incidentCopy(t *testing.T, env *engineEnv, id string) (path, kind string) {
	t.Helper()
	_, entries, err := env.state().ReadIncident(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var c struct{ Path, Kind string }
		if e.Kind == "end" && e.Action == string(runbooks.ActionEtcdCopy) && json.Unmarshal(e.Data, &c) == nil && c.Path != "" {
			return c.Path, c.Kind
		}
	}
	t.Fatalf("incident %s journaled no copy", id)
	return "", ""
}

// stoppedAfterCopy runs recover on a lost quorum and stops it (Ctrl-C) as
// the reset begins: the copy is taken, nothing is reset.
func stoppedAfterCopy(t *testing.T, env *engineEnv) string {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	out, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{begin: func(step string) {
		if step == "reset-nodes" {
			cancel(errors.New("interrupted by the test (Ctrl-C)"))
		}
	}}})
	wantOutcome(t, out, err, "aborted", true)
	wantStep(t, out, "copy", "ok")
	return out.Incident
}

// A lost quorum's run stopped after its copy; the copy is cut short on
// disk (a full disk, a sync tool). On main the resume reset all three
// control planes and only then failed the bootstrap on the copy: no valid
// copy anywhere, every node waiting. The copy's size and sha256 journaled
// when it was taken are read again before any reset: nothing is reset.
func TestEngineQuorumLostCopyCutShortBeforeResume(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	id := stoppedAfterCopy(t, env)
	path, _ := incidentCopy(t, env, id)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, info.Size()/2); err != nil {
		t.Fatal(err)
	}
	boots := env.bootIDs()
	out, err := resumeRun(t, env, id, engineHooks{})
	wantOutcome(t, out, err, "failed", true)
	if exitKind(err) != "verification" || !strings.Contains(err.Error(), "changed since it was taken") {
		t.Errorf("resume with the copy cut short: %v (exit %s); want the copy's change named, exit 10", err, exitKind(err))
	}
	if got := appliedSteps(t, env, id); len(got) > 0 {
		t.Errorf("journaled as applied: %q", got)
	}
	env.wantNotReset(boots)
}

// foreignCopy is a valid copy of another cluster's etcd (another
// kube-system namespace), in the kind of file the incident took.
func foreignCopy(t *testing.T, kind string) []byte {
	t.Helper()
	srv := etcdtest.StartTLS(t)
	kv := srv.TestClient(t)
	if _, err := kv.Put(t.Context(), "/registry/namespaces/kube-system", string(etcdtest.Namespace("kube-system", "0000-another-cluster"))); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "/registry/configmaps/default/theirs", "not ours"); err != nil {
		t.Fatal(err)
	}
	rc, err := kv.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, rc); err != nil {
		t.Fatal(err)
	}
	snap := []byte(b.String())
	if kind == "db" {
		return snap[:len(snap)-32] // a member's file: the snapshot without its sha256 trailer
	}
	return snap
}

// The copy is replaced by a whole, valid snapshot of another cluster (a
// file of the same name from another incident). On main the resume
// bootstrapped the other cluster's data and said "completed", exit 0. The
// copy is checked again (its sha256, and its owner against the incident's
// cluster) before any reset: nothing is reset.
func TestEngineQuorumLostCopyReplacedByAnotherClusters(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	id := stoppedAfterCopy(t, env)
	path, kind := incidentCopy(t, env, id)
	if err := os.WriteFile(path, foreignCopy(t, kind), 0o600); err != nil {
		t.Fatal(err)
	}
	boots := env.bootIDs()
	out, err := resumeRun(t, env, id, engineHooks{})
	wantOutcome(t, out, err, "failed", true)
	if code := failure.Code(err); code == 0 || !strings.Contains(err.Error(), "changed since it was taken") {
		t.Errorf("resume with another cluster's copy: %v (exit %d)", err, code)
	}
	if !strings.Contains(err.Error(), "another cluster's data") {
		t.Errorf("the refusal %q does not say whose data the copy holds now", err)
	}
	env.wantNotReset(boots)
}

// A control plane replaced without `talosctl etcd leave`: its old node is
// gone for good (powered off, its disk wiped), its member still listed.
// On main breakglass could not remove it: naming every node failed on the
// dead one, naming the others was refused for leaving it out, and neither
// said how to go on. Both now name --nodes-gone.
func TestEngineMemberLostNodeGoneForGoodHints(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	cps := env.cluster.ControlPlanes()
	env.loseMembers(1)
	cps[2].Stop()
	all, err := recoverRun(t, env, recoverRequest{})
	if err == nil || !strings.Contains(strings.Join(failure.Hints(err), "\n")+strings.Join(all.Next, "\n"), "--nodes-gone "+cps[2].IP) {
		t.Errorf("every node named, one gone: %v, hints %q, next %q; want --nodes-gone %s offered", err, failure.Hints(err), all.Next, cps[2].IP)
	}
	others, err := recoverRun(t, env, recoverRequest{Nodes: []string{cps[0].IP, cps[1].IP}})
	wantOutcome(t, others, err, "stopped", true)
	if !strings.Contains(strings.Join(others.Next, "\n"), "--nodes-gone "+cps[2].IP) {
		t.Errorf("the others named: %v, next %q; want --nodes-gone %s offered", err, others.Next, cps[2].IP)
	}
}

// The same replaced control plane, its member removed as offered: the
// others named, the dead one said gone (and found not answering). Its
// member is removed through a healthy one and nothing is reset; etcd is
// two healthy members. Said gone while it answers, it is refused.
func TestEngineMemberLostNodeGoneForGood(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	cps := env.cluster.ControlPlanes()
	env.loseMembers(1)
	wrong, err := recoverRun(t, env, recoverRequest{Nodes: []string{cps[0].IP, cps[2].IP}, NodesGone: []string{cps[1].IP}})
	if !errorIs(err, "invalid-input") || !strings.Contains(errText(err), "answers") {
		t.Errorf("--nodes-gone naming a node that answers: %v (outcome %s); want it refused", err, wrong.Outcome)
	}
	cps[2].Stop()
	boots := map[string]string{cps[0].IP: cps[0].BootID(), cps[1].IP: cps[1].BootID()}
	out, err := recoverRun(t, env, recoverRequest{Nodes: []string{cps[0].IP, cps[1].IP}, NodesGone: []string{cps[2].IP}})
	wantOutcome(t, out, err, "completed", false)
	wantStep(t, out, "remove-member", "ok")
	wantStep(t, out, "reset-node", "skipped")
	if got := env.memberIDs(); len(got) != 2 {
		t.Errorf("members %q: want the two healthy ones", got)
	}
	for _, n := range cps[:2] {
		if n.BootID() != boots[n.IP] {
			t.Errorf("node %s was reset", n.IP)
		}
	}
}

// -n cp-1,cp-2,cp-3: the nodes named as the talosconfig names them, not by
// address. On main no node was matched to its member: the lost member was
// counted twice (its node, and a listed member no node answered for), and
// the run was refused naming one machine twice. Names and addresses are
// matched to members both ways. (The run stops once etcd is whole: the
// emulated names do not resolve, and /readyz is asked at the node's name.)
func TestEngineMemberLostNodesByName(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(1)
	var names []string
	for _, n := range env.cluster.ControlPlanes() {
		names = append(names, n.Name)
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	out, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Nodes: names, Hooks: engineHooks{begin: func(step string) {
		if step == "wait-apiserver" {
			cancel(errors.New("stopped by the test: etcd is whole"))
		}
	}}})
	wantOutcome(t, out, err, "aborted", true)
	wantStep(t, out, "wait-etcd", "ok")
	if d := out.step("diagnose").Message; !strings.Contains(d, "remove 1 lost member(s)") {
		t.Errorf("diagnose: %q; want one lost member", d)
	}
	env.waitMembersHealthy()
}

// A resume told that the answering survivor, the copy's source, is gone
// (--nodes-gone, a typo of the node next to it). On main it was taken on
// the operator's word: the other two were reset and a new etcd bootstrapped
// on them. A node said gone that answers is refused, nothing reset.
func TestEngineQuorumLostNodesGoneThatAnswers(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	id := stoppedAfterCopy(t, env)
	boots := env.bootIDs()
	out, err := resumeWith(t, env, resumeRequest{ID: id, NodesGone: []string{env.cluster.ControlPlanes()[0].IP}})
	if !errorIs(err, "invalid-input") || !strings.Contains(errText(err), "answers") {
		t.Errorf("resume --nodes-gone naming a node that answers: %v (outcome %s); want it refused", err, out.Outcome)
	}
	env.wantNotReset(boots)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A full etcd, and at /breakglass/lock a value breakglass cannot read
// (another tool's, another version's). On a healthy etcd the run stops
// there; on a full one, where the lock cannot be taken (a write), main read
// it, could not parse it, and went on: compaction, defragmentation and
// disarm ran past it. It stops there too, before any change.
func TestEngineFullEtcdUnreadableLockStops(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, etcdQuota: spaceQuota})
	if _, err := env.kv.Put(t.Context(), "/breakglass/lock", "{not json"); err != nil {
		t.Fatal(err)
	}
	before := env.etcdState().Revision
	env.fill()
	env.waitReadyOrNot(false)
	out, err := recoverRun(t, env, recoverRequest{})
	if exitKind(err) != "conflict" || !strings.Contains(errText(err), "cannot read") {
		t.Errorf("recover on a full etcd with an unreadable lock: %v (exit %s, outcome %s); want exit 6 naming the lock", err, exitKind(err), out.Outcome)
	}
	if got := appliedSteps(t, env, out.Incident); len(got) > 0 {
		t.Errorf("changes applied past the unreadable lock: %q", got)
	}
	if _, err := env.kv.Get(t.Context(), "/", clientv3.WithRev(before)); err != nil {
		t.Errorf("etcd's history before the fill is gone (compacted?): %v", err)
	}
	if !env.noSpace(t.Context()) {
		t.Error("the NOSPACE alarm was disarmed")
	}
}

// SIGTERM as the lost quorum's reset is about to act (here: as its last
// typed confirmation is answered), before any node was asked. On main the
// journal recorded the reset as applied and the run said "the EPHEMERAL
// partitions of all three nodes are gone, which cannot be undone": nothing
// had been wiped. Nothing is journaled as applied, nothing is said lost.
func TestEngineQuorumResetInterruptedBeforeAnyNodeAsked(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	boots := env.bootIDs()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	typed := 0
	out, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{confirmText: func(_, _ string) error {
		if typed++; typed == 3 {
			cancel(errors.New("terminated (SIGTERM)"))
		}
		return nil
	}}})
	wantOutcome(t, out, err, "aborted", true)
	said := err.Error() + "\n" + strings.Join(out.Next, "\n") + "\n" + out.step("reset-nodes").Message
	for _, claim := range []string{"cannot be undone", "is gone", "stays"} {
		if strings.Contains(said, claim) {
			t.Errorf("said %q though nothing was reset:\n%s", claim, said)
		}
	}
	if !strings.Contains(said, "nothing was changed") {
		t.Errorf("does not say nothing was changed:\n%s", said)
	}
	if got := appliedSteps(t, env, out.Incident); len(got) > 0 {
		t.Errorf("journaled as applied: %q", got)
	}
	env.wantNotReset(boots)
}
