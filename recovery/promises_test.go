package recovery_test

// The promises every incident type keeps, each held once over every
// registered type (recovery.IncidentTypes): a new type gets them by adding
// its row to incidentCases, and fails TestPromisesCoverEveryType until it
// does.

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// incidentCase is one incident type as the engine tests bring it about.
type incidentCase struct {
	// make is a cluster of two control planes in the incident.
	make func(t *testing.T) *engineEnv
	// during is a progress line said while the type's first change runs on
	// one node and not yet on all: where an interruption lands mid-change.
	during string
	// colleague, for a type whose change edits the machine configs, is a
	// colleague's later edit of the same key (with talosctl patch), and the
	// text it leaves that a revert must keep.
	colleague func(cfg []byte) []byte
	kept      string
	// over tells whether the incident is over (resume converged).
	over func(env *engineEnv) bool
	// advice is a phrase of the advice that ends every run of the type.
	advice string
	// lockedBefore, for a type whose etcd takes no write (a lost quorum),
	// is the incident brought about after another run took the cluster
	// lock: no run can take it once the incident is there.
	lockedBefore func(t *testing.T) *engineEnv
}

// resumesToTheEnd resumes the incident: it completes, and the incident is
// over.
func (c incidentCase) resumesToTheEnd(t *testing.T, env *engineEnv, id string) {
	t.Helper()
	out, err := resumeRun(t, env, id, engineHooks{})
	wantOutcome(t, out, err, "completed", false)
	if !c.over(env) {
		t.Error("the resumed incident did not end it")
	}
}

var incidentCases = map[string]incidentCase{
	"admission-deadlock": {
		make:   func(t *testing.T) *engineEnv { return newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true}) },
		during: "static pod re-rendered",
		colleague: func(cfg []byte) []byte {
			return bytes.Replace(cfg, []byte("disable-admission-plugins: ValidatingAdmissionWebhook"), []byte("disable-admission-plugins: ValidatingAdmissionWebhook,DefaultIngressClass"), 1)
		},
		kept:   "DefaultIngressClass",
		advice: "audit --from-etcd --fix",
		over:   func(env *engineEnv) bool { hs, _ := recovery.CheckHealth(env.t.Context(), env.tc); return allReady(hs) },
	},
	"apiserver-flags": {
		make:   newFlagsEnv,
		during: "static pod re-rendered",
		colleague: func(cfg []byte) []byte {
			cfg = bytes.Replace(cfg, []byte("feature-gates: MutatingAdmissionPolicy=true"), []byte("feature-gates: MutatingAdmissionPolicy=true,APIResponseCompression=true"), 1)
			return bytes.Replace(cfg, []byte("                - MutatingAdmissionPolicy=true\n"), []byte("                - MutatingAdmissionPolicy=true\n                - APIResponseCompression=true\n"), 1)
		},
		kept:   "APIResponseCompression=true",
		advice: "this edit is meant to stay",
		over:   func(env *engineEnv) bool { hs, _ := recovery.CheckHealth(env.t.Context(), env.tc); return allReady(hs) },
	},
	"etcd-nospace": {
		make: func(t *testing.T) *engineEnv {
			env := newEngineEnv(t, envOptions{controlPlanes: 2, etcdQuota: spaceQuota})
			env.fill()
			env.waitReadyOrNot(false)
			return env
		},
		during: "defragmented:",
		advice: "quota-backend-bytes",
		over:   func(env *engineEnv) bool { return !env.noSpace(env.t.Context()) },
	},
	"etcd-member-lost": {
		make: func(t *testing.T) *engineEnv {
			env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
			env.loseMembers(1)
			return env
		},
		during: "reset: it reboots",
		advice: "talosctl etcd leave",
		over:   (*engineEnv).membersHealthy,
	},
	"etcd-quorum-lost": {
		make: func(t *testing.T) *engineEnv {
			env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
			env.loseMembers(2)
			return env
		},
		lockedBefore: func(t *testing.T) *engineEnv {
			env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
			holdLock(t, env, "someone@else", "20261204-000000-other")
			env.loseMembers(2)
			return env
		},
		during: "reset: it reboots",
		advice: "snapshots on a schedule",
		over:   (*engineEnv).membersHealthy,
	},
}

func allReady(hs []recovery.NodeHealth) bool {
	return len(hs) > 0 && !slices.ContainsFunc(hs, func(h recovery.NodeHealth) bool { return !h.Ready })
}

func TestPromisesCoverEveryType(t *testing.T) {
	for _, name := range recovery.IncidentTypes() {
		if _, ok := incidentCases[name]; !ok {
			t.Errorf("incident type %s has no row in incidentCases: the promises are not tested for it", name)
		}
	}
	if len(incidentCases) != len(recovery.IncidentTypes()) {
		t.Errorf("incidentCases names %d types, %d are registered", len(incidentCases), len(recovery.IncidentTypes()))
	}
}

// forEveryType runs f for every registered incident type.
func forEveryType(t *testing.T, f func(t *testing.T, c incidentCase)) {
	for _, name := range recovery.IncidentTypes() {
		t.Run(name, func(t *testing.T) { f(t, incidentCases[name]) })
	}
}

// stopAfterFirstChange runs the plain recover and interrupts it (Ctrl-C)
// as the step after its first confirmed change begins.
func stopAfterFirstChange(t *testing.T, env *engineEnv) runOutcome {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	var confirmed atomic.Bool
	res, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{
		confirm:     func(string) error { confirmed.Store(true); return nil },
		confirmText: func(string, string) error { confirmed.Store(true); return nil },
		begin: func(string) {
			if confirmed.Load() {
				cancel(errors.New("interrupted by the test (Ctrl-C)"))
			}
		},
	}})
	wantOutcome(t, res, err, "aborted", true)
	return res
}

// applies are the incident's apply records.
func applies(t *testing.T, env *engineEnv, id string) []recovery.Entry {
	t.Helper()
	_, entries, err := env.state().ReadIncident(id)
	if err != nil {
		t.Fatal(err)
	}
	var out []recovery.Entry
	for _, e := range entries {
		if e.Kind == "apply" {
			out = append(out, e)
		}
	}
	return out
}

func mentions(lines []string, s string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, s) })
}

// After a stop, the commands offered name revert only when revert can undo
// something, and say what nothing can undo; revert undoes exactly that
// and closes the incident, or, with nothing to undo, refuses and leaves the
// incident to resume, which converges. Every change journals its undo.
func TestPromiseRevertOnlyWhatCanBeUndone(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		env := c.make(t)
		res := stopAfterFirstChange(t, env)
		recs := applies(t, env, res.Incident)
		if len(recs) == 0 {
			t.Fatalf("no change was applied before the stop: %+v", res.Steps)
		}
		reversible := false
		for _, e := range recs {
			if e.Undo == nil {
				t.Errorf("step %s journaled its change without saying what can undo it", e.Step)
				continue
			}
			reversible = reversible || e.Undo.Reversible() && e.Undo.Asked == ""
		}
		if offered := mentions(res.Next, "breakglass revert "+res.Incident); offered != reversible {
			t.Errorf("revert offered: %v; the change can be undone: %v; next %q", offered, reversible, res.Next)
		}
		if !reversible && !mentions(res.Next, "cannot be undone") {
			t.Errorf("next %q does not say what cannot be undone", res.Next)
		}
		for name, other := range incidentCases {
			if got := mentions(res.Next, other.advice); got != (other.advice == c.advice) {
				t.Errorf("next %q: the advice of %s (%q) shown: %v", res.Next, name, other.advice, got)
			}
		}

		rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
		if reversible {
			wantOutcome(t, rev, err, "reverted", false)
			if mentions(rev.Next, c.advice) {
				t.Errorf("the revert ends with the recovery's advice: %q", rev.Next)
			}
			env.assertConfigsOriginal()
			if info := incident(t, env, res.Incident); info.State != "reverted" {
				t.Errorf("after the revert the incident is %s", info.State)
			}
			return
		}
		if !errorIs(err, "invalid-input") || !strings.Contains(err.Error(), "cannot be undone") {
			t.Fatalf("revert of what cannot be undone: %v (outcome %s)", err, rev.Outcome)
		}
		if info := incident(t, env, res.Incident); info.State == "reverted" || info.State == "completed" {
			t.Fatalf("the refused revert closed the incident: %s", info.State)
		}
		c.resumesToTheEnd(t, env, res.Incident)
	})
}

// Another run takes the cluster lock while this one waits at its first
// question: the change is refused before it happens, and nothing changes.
// On a full etcd the lock is deferred (taking it is a write): it is read
// before the change all the same.
func TestPromiseLockCheckedBeforeEveryChange(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		var env *engineEnv
		var hooks engineHooks
		if c.lockedBefore != nil {
			env = c.lockedBefore(t)
		} else {
			env = c.make(t)
			takeIt := func() { env.anotherRunTakesTheLock() }
			hooks = engineHooks{
				confirm:     func(string) error { takeIt(); return nil },
				confirmText: func(string, string) error { takeIt(); return nil },
			}
		}
		registry := env.liveKeysExceptLock()
		res, err := recoverRun(t, env, recoverRequest{Hooks: hooks})
		wantOutcome(t, res, err, "failed", true)
		if !errorIs(err, "conflict") {
			t.Fatalf("error %v, want the lock conflict", err)
		}
		if recs := applies(t, env, res.Incident); len(recs) > 0 {
			t.Errorf("a change was applied without the lock: %+v", recs)
		}
		env.assertConfigsOriginal()
		if got := env.liveKeysExceptLock(); !mapsEqual(got, registry) {
			t.Error("etcd changed without the lock")
		}
	})
}

// anotherRunTakesTheLock is another operator's run taking the cluster lock
// now: on a full etcd after making it room (compact, defragment, disarm);
// a lock this run held is lost to it.
func (e *engineEnv) anotherRunTakesTheLock() {
	ctx := e.t.Context()
	if e.noSpace(ctx) {
		st, err := e.kv.Status(ctx, e.etcd.Endpoints[0])
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.kv.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.kv.Defragment(ctx, e.etcd.Endpoints[0]); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.kv.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
			e.t.Fatal(err)
		}
	}
	if _, err := e.kv.Delete(ctx, "/breakglass/lock"); err != nil {
		e.t.Fatal(err)
	}
	holdLock(e.t, e, "someone@else", "20261204-000000-other")
}

// liveKeysExceptLock are etcd's keys and values, the cluster lock left out.
func (e *engineEnv) liveKeysExceptLock() map[string]string {
	out := e.liveKeys()
	delete(out, "/breakglass/lock")
	return out
}

// An interruption in the middle of a change that runs node by node says,
// per node, where it went through and where not, calls nothing failed that
// did not fail, and the incident resumes to its end.
func TestPromiseInterruptionSaysPerNode(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		env := c.make(t)
		ctx, cancel := context.WithCancelCause(t.Context())
		defer cancel(nil)
		var step atomic.Value
		step.Store("")
		res, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{
			begin: func(s string) { step.Store(s) },
			progress: func(_, msg string) {
				if strings.Contains(msg, c.during) {
					cancel(errors.New("interrupted by the test (Ctrl-C)"))
				}
			},
		}})
		wantOutcome(t, res, err, "aborted", true)
		s := res.step(step.Load().(string))
		if !strings.Contains(s.Message, "the change was applied on") || strings.Contains(s.Message, "failed") {
			t.Errorf("step %s interrupted mid-change says %q: want where it was applied, and nothing failed", s.Name, s.Message)
		}
		c.resumesToTheEnd(t, env, res.Incident)
	})
}

// A colleague edits the key the incident changed, on every node, after the
// incident's change: revert puts back only what the incident took, keeps
// the colleague's edit, and its plan shows today's value; the same revert
// again changes nothing and ends at once. A type that edits no config has
// nothing of the kind to keep: its changes are not undone by revert.
func TestPromiseRestoreKeepsLaterEdit(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		env := c.make(t)
		res := stopAfterFirstChange(t, env)
		if c.colleague == nil {
			for _, e := range applies(t, env, res.Incident) {
				if e.Undo != nil && e.Undo.Reversible() {
					t.Errorf("step %s's change can be undone, and the case names no colleague's edit to keep", e.Step)
				}
			}
			return
		}
		for _, n := range env.cluster.ControlPlanes() {
			theirs := c.colleague(n.RunningConfig())
			if bytes.Equal(theirs, n.RunningConfig()) {
				t.Fatalf("node %s: the colleague's edit changed nothing", n.IP)
			}
			if _, err := env.tc.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: theirs, Mode: talos.NoReboot}); err != nil {
				t.Fatal(err)
			}
		}
		var shown strings.Builder
		_, err := revertRun(t, env, res.Incident, false, true, engineHooks{show: func(s string) { shown.WriteString(s) }})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(shown.String(), c.kept) {
			t.Errorf("the revert's plan does not show today's value (%s):\n%s", c.kept, shown.String())
		}
		rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
		wantOutcome(t, rev, err, "reverted", false)
		for _, n := range env.cluster.ControlPlanes() {
			if !bytes.Contains(n.RunningConfig(), []byte(c.kept)) {
				t.Errorf("node %s: the colleague's %s is gone", n.IP, c.kept)
			}
		}
		// Nothing applied is nothing waited for: the second revert ends at once.
		before := len(applies(t, env, res.Incident))
		again, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
		wantOutcome(t, again, err, "reverted", false)
		if n := len(applies(t, env, res.Incident)); n != before {
			t.Errorf("the second revert applied %d change(s): %+v", n-before, again.Steps)
		}
	})
}
