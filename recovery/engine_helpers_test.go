package recovery_test

// Every call into the recovery engine made by engine_test.go goes through
// this file, so that a change of the engine's API is adapted here, once:
// the tests see only plain strings, hooks and runOutcome.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// engineHooks are what a test does at the UI's calls; nil hooks answer
// yes and go on. Step names are the runbook's (webhook-deadlock).
type engineHooks struct {
	begin       func(step string)
	confirm     func(question string) error
	confirmText func(question, word string) error
	progress    func(node, msg string)
	show        func(text string) // a plan shown before its question
	outputErr   func() error      // whether standard output and error still take writes (nil: they do)
}

// testUI is a recovery.UI that answers through hooks and remembers the
// steps begun.
type testUI struct {
	t     *testing.T
	hooks engineHooks
	mu    sync.Mutex
	begun []string
	done  atomic.Bool // the engine call returned: no more logging
}

func newTestUI(t *testing.T, h engineHooks) *testUI { return &testUI{t: t, hooks: h} }

func (u *testUI) logf(format string, args ...any) {
	if !u.done.Load() {
		u.t.Logf(format, args...)
	}
}

func (u *testUI) Begin(index, total int, s recovery.Step) {
	u.mu.Lock()
	u.begun = append(u.begun, s.Name)
	u.mu.Unlock()
	u.logf("[%d/%d] %s (%s)", index, total, s.Name, s.Action())
	if u.hooks.begin != nil {
		u.hooks.begin(s.Name)
	}
}

func (u *testUI) End(s recovery.Step, outcome string, elapsed time.Duration, message string) {
	u.logf("=> %s %s in %s: %s", s.Name, outcome, elapsed.Round(time.Millisecond), message)
}

func (u *testUI) Progress(node, msg string) {
	u.logf("   %s: %s", node, msg)
	if u.hooks.progress != nil {
		u.hooks.progress(node, msg)
	}
}

func (u *testUI) Show(v recovery.View) {
	if u.hooks.show != nil {
		u.hooks.show(v.String())
	}
}

func (u *testUI) Confirm(ctx context.Context, q recovery.Question) error {
	if q.Word != "" {
		u.logf("   confirm typed %q: %s", q.Word, q.Text)
		if u.hooks.confirmText != nil {
			return u.hooks.confirmText(q.Text, q.Word)
		}
		return nil
	}
	u.logf("   confirm: %s", q.Text)
	if u.hooks.confirm != nil {
		return u.hooks.confirm(q.Text)
	}
	return nil
}

// OutputErr is the loop's check before each change that the output still
// takes writes.
func (u *testUI) OutputErr() error {
	if u.hooks.outputErr != nil {
		return u.hooks.outputErr()
	}
	return nil
}

func (u *testUI) steps() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.begun...)
}

// runOutcome is what a guided run returned, in plain terms.
type runOutcome struct {
	Incident   string
	Outcome    string
	DryRun     bool
	Steps      []stepOutcome
	Next       []string
	Undone     []string
	LeftBehind []string
	Begun      []string // the steps the UI saw begin, in order
}

type stepOutcome struct{ Name, Outcome, Message string }

// step is the outcome of the named step ("" when it is not in the result).
func (o runOutcome) step(name string) stepOutcome {
	for _, s := range o.Steps {
		if s.Name == name {
			return s
		}
	}
	return stepOutcome{Name: name}
}

func outcomeOf(res *recovery.RecoverResult, ui *testUI) runOutcome {
	ui.done.Store(true)
	if res == nil {
		return runOutcome{Begun: ui.steps()}
	}
	out := runOutcome{Incident: res.Incident, Outcome: res.Outcome, DryRun: res.DryRun, Next: res.Next, Undone: res.Undone, LeftBehind: res.LeftBehind, Begun: ui.steps()}
	for _, s := range res.Steps {
		out.Steps = append(out.Steps, stepOutcome{Name: s.Name, Outcome: s.Outcome, Message: s.Message})
	}
	return out
}

// recoverRequest is a `breakglass recover` as the operator would type it.
type recoverRequest struct {
	Ctx          context.Context // default t.Context()
	Delete       []string        // --delete
	DryRun       bool            // --dry-run
	KeepDisabled bool            // --keep-disabled
	Nodes        []string        // -n; default every node
	StateDir     string          // --state-dir; default the env's (another's: another operator)
	NodesGone    []string        // --nodes-gone
	Bundle       string          // --secrets-bundle
	RemoveLost   bool            // --remove-unreadable
	Hooks        engineHooks
}

func (e *engineEnv) etcdOptions() recovery.EtcdOptions { return e.etcdAccess }

func (e *engineEnv) state() recovery.State { return recovery.State{Dir: e.stateDir} }

// effects are what a run may change, as the commands choose them: nothing
// on --dry-run.
func (e *engineEnv) effects(dryRun bool) recovery.Effects { return e.effectsOf(e.tc, dryRun) }

func (e *engineEnv) effectsOf(tc *talos.Client, dryRun bool) recovery.Effects {
	if dryRun {
		return recovery.Effects{}
	}
	return recovery.Live(tc)
}

// recoverRun runs the built-in webhook-deadlock runbook, as recover does
// without --runbook and --plugins.
func recoverRun(t *testing.T, env *engineEnv, req recoverRequest) (runOutcome, error) {
	t.Helper()
	rb, err := runbooks.Resolve("webhook-deadlock")
	if err != nil {
		t.Fatal(err)
	}
	ctx := req.Ctx
	if ctx == nil {
		ctx = t.Context()
	}
	opts := recovery.RecoverOptions{Runbook: rb.Metadata.Name, Steps: recovery.StepsOf(rb), KeepDisabled: req.KeepDisabled,
		Delete: req.Delete, Etcd: env.etcdOptions(), ToolVersion: "engine-test", Command: "recover", NodesGone: req.NodesGone, SecretsBundle: req.Bundle,
		RemoveUnreadable: req.RemoveLost}
	tc, state := env.tc, env.state()
	if req.Nodes != nil {
		tc = tc.WithNodes(req.Nodes)
	}
	if req.StateDir != "" {
		state = recovery.State{Dir: req.StateDir}
	}
	ui := newTestUI(t, req.Hooks)
	res, err := recovery.Recover(ctx, tc, state, env.effectsOf(tc, req.DryRun), ui, opts)
	return outcomeOf(res, ui), err
}

// resumeRun is `breakglass resume ID` ("" for the newest interrupted one).
func resumeRun(t *testing.T, env *engineEnv, id string, hooks engineHooks) (runOutcome, error) {
	t.Helper()
	return resumeWith(t, env, resumeRequest{ID: id, Hooks: hooks})
}

// resumeRequest is a `breakglass resume` as typed: the incident, -n,
// --context, --nodes-gone, --dry-run, through which Talos client.
type resumeRequest struct {
	ID        string
	Nodes     []string
	Context   string
	NodesGone []string
	DryRun    bool
	Talos     *talos.Client // default env.tc
	Hooks     engineHooks
}

func resumeWith(t *testing.T, env *engineEnv, req resumeRequest) (runOutcome, error) {
	t.Helper()
	tc := req.Talos
	if tc == nil {
		tc = env.tc
	}
	ui := newTestUI(t, req.Hooks)
	res, err := recovery.Resume(t.Context(), tc, env.state(), env.effectsOf(tc, req.DryRun), ui,
		recovery.IncidentOptions{ID: req.ID, Nodes: req.Nodes, Context: req.Context, NodesGone: req.NodesGone})
	return outcomeOf(res, ui), err
}

// revertRun is `breakglass revert ID [--objects] [--dry-run]`, with the
// etcd flags.
func revertRun(t *testing.T, env *engineEnv, id string, objects, dryRun bool, hooks engineHooks) (runOutcome, error) {
	t.Helper()
	ui := newTestUI(t, hooks)
	res, err := recovery.Revert(t.Context(), env.tc, env.state(), env.effects(dryRun), ui,
		recovery.IncidentOptions{ID: id, Objects: objects, Etcd: env.etcdOptions(), ToolVersion: "engine-test"})
	return outcomeOf(res, ui), err
}

// standaloneDisable is `breakglass admission disable --plugins ... --yes`
// as cmd/breakglass/admission.go runs it: an incident of one step. It
// returns the incident and the run's outcome.
func standaloneDisable(t *testing.T, env *engineEnv, plugins []string) (string, error) {
	t.Helper()
	ui := newTestUI(t, engineHooks{})
	res, err := recovery.DisableAdmission(t.Context(), env.tc, env.state(), env.effects(false), ui,
		recovery.AdmissionChange{Plugins: plugins, WaitTimeout: time.Minute, Etcd: env.etcdOptions(), ToolVersion: "engine-test"})
	out := outcomeOf(res, ui)
	if err == nil && out.Outcome != "completed" {
		err = fmt.Errorf("admission disable ended %s", out.Outcome)
	}
	return out.Incident, err
}

// errorIs tells the kind of an engine error: conflict, aborted (declined
// or interrupted), partial, invalid-input, timeout.
func errorIs(err error, kind string) bool {
	switch kind {
	case "conflict":
		return errors.Is(err, failure.Conflict) // the category: the lock error is the etcd package's
	case "aborted": // as the exit codes take it: declined, or interrupted
		return errors.Is(err, recovery.ErrAborted) || errors.Is(err, context.Canceled)
	case "partial":
		return errors.Is(err, recovery.ErrPartial)
	case "invalid-input":
		return errors.Is(err, failure.BadInput)
	case "timeout":
		return errors.Is(err, recovery.ErrTimeout)
	}
	panic("unknown error kind " + kind)
}

// exitKind is the exit code a command gives err, by its category's name:
// ok, unexpected, bad-input, credentials, unreachable, partial, conflict,
// timeout, declined, refused, verification (or the number).
func exitKind(err error) string {
	names := map[failure.Category]string{failure.OK: "ok", failure.Unexpected: "unexpected", failure.BadInput: "bad-input",
		failure.Credentials: "credentials", failure.Unreachable: "unreachable", failure.Partial: "partial", failure.Conflict: "conflict",
		failure.Timeout: "timeout", failure.Declined: "declined", failure.Refused: "refused", failure.Verification: "verification"}
	code := failure.Code(err)
	if n, ok := names[failure.Category(code)]; ok {
		return n
	}
	return fmt.Sprint(code)
}

// declined is what the terminal UI answers to "no" at a confirmation.
func declined() error { return recovery.Declined("not confirmed") }

// admissionRecords lists the nodes for which the state directory holds a
// record of disabled plugins.
func admissionRecords(t *testing.T, env *engineEnv) []string {
	t.Helper()
	var out []string
	for _, n := range env.cluster.Nodes {
		rec, err := env.state().LoadAdmission(env.cluster.Name, n.IP)
		if err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			out = append(out, n.IP)
		}
	}
	return out
}

// incidentInfo is what `journal list` says of an incident.
type incidentInfo struct {
	State, LastStep  string
	Runbook          string // the runbook it followed
	DryRun           bool
	Standalone       bool
	Dir              string
	Files            []string // the files in the incident's directory
	FinishedOutcomes []string // the outcomes of its finish records, in order
}

func incident(t *testing.T, env *engineEnv, id string) incidentInfo {
	t.Helper()
	list, err := env.state().Incidents()
	if err != nil {
		t.Fatal(err)
	}
	var info incidentInfo
	found := false
	for _, i := range list {
		if i.ID == id {
			found = true
			info = incidentInfo{State: i.State, LastStep: i.LastStep, Runbook: i.Runbook, DryRun: i.DryRun, Standalone: i.Standalone, Dir: filepath.Dir(i.Path)}
		}
	}
	if !found {
		t.Fatalf("no incident %s in the state directory", id)
	}
	ents, err := os.ReadDir(info.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info.Files = append(info.Files, e.Name())
	}
	_, entries, err := env.state().ReadIncident(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Kind == "finish" {
			info.FinishedOutcomes = append(info.FinishedOutcomes, e.Outcome)
		}
	}
	return info
}

// holdLock takes the cluster lock as another run would (by, incident),
// held until the test ends or release is called.
func holdLock(t *testing.T, env *engineEnv, by, incident string) (release func()) {
	t.Helper()
	ec, err := recovery.ConnectEtcd(t.Context(), nil, env.etcdOptions())
	if err != nil {
		t.Fatal(err)
	}
	lock, err := ec.AcquireLock(t.Context(), etcd.LockHolder{By: by, Since: time.Now().UTC(), Incident: incident, Command: "recover"})
	if err != nil {
		ec.Close()
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = lock.Release(context.Background())
			ec.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// lockHolder is the incident of the run holding the cluster lock, "-" for
// a holder without one, "" when the lock is free.
func lockHolder(t *testing.T, env *engineEnv) string {
	t.Helper()
	ec, err := recovery.ConnectEtcd(t.Context(), nil, env.etcdOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	h, err := ec.ReadLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case h == nil:
		return ""
	case h.Incident == "":
		return "-"
	}
	return h.Incident
}

// simulateKillAfter rewrites the incident's journal as a run killed
// (SIGKILL, power loss) right after it journaled the record of kind (note:
// the backup path of an etcd.delete; apply: a change about to be applied)
// of step would have left it: the records up to that one, nothing after.
// The killed run's cluster lock is left held in etcd under this incident,
// by this operator, and its lock.pid names a process that is gone.
func simulateKillAfter(t *testing.T, env *engineEnv, id, kind, step string) {
	t.Helper()
	info := incident(t, env, id)
	path := filepath.Join(info.Dir, "journal.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	cut := false
	for sc.Scan() && !cut {
		var e recovery.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		kept = append(kept, sc.Text())
		cut = e.Kind == kind && e.Step == step
	}
	f.Close()
	if !cut {
		t.Fatalf("incident %s has no %s record of step %s", id, kind, step)
	}
	if err := os.WriteFile(path, []byte(strings.Join(kept, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A process that existed and is gone (reaped): what lock.pid names after a kill.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.Dir, "lock.pid"), []byte(strconv.Itoa(cmd.ProcessState.Pid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !env.noSpace(t.Context()) { // on a full etcd the killed run could not have taken it
		holdLock(t, env, recovery.Whoami(), id)
	}
}
