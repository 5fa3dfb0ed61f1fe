package recovery_test

// Issue 20's proof: every standalone change (admission disable|restore,
// etcd delete|restore, lock break, revert) and every step of the guided
// recovery, run with --dry-run and with a declined confirmation, changes
// nothing, checked from one place (world, unchanged), and ends with its
// documented exit code.

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
)

// world is everything a change could touch: every node's running and
// on-disk config, every etcd key (value and mod revision), and every file
// of the state directory (journals, records, backups). A run's own cluster
// lock and lock.pid, held while it runs, are not in it (lock break's case
// checks the lock itself).
type world struct {
	configs, etcd, files map[string]string
}

func (e *engineEnv) world() world {
	e.t.Helper()
	w := world{configs: map[string]string{}, etcd: e.etcdState().Keys, files: map[string]string{}}
	delete(w.etcd, "/breakglass/lock")
	for _, n := range e.cluster.Nodes {
		w.configs[n.IP] = fmt.Sprintf("%x %x", sha256.Sum256(n.RunningConfig()), sha256.Sum256(n.PersistentConfig()))
	}
	_ = filepath.WalkDir(e.stateDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != "lock.pid" {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(e.stateDir, p)
			w.files[rel] = string(b)
		}
		return nil
	})
	return w
}

// journaling is what a run may write into the state directory while
// changing nothing else.
type journaling int

const (
	writesNothing  journaling = iota // a dry run of an existing incident: not even its journal
	ownRehearsal                     // a dry run: its own new incident, marked dry run
	recordsAttempt                   // a declined run: its journal records the attempt (and the verified snapshot it took first), no change applied
	ownIncident                      // a run that changed and put back: its own new incident, anything in it
)

// unchanged fails the test when anything changed between before and
// after but what j allows.
func unchanged(t *testing.T, name string, before, after world, j journaling) {
	t.Helper()
	for k, v := range before.configs {
		if after.configs[k] != v {
			t.Errorf("%s: node %s's config changed", name, k)
		}
	}
	if !mapsEqual(before.etcd, after.etcd) {
		t.Errorf("%s: etcd changed:\nbefore %v\nafter  %v", name, keysOf(before.etcd), keysOf(after.etcd))
	}
	for path, old := range before.files {
		now, ok := after.files[path]
		switch {
		case !ok:
			t.Errorf("%s: %s was removed", name, path)
		case now == old:
		case j == recordsAttempt && strings.HasSuffix(path, "journal.jsonl") && strings.HasPrefix(now, old):
			if added := now[len(old):]; strings.Contains(added, `"kind":"apply"`) {
				t.Errorf("%s: %s records a change applied:\n%s", name, path, added)
			}
		default:
			t.Errorf("%s: %s changed", name, path)
		}
	}
	for path, now := range after.files {
		if _, ok := before.files[path]; ok {
			continue
		}
		own := strings.HasPrefix(path, "incidents"+string(filepath.Separator))
		switch {
		case j == ownIncident && own:
		case j == recordsAttempt && own && filepath.Base(path) == "etcd.snapshot":
		case j == writesNothing:
			t.Errorf("%s: wrote %s", name, path)
		case filepath.Base(path) != "journal.jsonl" || !strings.HasPrefix(path, "incidents"+string(filepath.Separator)):
			t.Errorf("%s: wrote %s, not a journal", name, path)
		case j == ownRehearsal && !strings.Contains(now[:strings.IndexByte(now, '\n')], `"dryRun":true`):
			t.Errorf("%s: its new incident is not marked dry run", name)
		case strings.Contains(now, `"kind":"apply"`):
			t.Errorf("%s: its journal records a change applied", name)
		}
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// loopCase is one command line: run it either as a dry run or declined
// at every question, with the exit code it must end with.
type loopCase struct {
	name string
	run  func(dryRun bool, hooks engineHooks) (*recovery.RecoverResult, error)
	// existing: it works on an existing incident (resume, revert): a dry
	// run writes nothing at all.
	existing bool
	declined int // the exit code when declined (8, or 5 for a requested step)
	// goesOn: declined, the run goes on and puts back what it changed
	// (a requested step): its own incident records all of it.
	goesOn bool
}

func declineAll() engineHooks {
	return engineHooks{confirm: func(string) error { return declined() }, confirmText: func(string, string) error { return declined() }}
}

func checkLoopCase(t *testing.T, env *engineEnv, c loopCase) {
	t.Helper()
	before := env.world()
	res, err := c.run(true, engineHooks{confirm: func(q string) error { return fmt.Errorf("a dry run asked %q", q) },
		confirmText: func(q, _ string) error { return fmt.Errorf("a dry run asked %q", q) }})
	if code := failure.Code(err); code != 0 || res == nil || !res.DryRun {
		t.Errorf("%s --dry-run: exit %d (%v), result %+v; want 0, a dry run", c.name, code, err, res)
	}
	j := ownRehearsal
	if c.existing {
		j = writesNothing
	}
	unchanged(t, c.name+" --dry-run", before, env.world(), j)

	before = env.world()
	res, err = c.run(false, declineAll())
	if code := failure.Code(err); code != c.declined || res == nil {
		t.Errorf("%s, declined: exit %d (%v); want %d", c.name, code, err, c.declined)
	} else if c.declined == int(failure.Declined) && !slices.ContainsFunc(res.Steps, func(s recovery.StepResult) bool { return s.Outcome == recovery.OutcomeAborted }) {
		t.Errorf("%s, declined: no step aborted: %+v", c.name, res.Steps)
	}
	j = recordsAttempt
	if c.goesOn {
		j = ownIncident
	}
	unchanged(t, c.name+", declined", before, env.world(), j)
}

func TestLoopDryRunAndDeclineChangeNothing(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	st := env.state()
	ui := func(h engineHooks) *testUI { return newTestUI(t, h) }
	fx := env.effects
	adm := recovery.AdmissionChange{Plugins: []string{vaw}, WaitTimeout: time.Minute, Etcd: env.etcdOptions(), ToolVersion: "loop-test"}
	del := recovery.EtcdChange{Kind: "all", Names: []string{testWebhook}, Etcd: env.etcdOptions(), ToolVersion: "loop-test"}

	// On the deadlocked cluster as it is: disable, delete, and breaking a
	// lock someone holds.
	for _, c := range []loopCase{
		{name: "admission disable", declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
			return recovery.DisableAdmission(t.Context(), env.tc, st, fx(dry), ui(h), adm)
		}},
		{name: "etcd delete", declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
			return recovery.DeleteObjects(t.Context(), nil, st, fx(dry), ui(h), del)
		}},
	} {
		checkLoopCase(t, env, c)
	}
	release := holdLock(t, env, "alice@laptop", "20260101-000000-alice1")
	checkLoopCase(t, env, loopCase{name: "lock break", declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
		return recovery.BreakClusterLock(t.Context(), nil, st, fx(dry), ui(h), recovery.EtcdChange{Etcd: env.etcdOptions()})
	}})
	if lockHolder(t, env) != "20260101-000000-alice1" {
		t.Error("the lock is no longer alice's")
	}
	release()

	// Now changed for real, so that the restores and the revert have something to do.
	_, err := recovery.DisableAdmission(t.Context(), env.tc, st, fx(false), ui(engineHooks{}), adm)
	if err != nil {
		t.Fatal(err)
	}
	removed, err := recovery.DeleteObjects(t.Context(), nil, st, fx(false), ui(engineHooks{}), del)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := recovery.ResultOf[*recovery.DeleteResult](removed)
	backup := out.Backup
	for _, c := range []loopCase{
		{name: "admission restore", declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
			return recovery.RestoreAdmission(t.Context(), env.tc, st, fx(dry), ui(h), adm)
		}},
		{name: "etcd restore", declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
			return recovery.RestoreBackup(t.Context(), nil, st, fx(dry), ui(h), recovery.EtcdChange{File: backup, Etcd: env.etcdOptions()})
		}},
		{name: "revert --objects", existing: true, declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
			return recovery.Revert(t.Context(), env.tc, st, fx(dry), ui(h), recovery.IncidentOptions{ID: removed.Incident, Objects: true, Etcd: env.etcdOptions()})
		}},
	} {
		checkLoopCase(t, env, c)
	}
	if env.webhookInEtcd() != nil || len(admissionRecords(t, env)) != 1 {
		t.Fatal("the real changes the restores were tried on are gone")
	}
}

// Every step of the guided recovery: the dry run walks them all (with
// --delete, so the snapshot and the delete are planned), and each step
// that asks is declined in turn (the requested delete in the next test).
func TestLoopRecoverStepsDryRunAndDecline(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})

	checkLoopCase(t, env, recoverCase(env, "recover, declined at disable", 8, func(q string) bool { return strings.HasPrefix(q, "disable") }))

	// Declined at the restore: nothing changes from its question on.
	var atRestore world
	res, err := recoverFull(t, env, recoverRequest{Hooks: engineHooks{confirm: func(q string) error {
		if strings.HasPrefix(q, "restore") {
			atRestore = env.world()
			return declined()
		}
		return nil
	}, confirmText: func(string, string) error { return nil }}})
	if failure.Code(err) != 8 || atRestore.configs == nil {
		t.Fatalf("declined at the restore: exit %d: %v", failure.Code(err), err)
	}
	unchanged(t, "recover, declined at restore", atRestore, env.world(), recordsAttempt)

	// That incident, continued: resume and revert, dry and declined.
	for _, c := range []loopCase{
		{name: "resume", existing: true, declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
			return recovery.Resume(t.Context(), env.tc, env.state(), env.effects(dry), newTestUI(t, h), recovery.IncidentOptions{ID: res.Incident})
		}},
		{name: "revert --objects", existing: true, declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
			return recovery.Revert(t.Context(), env.tc, env.state(), env.effects(dry), newTestUI(t, h), recovery.IncidentOptions{ID: res.Incident, Objects: true, Etcd: env.etcdOptions()})
		}},
	} {
		checkLoopCase(t, env, c)
	}
	if !bytes.Equal(env.webhookInEtcd(), env.webhookValue) {
		t.Error("the webhook configuration changed")
	}
	env.assertPodsDisable(true)
}

// recoverCase is `recover --delete NAME`, dry or declined where decline says.
func recoverCase(env *engineEnv, name string, code int, decline func(q string) bool) loopCase {
	t := env.t
	return loopCase{name: name, declined: code, goesOn: code == int(failure.Partial), run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
		if !dry {
			h = engineHooks{
				confirm: func(q string) error {
					if decline(q) {
						return declined()
					}
					return nil
				},
				confirmText: func(q, _ string) error {
					if decline(q) {
						return declined()
					}
					return nil
				},
			}
		}
		res, err := recoverFull(t, env, recoverRequest{DryRun: dry, Delete: []string{testWebhook}, Hooks: h})
		if dry && err == nil && len(res.Steps) != 9 {
			t.Errorf("the dry run walked %d steps, the runbook has 9", len(res.Steps))
		}
		return res, err
	}}
}

// Declining the requested delete fails it, and the run goes on to put the
// plugins back (exit 5): the cluster ends as it began.
func TestLoopRecoverDeclinedRequestedDelete(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	checkLoopCase(t, env, recoverCase(env, "recover, declined at the requested delete", 5, func(q string) bool { return strings.Contains(q, "deletes") }))
}

// recoverFull is recoverRun returning the engine's result.
func recoverFull(t *testing.T, env *engineEnv, req recoverRequest) (*recovery.RecoverResult, error) {
	t.Helper()
	rb, err := runbooks.Resolve("webhook-deadlock")
	if err != nil {
		t.Fatal(err)
	}
	opts := recovery.RecoverOptions{Runbook: rb.Metadata.Name, Steps: recovery.StepsOf(rb), Delete: req.Delete, Etcd: env.etcdOptions(), ToolVersion: "loop-test", Command: "recover"}
	return recovery.Recover(t.Context(), env.tc, env.state(), env.effects(req.DryRun), newTestUI(t, req.Hooks), opts)
}

// The full-etcd steps (compact, defragment, disarm), each declined in turn
// after the ones before it were applied: nothing changes from its question
// on, the run ends declined (exit 8), and etcd stays in NOSPACE until the
// disarm is let through. Their dry run is checkLoopCase's, from the start.
func TestLoopFullEtcdStepsDryRunAndDecline(t *testing.T) {
	env := newEngineEnv(t, envOptions{etcdQuota: spaceQuota})
	env.fill()
	checkLoopCase(t, env, loopCase{name: "recover on a full etcd", declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
		return recoverFull(t, env, recoverRequest{DryRun: dry, Hooks: h})
	}})

	for _, step := range []string{"compact", "defragment", "disarm"} {
		var atQuestion world
		_, err := recoverFull(t, env, recoverRequest{Hooks: engineHooks{confirm: func(q string) error {
			if strings.HasPrefix(q, step) {
				atQuestion = env.world()
				return declined()
			}
			return nil
		}}})
		if failure.Code(err) != int(failure.Declined) || atQuestion.configs == nil {
			t.Fatalf("declined at %s: exit %d: %v", step, failure.Code(err), err)
		}
		unchanged(t, "recover on a full etcd, declined at "+step, atQuestion, env.world(), recordsAttempt)
		if !env.noSpace(t.Context()) {
			t.Fatalf("declined at %s: the NOSPACE alarm is gone", step)
		}
	}
}
