package recovery_test

// The promises every incident type keeps, each held once over every
// registered type (recovery.IncidentTypes): a new type gets them by adding
// its row to incidentCases, and fails TestPromisesCoverEveryType until it
// does.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
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
	// lastChange is the step of the type's last confirmed change: the lock
	// row takes the lock at its confirmation, after every other change.
	lastChange string
	// edit, for a type that edits no machine config, is a colleague's edit
	// of etcd made once the run stopped after its change at stopAt (""
	// the first); it tells whether the edit is still there. What the
	// incident does next (resume) must keep it.
	edit   func(env *engineEnv) (kept func() bool)
	stopAt string
	// runbook is the type's runbook, and moves how the world moves between
	// the confirmation and the act of each of its destructive steps (one
	// that removes, resets, bootstraps, compacts or deletes).
	runbook string
	moves   map[string]worldMove
	// rewrite, for a type whose revert waits until nothing stored uses
	// what it added, is the operator's rewrite of the stored data
	// (kubectl replace), done before each revert.
	rewrite func(env *engineEnv)
}

// worldMove is what happens while the operator confirms a destructive
// step: what the run must then do none of.
type worldMove struct {
	req       recoverRequest              // the run as asked (default: the plain recover)
	move      func(env *engineEnv)        // the world moving, after the confirmation
	says      string                      // what the run's message names
	unchanged func(env *engineEnv) string // what the step would have changed, still as it was ("": it is)
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
		make:       func(t *testing.T) *engineEnv { return newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true}) },
		during:     "static pod re-rendered",
		lastChange: "restore",
		runbook:    "webhook-deadlock",
		moves: map[string]worldMove{"delete-webhook": {
			req:  recoverRequest{Delete: []string{testWebhook}},
			move: (*engineEnv).colleagueEditsWebhook,
			says: "was changed since the plan",
			unchanged: func(env *engineEnv) string {
				if _, ok := env.liveKeys()[webhookKey]; !ok {
					return "the webhook configuration was deleted"
				}
				return ""
			},
		}},
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
		kept:       "APIResponseCompression=true",
		advice:     "this edit is meant to stay",
		lastChange: "remove-flags",
		runbook:    "apiserver-flags",
		over:       func(env *engineEnv) bool { hs, _ := recovery.CheckHealth(env.t.Context(), env.tc); return allReady(hs) },
	},
	"encryption-drift": {
		make:   func(t *testing.T) *engineEnv { return newEncryptionEnv(t, 2) },
		during: "applied: the static pod is re-rendered",
		colleague: func(cfg []byte) []byte {
			out, _, err := encryption.AddReadKey(cfg, "secrets", encryption.AESCBC, encryption.Key{Name: "colleague", Secret: encryption.RecordingKey("colleague")})
			if err != nil {
				panic(err)
			}
			return out
		},
		kept:       "colleague",
		advice:     "the next apply drops the key again",
		lastChange: "add-key",
		runbook:    "encryption-drift",
		rewrite:    (*engineEnv).rewriteSecretsUnderKey1,
		over:       func(env *engineEnv) bool { hs, _ := recovery.CheckHealth(env.t.Context(), env.tc); return allReady(hs) },
	},
	"etcd-nospace": {
		make: func(t *testing.T) *engineEnv {
			env := newEngineEnv(t, envOptions{controlPlanes: 2, etcdQuota: spaceQuota})
			env.fill()
			env.waitReadyOrNot(false)
			return env
		},
		during:     "defragmented:",
		advice:     "quota-backend-bytes",
		over:       func(env *engineEnv) bool { return !env.noSpace(env.t.Context()) },
		lastChange: "disarm",
		edit:       (*engineEnv).colleagueDeletesAKey,
		runbook:    "etcd-nospace",
		moves: map[string]worldMove{"compact": {
			move:      (*engineEnv).snapshotCutShort,
			says:      "changed since it was taken",
			unchanged: (*engineEnv).notCompacted,
		}},
	},
	"etcd-member-lost": {
		make: func(t *testing.T) *engineEnv {
			env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
			env.loseMembers(1)
			return env
		},
		during:     "reset: it reboots",
		advice:     "talosctl etcd leave",
		over:       (*engineEnv).membersHealthy,
		lastChange: "reset-node",
		edit:       (*engineEnv).colleagueDeletesAKey,
		runbook:    "etcd-member-lost",
		moves: map[string]worldMove{
			"remove-member": {move: (*engineEnv).colleagueRemovesTheLostMember, says: "no longer listed", unchanged: (*engineEnv).oneMemberRemoved},
			"reset-node":    {move: (*engineEnv).colleagueResetsTheLastNode, says: "boot", unchanged: (*engineEnv).othersNotReset},
		},
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
		during:  "reset: it reboots",
		advice:  "snapshots on a schedule",
		over:    (*engineEnv).membersHealthy,
		edit:    (*engineEnv).colleagueDeletesAKey,
		stopAt:  "bootstrap", // the change that writes the copy back
		runbook: "etcd-quorum-lost",
		moves: map[string]worldMove{
			"reset-nodes": {move: (*engineEnv).colleagueResetsTheLastNode, says: "boot", unchanged: (*engineEnv).othersNotReset},
			"bootstrap":   {move: (*engineEnv).colleagueResetsTheLastNode, says: "boot", unchanged: (*engineEnv).notBootstrapped},
		},
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
	return stopAfterChange(t, env, "")
}

// stopAfterChange runs the plain recover and interrupts it (Ctrl-C) as the
// step after the confirmed change of step begins ("": the first).
func stopAfterChange(t *testing.T, env *engineEnv, step string) runOutcome {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	var confirmed atomic.Bool
	var current atomic.Value
	current.Store("")
	confirm := func() {
		if step == "" || current.Load() == step {
			confirmed.Store(true)
		}
	}
	res, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{
		confirm:     func(string) error { confirm(); return nil },
		confirmText: func(string, string) error { confirm(); return nil },
		begin: func(s string) {
			if confirmed.Load() {
				cancel(errors.New("interrupted by the test (Ctrl-C)"))
			}
			current.Store(s)
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

		if c.rewrite != nil {
			c.rewrite(env)
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

// Another run takes the cluster lock while this one waits at the question
// of its last change, after every other change went through: that change
// is refused before it happens. On a full etcd the lock is deferred (taking
// it is a write): it is read before each change all the same. Without
// quorum no lock can be taken at all: a lock taken before the loss keeps
// the run out before its first change.
func TestPromiseLockCheckedBeforeEveryChange(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		if c.lockedBefore != nil {
			env := c.lockedBefore(t)
			res, err := recoverRun(t, env, recoverRequest{})
			wantOutcome(t, res, err, "failed", true)
			if !errorIs(err, "conflict") {
				t.Fatalf("error %v, want the lock conflict", err)
			}
			if recs := applies(t, env, res.Incident); len(recs) > 0 {
				t.Errorf("a change was applied without the lock: %+v", recs)
			}
			return
		}
		env := c.make(t)
		var current atomic.Value
		current.Store("")
		took := false
		takeIt := func() {
			if current.Load() == c.lastChange && !took {
				took = true
				env.anotherRunTakesTheLock()
			}
		}
		res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
			begin:       func(s string) { current.Store(s) },
			confirm:     func(string) error { takeIt(); return nil },
			confirmText: func(string, string) error { takeIt(); return nil },
		}})
		if !took {
			t.Fatalf("the run never asked for step %s: %+v", c.lastChange, res.Steps)
		}
		wantOutcome(t, res, err, "failed", true)
		if !errorIs(err, "conflict") {
			t.Fatalf("error %v, want the lock conflict", err)
		}
		if got := appliedSteps(t, env, res.Incident); slices.Contains(got, c.lastChange) {
			t.Errorf("step %s was applied without the lock (applied: %q)", c.lastChange, got)
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
		// (compacted already, when this run's compaction went first)
		if _, err := e.kv.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil && !strings.Contains(err.Error(), "compacted") {
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
		// The journal, which resume and the postmortem read, says the same.
		_, entries, err := env.state().ReadIncident(res.Incident)
		if err != nil {
			t.Fatal(err)
		}
		var end *recovery.Entry
		for i := range entries {
			if entries[i].Kind == "end" && entries[i].Step == s.Name {
				end = &entries[i]
			}
		}
		switch {
		case end == nil:
			t.Errorf("the journal has no end record of step %s", s.Name)
		case end.Outcome != "aborted" || !strings.Contains(end.Error+end.Message, "the change was applied on") || strings.Contains(end.Error+end.Message, "failed"):
			t.Errorf("the journal ends step %s %s (%q): want aborted, where it was applied, nothing failed", s.Name, end.Outcome, end.Error+end.Message)
		}
		if !slices.Contains(appliedSteps(t, env, res.Incident), s.Name) {
			t.Errorf("the journal has no apply record of step %s, applied on some nodes", s.Name)
		}
		if info := incident(t, env, res.Incident); info.State != "aborted" {
			t.Errorf("the incident is %s after the interruption, want aborted", info.State)
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
		res := stopAfterChange(t, env, c.stopAt)
		if c.colleague == nil {
			for _, e := range applies(t, env, res.Incident) {
				if e.Undo != nil && e.Undo.Reversible() {
					t.Errorf("step %s's change can be undone, and the case names no colleague's edit to keep", e.Step)
				}
			}
			// What the incident does next, resume, keeps the colleague's
			// edit of etcd: nothing is written back whole.
			kept := c.edit(env)
			c.resumesToTheEnd(t, env, res.Incident)
			if !kept() {
				t.Error("the colleague's edit of etcd, made after the incident's change, is gone after the resume")
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
		if c.rewrite != nil {
			c.rewrite(env)
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

// destructiveActions are the actions whose change removes, resets,
// bootstraps, compacts or deletes: each reads its facts again before it
// acts (the world-moves row).
var destructiveActions = []runbooks.Action{runbooks.ActionEtcdMemberRemove, runbooks.ActionEtcdReset, runbooks.ActionEtcdBootstrap, runbooks.ActionEtcdCompact, runbooks.ActionEtcdDelete}

// destructiveSteps are the type's runbook's destructive steps.
func destructiveSteps(t *testing.T, runbook string) []string {
	t.Helper()
	rb, err := runbooks.Resolve(runbook)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range recovery.StepsOf(rb) {
		if slices.Contains(destructiveActions, s.Params.Action()) {
			out = append(out, s.Name)
		}
	}
	return out
}

// The world moves between the plan and the act: for each destructive step
// of each type, what it acts on changes while the operator confirms it
// (another operator's hand, a node's reboot, a disk). Nothing of the step
// is done, the journal says it was not applied, and the message names
// what moved.
func TestPromiseWorldMovesBetweenPlanAndAct(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		steps := destructiveSteps(t, c.runbook)
		for _, name := range steps {
			if _, ok := c.moves[name]; !ok {
				t.Errorf("destructive step %s of runbook %s has no move: the promise is not tested for it", name, c.runbook)
			}
		}
		for name := range c.moves {
			if !slices.Contains(steps, name) {
				t.Errorf("move for %s, which is no destructive step of runbook %s", name, c.runbook)
			}
		}
		for _, name := range steps {
			m, ok := c.moves[name]
			if !ok {
				continue
			}
			t.Run(name, func(t *testing.T) {
				env := c.make(t)
				var current atomic.Value
				current.Store("")
				moved := false
				move := func() {
					if current.Load() == name && !moved {
						moved = true
						m.move(env)
					}
				}
				req := m.req
				req.Hooks = engineHooks{
					begin:       func(s string) { current.Store(s) },
					confirm:     func(string) error { move(); return nil },
					confirmText: func(string, string) error { move(); return nil },
				}
				out, err := recoverRun(t, env, req)
				if !moved {
					t.Fatalf("step %s never asked: %+v", name, out.Steps)
				}
				if err == nil || out.Outcome == "completed" {
					t.Fatalf("the world moved under step %s and the run %s (error %v)", name, out.Outcome, err)
				}
				if msg := err.Error(); !strings.Contains(msg, "nothing was done") || !strings.Contains(msg, m.says) {
					t.Errorf("the run says %q; want nothing done, naming what moved (%q)", msg, m.says)
				}
				if slices.Contains(appliedSteps(t, env, out.Incident), name) {
					t.Errorf("step %s is journaled as applied", name)
				}
				if why := m.unchanged(env); why != "" {
					t.Errorf("step %s acted after the world moved: %s", name, why)
				}
			})
		}
	})
}

// The scope a type declares: one that acts on every etcd member refuses,
// before any change, a run naming fewer control planes; one for which the
// nodes named are enough changes only those.
func TestPromiseScopeCoveredOrRefused(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		env := c.make(t)
		cps := env.cluster.ControlPlanes()
		first, others := cps[0].IP, cps[1:]
		var untouched []string
		res, err := recoverRun(t, env, recoverRequest{Nodes: []string{first}, Hooks: engineHooks{begin: func(string) {
			for _, n := range others {
				if !bytes.Equal(n.RunningConfig(), env.original[n.IP]) && !slices.Contains(untouched, n.IP) {
					untouched = append(untouched, n.IP)
				}
			}
		}}})
		// Where each control plane runs its own member: with one etcd for
		// all (the emulator's shared member), any node covers it.
		if recovery.TypeCoversEveryMember(res.decisionType(t, env)) && env.perNodeMembers {
			wantOutcome(t, res, err, "stopped", true)
			if !errorIs(err, "invalid-input") || !strings.Contains(err.Error(), "leaves out") || !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("a run naming one control plane of %d: %v; want it refused, naming those left out", len(cps), err)
			}
			if recs := appliedSteps(t, env, res.Incident); len(recs) > 0 {
				t.Errorf("changes applied: %q", recs)
			}
		}
		if len(untouched) > 0 {
			t.Errorf("nodes not named were changed: %q", untouched)
		}
		env.assertConfigsOriginal(first)
	})
}

// decisionType is the incident type the run's diagnosis decided.
func (o runOutcome) decisionType(t *testing.T, env *engineEnv) string {
	t.Helper()
	_, entries, err := env.state().ReadIncident(o.Incident)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var d struct {
			Decision *struct {
				Type string `json:"type"`
			} `json:"decision"`
		}
		if e.Kind == "end" && e.Step == "diagnose" && json.Unmarshal(e.Data, &d) == nil && d.Decision != nil {
			return d.Decision.Type
		}
	}
	t.Fatalf("incident %s journaled no decision", o.Incident)
	return ""
}

// What breakglass writes is how the operator learns what it did: once
// standard output or error fails (a closed pipe, a full disk), no change is
// applied, and the run ends with exit 11.
func TestPromiseNoChangeOnceOutputFails(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		env := c.make(t)
		boots := env.bootIDs()
		var failing atomic.Bool
		res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
			confirm:     func(string) error { failing.Store(true); return nil },
			confirmText: func(string, string) error { failing.Store(true); return nil },
			outputErr: func() error {
				if failing.Load() {
					return failure.New(failure.Output, "write /dev/stdout: broken pipe")
				}
				return nil
			},
		}})
		if !failing.Load() {
			t.Fatalf("the run asked nothing: %+v", res.Steps)
		}
		if code := failure.Code(err); code != int(failure.Output) {
			t.Errorf("exit %d (%v), want 11", code, err)
		}
		if recs := appliedSteps(t, env, res.Incident); len(recs) > 0 {
			t.Errorf("changes applied once the output failed: %q", recs)
		}
		env.assertConfigsOriginal()
		env.wantNotReset(boots)
	})
}

// The world's moves, each as a colleague (or the nodes) would make it.

// colleagueEditsWebhook is a colleague's edit of the webhook configuration
// (kubectl apply, or a controller): a new revision of the same object.
func (e *engineEnv) colleagueEditsWebhook() {
	v := e.liveKeys()[webhookKey]
	if _, err := e.kv.Put(e.t.Context(), webhookKey, v); err != nil {
		e.t.Fatal(err)
	}
}

// newestIncidentDir is the directory of the newest incident.
func (e *engineEnv) newestIncidentDir() string {
	list, err := e.state().Incidents()
	if err != nil || len(list) == 0 {
		e.t.Fatalf("incidents: %v, %v", list, err)
	}
	return filepath.Dir(list[len(list)-1].Path)
}

// snapshotCutShort cuts the run's verified snapshot short (a full disk, a
// sync tool): what stands instead of the compaction is gone.
func (e *engineEnv) snapshotCutShort() {
	path := filepath.Join(e.newestIncidentDir(), "etcd.snapshot")
	info, err := os.Stat(path)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.Truncate(path, info.Size()/2); err != nil {
		e.t.Fatal(err)
	}
}

// notCompacted says whether etcd's oldest history is still there.
func (e *engineEnv) notCompacted() string {
	if _, err := e.kv.Get(e.t.Context(), "/", clientv3.WithRev(2)); err != nil {
		return "etcd's history was compacted: " + err.Error()
	}
	return ""
}

// lostMemberID is the member the cluster lists for the last control plane.
func (e *engineEnv) lostMemberID() uint64 {
	last := e.cluster.ControlPlanes()[len(e.cluster.ControlPlanes())-1]
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	resp, err := e.kv.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range resp.Members {
		if m.Name == last.Name {
			return m.ID
		}
	}
	e.t.Fatalf("no member of %s is listed", last.Name)
	return 0
}

// colleagueRemovesTheLostMember is a colleague removing the lost member by
// hand (talosctl etcd remove-member).
func (e *engineEnv) colleagueRemovesTheLostMember() {
	e.seenMembers = e.memberIDs()
	if err := e.tc.EtcdRemoveMember(e.t.Context(), e.cluster.ControlPlanes()[0].IP, e.lostMemberID()); err != nil {
		e.t.Fatal(err)
	}
}

// oneMemberRemoved says whether only the colleague's removal happened.
func (e *engineEnv) oneMemberRemoved() string {
	if got := e.memberIDs(); len(got) != len(e.seenMembers)-1 {
		return fmt.Sprintf("members %q, were %q before the colleague removed one", got, e.seenMembers)
	}
	return ""
}

// colleagueResetsTheLastNode is a colleague resetting the last control
// plane by hand (talosctl reset), waited until it is back in a new boot.
func (e *engineEnv) colleagueResetsTheLastNode() {
	e.seenBoots = e.bootIDs()
	last := e.cluster.ControlPlanes()[len(e.cluster.ControlPlanes())-1]
	if err := e.tc.ResetEphemeral(e.t.Context(), last.IP); err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for last.BootID() == e.seenBoots[last.IP] {
		if time.Now().After(deadline) {
			e.t.Fatalf("node %s did not reboot after its reset", last.IP)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := last.WaitEtcd(e.t.Context(), func(s talostest.EtcdServiceState) bool { return s.State != "" && s.State != "Initialized" }); err != nil {
		e.t.Fatal(err)
	}
}

// othersNotReset says whether the nodes the colleague did not reset are in
// the boots they ran before.
func (e *engineEnv) othersNotReset() string {
	cps := e.cluster.ControlPlanes()
	for _, n := range cps[:len(cps)-1] {
		if n.BootID() != e.seenBoots[n.IP] {
			return "node " + n.IP + " was reset"
		}
	}
	return ""
}

// notBootstrapped says whether no etcd member runs healthy.
func (e *engineEnv) notBootstrapped() string {
	for _, n := range e.cluster.ControlPlanes() {
		if st := n.EtcdState(); st.State == talostest.ServiceRunning && st.Healthy {
			return "etcd was bootstrapped on " + n.IP
		}
	}
	return ""
}

// colleagueDeletesAKey is a colleague's edit of etcd (a delete, which a
// full etcd takes too) once the incident changed something: it must stay.
func (e *engineEnv) colleagueDeletesAKey() (kept func() bool) {
	const key = "/registry/configmaps/default/colleague-deletes-me"
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	resp, err := e.kv.Get(ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		e.t.Fatalf("%s was not written before the incident", key)
	}
	if _, err := e.kv.Delete(ctx, key); err != nil {
		e.t.Fatal(err)
	}
	return func() bool {
		resp, err := e.kv.Get(e.t.Context(), key)
		return err == nil && len(resp.Kvs) == 0
	}
}

// nodeGoneBound is how long a run may take, once a control plane stopped
// answering in the middle of it, to end: only a bound that keeps a wait
// without a deadline from passing unseen.
const nodeGoneBound = 3 * time.Minute

// A control plane stops answering between the plan and the act (its
// network gone, as the operator confirms the first change): no read waits
// for it for ever. The run ends within its deadlines, not completed, and
// says which node.
func TestPromiseNodeGoneEndsWithinDeadlines(t *testing.T) {
	forEveryType(t, func(t *testing.T, c incidentCase) {
		env := c.make(t)
		gone := env.cluster.ControlPlanes()[1]
		var stopped atomic.Value
		stop := func() {
			if stopped.Load() == nil {
				stopped.Store(time.Now())
				gone.Stop()
			}
		}
		res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
			confirm:     func(string) error { stop(); return nil },
			confirmText: func(string, string) error { stop(); return nil },
		}})
		at, ok := stopped.Load().(time.Time)
		if !ok {
			t.Fatalf("the run asked nothing: %+v", res.Steps)
		}
		if took := time.Since(at); took > nodeGoneBound {
			t.Errorf("the run ended %s after node %s stopped answering; the bound is %s", took.Round(time.Second), gone.IP, nodeGoneBound)
		}
		if err == nil || res.Outcome == "completed" {
			t.Fatalf("the run %s (error %v) with node %s not answering", res.Outcome, err, gone.IP)
		}
		said := err.Error() + "\n" + strings.Join(res.Next, "\n")
		for _, s := range res.Steps {
			said += "\n" + s.Message
		}
		if !strings.Contains(said, gone.IP) {
			t.Errorf("nothing the run said names node %s:\n%s", gone.IP, said)
		}
	})
}
