package recovery_test

// The incident tells the truth (issue 21): resume and revert act on the
// incident's own cluster and nodes, a dry run never writes into a real
// incident and a rehearsal never runs for real, a declined requested step
// still puts the plugins back, revert finds every backup, restore keeps a
// colleague's edit, and a lost lock stops the run before its next change.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/configedit"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// interruptedAfterDisable is a recover stopped (Ctrl-C) right after its
// disable: the plugins are off on every node, the restore not done.
func interruptedAfterDisable(t *testing.T, env *engineEnv, dryRun bool) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res, err := recoverRun(t, env, recoverRequest{Ctx: ctx, DryRun: dryRun, Hooks: engineHooks{begin: func(s string) {
		if s == "wait-apiserver" {
			cancel()
		}
	}}})
	wantOutcome(t, res, err, "aborted", true)
	wantStep(t, res, "disable", "ok")
	return res.Incident
}

func journalBytes(t *testing.T, env *engineEnv, id string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.stateDir, "incidents", id, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rewriteJournal replaces old by new in the incident's journal.
func rewriteJournal(t *testing.T, env *engineEnv, id, old, new string) {
	t.Helper()
	path := filepath.Join(env.stateDir, "incidents", id, "journal.jsonl")
	b := journalBytes(t, env, id)
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("journal of %s has no %q", id, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), -1), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Case 1: a 3-node recover interrupted after the disable, resumed from a
// talosconfig whose context names one node (on main: that one node was
// restored, "completed", and two kept webhooks bypassed). The resume acts
// on the incident's three nodes; -n naming another set, another --context,
// and a different cluster or etcd are refused (exit 2) naming both.
func TestIncidentResumeActsOnItsRecordedNodes(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, deadlock: true})
	id := interruptedAfterDisable(t, env, false)
	env.assertPodsDisable(true)
	n1, n2, n3 := env.cluster.Nodes[0].IP, env.cluster.Nodes[1].IP, env.cluster.Nodes[2].IP
	journal := journalBytes(t, env, id)

	refused := func(what string, req resumeRequest, says ...string) {
		t.Helper()
		req.ID = id
		res, err := resumeWith(t, env, req)
		if failure.Code(err) != int(failure.BadInput) || len(res.Begun) > 0 {
			t.Fatalf("%s: exit %d, steps %v: %v; want refused (exit 2) before any step", what, failure.Code(err), res.Begun, err)
		}
		for _, s := range says {
			if !strings.Contains(err.Error()+strings.Join(failure.Hints(err), "\n"), s) {
				t.Errorf("%s: %q does not say %q (hints %q)", what, err, s, failure.Hints(err))
			}
		}
		if !bytes.Equal(journalBytes(t, env, id), journal) {
			t.Errorf("%s: the refused resume wrote into the journal", what)
		}
	}
	refused("-n one node", resumeRequest{Nodes: []string{n1}}, "ran on nodes "+n1+","+n2+","+n3, "-n names "+n1, "--nodes-gone "+n2+","+n3)
	refused("--nodes-gone of another node", resumeRequest{NodesGone: []string{"127.0.0.99"}}, "not a node of incident")
	refused("another context", resumeRequest{Context: "elsewhere"}, "context "+env.cluster.Name, "context elsewhere")
	env.assertPodsDisable(true)

	// From a talosconfig whose context names one node: the incident's nodes.
	cfg, err := env.cluster.TalosconfigWith(role.MakeSet(role.Admin), nil, []string{n1})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "one-node")
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	one, err := talos.Connect(t.Context(), talos.Options{Talosconfig: path})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if !slices.Equal(one.Nodes(), []string{n1}) {
		t.Fatalf("the one-node talosconfig targets %v", one.Nodes())
	}
	res, err := resumeWith(t, env, resumeRequest{ID: id, Talos: one})
	wantOutcome(t, res, err, "completed", false)
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("records left on %v", recs)
	}
	// Every hint can be typed as is: it names the context.
	for _, n := range res.Next {
		if strings.Contains(n, "breakglass resume") && !strings.Contains(n, "--context "+env.cluster.Name) {
			t.Errorf("hint %q lacks --context", n)
		}
	}
}

// Case 1, the other cluster: an incident recorded on cluster A is not
// resumed on nodes of cluster B, nor through an etcd of another cluster ID
// (exit 2, both named; on main it went ahead).
func TestIncidentOtherClusterRefused(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	id := interruptedAfterDisable(t, env, false)
	rewriteJournal(t, env, id, `"cluster":"`+env.cluster.Name+`"`, `"cluster":"another-cluster"`)
	_, err := resumeRun(t, env, id, engineHooks{})
	if failure.Code(err) != int(failure.BadInput) || !strings.Contains(fmt.Sprint(err), "is of cluster another-cluster") || !strings.Contains(fmt.Sprint(err), "belongs to cluster "+env.cluster.Name) {
		t.Fatalf("resume on another cluster: %v (exit %d)", err, failure.Code(err))
	}
	env.assertPodsDisable(true)
	rewriteJournal(t, env, id, `"cluster":"another-cluster"`, `"cluster":"`+env.cluster.Name+`"`)

	info := incident(t, env, id)
	b := journalBytes(t, env, id)
	i := bytes.Index(b, []byte(`"etcdClusterID":"`))
	if i < 0 {
		t.Fatalf("the incident recorded no etcd cluster ID:\n%s", b)
	}
	recorded := string(b[i+len(`"etcdClusterID":"`):][:bytes.IndexByte(b[i+len(`"etcdClusterID":"`):], '"')])
	rewriteJournal(t, env, id, `"etcdClusterID":"`+recorded+`"`, `"etcdClusterID":"feedfacefeedface"`)
	rewriteJournal(t, env, id, `"clusterUID":"`+clusterUID+`"`, `"clusterUID":"another-kube-system"`)
	_, err = revertRun(t, env, id, false, false, engineHooks{})
	if failure.Code(err) != int(failure.BadInput) || !strings.Contains(fmt.Sprint(err), "recorded etcd cluster feedfacefeedface") || !strings.Contains(fmt.Sprint(err), "cluster "+recorded) {
		t.Fatalf("revert through another etcd: %v (exit %d)", err, failure.Code(err))
	}
	// Another etcd cluster holding this Kubernetes cluster (its kube-system
	// namespace): etcd bootstrapped again from a copy, by another run.
	rewriteJournal(t, env, id, `"clusterUID":"another-kube-system"`, `"clusterUID":"`+clusterUID+`"`)
	_, err = revertRun(t, env, id, false, false, engineHooks{})
	if failure.Code(err) != int(failure.Conflict) || !strings.Contains(fmt.Sprint(err), "bootstrapped again") || !strings.Contains(strings.Join(failure.Hints(err), "\n"), "breakglass journal close "+id) {
		t.Fatalf("revert through this cluster's etcd bootstrapped again: %v (exit %d, hints %q)", err, failure.Code(err), failure.Hints(err))
	}
	env.assertPodsDisable(true)
	if info.State != "aborted" {
		t.Errorf("state %s", info.State)
	}
}

// Case 1, nodes gone for good: --nodes-gone leaves them out, and the run
// says what it leaves behind there, with the command for when they return.
func TestIncidentNodesGoneLeftBehind(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	id := interruptedAfterDisable(t, env, false)
	n1, n2 := env.cluster.Nodes[0], env.cluster.Nodes[1]
	n2.Stop() // gone: its Talos API does not answer
	res, err := resumeWith(t, env, resumeRequest{ID: id, Nodes: []string{n1.IP}, NodesGone: []string{n2.IP}})
	wantOutcome(t, res, err, "completed", false)
	env.assertConfigsOriginal(n2.IP)
	if !talostest.FlagHas(n2.Pod().Config, "disable-admission-plugins", vaw) {
		t.Errorf("node %s, said gone, was changed", n2.IP)
	}
	if recs := admissionRecords(t, env); !slices.Equal(recs, []string{n2.IP}) {
		t.Errorf("records %v, want the gone node's only", recs)
	}
	left := strings.Join(res.LeftBehind, "\n")
	if !strings.Contains(left, "node "+n2.IP+" was left out") || !strings.Contains(left, "breakglass admission restore -n "+n2.IP) {
		t.Errorf("left behind: %q", left)
	}
}

// Case 2: `resume --dry-run` of a real incident reads its journal and
// changes nothing, not even the journal (on main it appended "completed",
// and the real resume then had nothing to resume, the plugins left off);
// its restore plans from the real records. The real resume then finishes.
func TestIncidentResumeDryRunWritesNothing(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	id := interruptedAfterDisable(t, env, false)
	journal, records := journalBytes(t, env, id), admissionRecords(t, env)
	configs := map[string][]byte{}
	for _, n := range env.cluster.Nodes {
		configs[n.IP] = n.RunningConfig()
	}
	dry, err := resumeWith(t, env, resumeRequest{ID: id, DryRun: true, Hooks: engineHooks{confirm: func(q string) error {
		return errors.New("a dry run asked " + q)
	}}})
	wantOutcome(t, dry, err, "completed", false)
	if !dry.DryRun {
		t.Error("not marked dry run")
	}
	if m := dry.step("restore"); m.Outcome != "ok" || !strings.Contains(m.Message, "the nodes validated") || strings.Contains(m.Message, "nothing was disabled") {
		t.Errorf("restore in the dry resume: %+v; want the real records planned and validated", m)
	}
	if !bytes.Equal(journalBytes(t, env, id), journal) {
		t.Error("resume --dry-run wrote into the real incident's journal")
	}
	for _, n := range env.cluster.Nodes {
		if !bytes.Equal(n.RunningConfig(), configs[n.IP]) {
			t.Errorf("node %s changed", n.IP)
		}
	}
	if got := admissionRecords(t, env); !slices.Equal(got, records) {
		t.Errorf("records %v, were %v", got, records)
	}
	if info := incident(t, env, id); slices.Contains(info.Files, "lock.pid") || info.State != "aborted" {
		t.Errorf("incident after the dry run: state %s, files %v", info.State, info.Files)
	}

	res, err := resumeRun(t, env, id, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
}

// Case 3: a rehearsal's incident (recover --dry-run, interrupted) is never
// resumed or reverted for real (on main `resume ID -y` disabled the
// plugins for real): refused, exit 2, with the command to run for real.
func TestIncidentRehearsalNeverRunsForReal(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	registry := env.registry()
	id := interruptedAfterDisable(t, env, true)
	if info := incident(t, env, id); !info.DryRun {
		t.Fatalf("the dry run's incident is not recorded as one: %+v", info)
	}
	journal := journalBytes(t, env, id)
	for _, run := range []func() (runOutcome, error){
		func() (runOutcome, error) { return resumeRun(t, env, id, engineHooks{}) },
		func() (runOutcome, error) { return revertRun(t, env, id, true, false, engineHooks{}) },
	} {
		res, err := run()
		if failure.Code(err) != int(failure.BadInput) || len(res.Begun) > 0 || !strings.Contains(fmt.Sprint(err), "was a dry run") {
			t.Fatalf("exit %d, steps %v: %v; want refused as a rehearsal", failure.Code(err), res.Begun, err)
		}
		if h := strings.Join(failure.Hints(err), "\n"); !strings.Contains(h, "run it for real: breakglass recover -n "+env.cluster.Nodes[0].IP) {
			t.Errorf("hints %q lack the command to run for real", h)
		}
	}
	env.assertNothingChanged(registry)
	env.assertPodsDisable(false)
	if !bytes.Equal(journalBytes(t, env, id), journal) {
		t.Error("the refusal wrote into the rehearsal's journal")
	}
}

// Case 4: declining the typed confirmation of a requested delete is that
// step failing: the plugins are still put back, the run ends partial
// (exit 5) naming the command that finishes it (on main: aborted, exit 8,
// "nothing was changed" with the plugins off). Declining the restore ends
// the run (exit 8) without saying nothing was changed.
func TestIncidentDeclinedRequestedStepStillRestores(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	res, err := recoverRun(t, env, recoverRequest{Delete: []string{testWebhook}, Hooks: engineHooks{confirmText: func(string, string) error { return declined() }}})
	wantOutcome(t, res, err, "partial", true)
	if failure.Code(err) != int(failure.Partial) {
		t.Errorf("exit %d, want 5", failure.Code(err))
	}
	wantStep(t, res, "delete-webhook", "failed")
	wantStep(t, res, "restore", "ok")
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if !bytes.Equal(env.webhookInEtcd(), env.webhookValue) {
		t.Error("the declined object was removed")
	}
	if u := strings.Join(res.Undone, "\n"); !strings.Contains(u, "breakglass etcd delete --kind all "+testWebhook) {
		t.Errorf("undone %q lacks the command that finishes it", u)
	}
	if strings.Contains(fmt.Sprint(err), "nothing was changed") || slices.ContainsFunc(res.Next, func(n string) bool { return strings.Contains(n, "nothing was changed") }) {
		t.Errorf("says nothing was changed after a disable and a restore: %v %v", err, res.Next)
	}

	env2 := newEngineEnv(t, envOptions{deadlock: true})
	res, err = recoverRun(t, env2, recoverRequest{Hooks: engineHooks{confirm: func(q string) error {
		if strings.HasPrefix(q, "restore") {
			return declined()
		}
		return nil
	}}})
	wantOutcome(t, res, err, "aborted", true)
	if failure.Code(err) != int(failure.Declined) || strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("declined restore: exit %d: %v; want 8, not saying nothing was changed", failure.Code(err), err)
	}
	if !slices.ContainsFunc(res.Next, func(n string) bool { return strings.Contains(n, "breakglass revert "+res.Incident) }) {
		t.Errorf("next %v lacks the revert", res.Next)
	}
	env2.assertPodsDisable(true)
}

// Case 5: killed between the delete's etcd transaction and its end record
// (a fault hook panics there). revert --objects finds the backup the
// journal's note names (on main: "this incident removed nothing from
// etcd", completed, the object still gone) and puts the object back.
func TestIncidentRevertObjectsAfterKillBeforeEndRecord(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	defer recovery.SetFaultHook(func(point string) {
		if point == "etcd.delete applied" {
			panic(errKilled)
		}
	})()
	var id atomic.Value
	func() {
		defer func() {
			if p := recover(); p != errKilled {
				panic(p)
			}
		}()
		_, _ = recoverRun(t, env, recoverRequest{Delete: []string{testWebhook}, Hooks: engineHooks{begin: func(s string) {
			if s == "preflight" {
				list, _ := env.state().Incidents()
				id.Store(list[len(list)-1].ID)
			}
		}}})
		t.Fatal("the fault point was not reached")
	}()
	recovery.SetFaultHook(nil)
	if env.webhookInEtcd() != nil {
		t.Fatal("the delete's transaction did not happen")
	}
	inc := id.Load().(string)
	if info := incident(t, env, inc); info.State != "interrupted" || info.LastStep != "delete-webhook" {
		t.Fatalf("after the kill: %s at %s", info.State, info.LastStep)
	}
	rev, err := revertRun(t, env, inc, true, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	wantStep(t, rev, "revert-objects", "ok")
	if got := env.webhookInEtcd(); !bytes.Equal(got, env.webhookValue) {
		t.Errorf("the object is not back byte for byte (%d bytes)", len(got))
	}
	env.assertConfigsOriginal()
}

var errKilled = errors.New("killed at the fault point")

// Case 6: a colleague adds MutatingAdmissionWebhook to
// disable-admission-plugins during the incident (their talosctl patch).
// The restore plan says so before the question, and the restore takes out
// only ValidatingAdmissionWebhook (on main: the key was put back as it was
// before the disable, dropping their edit, while the plan said "kept").
func TestIncidentRestoreKeepsAColleaguesEdit(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	n := env.cluster.Nodes[0]
	const theirs = "MutatingAdmissionWebhook"
	var shown atomic.Value
	shown.Store("")
	restoring := atomic.Bool{}
	res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		begin: func(s string) {
			if s != "restore" {
				return
			}
			restoring.Store(true)
			cfg := n.RunningConfig()
			edited := bytes.Replace(cfg, []byte("disable-admission-plugins: "+vaw), []byte("disable-admission-plugins: "+vaw+","+theirs), 1)
			if bytes.Equal(edited, cfg) {
				t.Errorf("no disable-admission-plugins in the config:\n%s", cfg)
				return
			}
			if _, err := env.tc.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: edited, Mode: talos.NoReboot}); err != nil {
				t.Error(err)
			}
			waitPodFlag(t, env, n, theirs)
		},
		show: func(text string) {
			if restoring.Load() {
				shown.Store(shown.Load().(string) + text)
			}
		},
	}})
	wantOutcome(t, res, err, "completed", false)
	if s := shown.Load().(string); !strings.Contains(s, "CHANGED SINCE THE DISABLE: disable-admission-plugins held "+vaw+" after it, holds "+vaw+","+theirs+" now") {
		t.Errorf("the restore plan does not say how the key changed:\n%s", s)
	}
	got, err := configedit.Disabled(n.RunningConfig())
	if err != nil || !slices.Equal(got, []string{theirs}) {
		t.Errorf("disable-admission-plugins after the restore: %v, %v; want the colleague's %s kept", got, err, theirs)
	}
	if !talostest.FlagHas(n.Pod().Config, "disable-admission-plugins", theirs) || talostest.FlagHas(n.Pod().Config, "disable-admission-plugins", vaw) {
		v, _ := n.Pod().Config.Flag("disable-admission-plugins")
		t.Errorf("kube-apiserver runs with disable-admission-plugins=%s", v)
	}
}

// waitPodFlag waits until the node runs kube-apiserver with the plugin
// disabled, and Talos reports that container.
func waitPodFlag(t *testing.T, env *engineEnv, n *talostest.Node, plugin string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !talostest.FlagHas(n.Pod().Config, "disable-admission-plugins", plugin) || !n.Pod().Running {
		if time.Now().After(deadline) {
			t.Fatalf("node %s never ran with %s disabled", n.IP, plugin)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	env.waitSettled()
}

// Case 7: the cluster lock's lease is revoked mid-run (its holder's etcd
// trouble, or a colleague's lock break): the run stops before its next
// change (exit 6), saying why and how to continue (on main it went on and
// restored without the lock). resume then finishes under a new lock.
func TestIncidentLostLockStopsBeforeNextChange(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{begin: func(s string) {
		if s != "restore" {
			return
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		resp, err := env.kv.Get(ctx, "/breakglass/lock")
		if err != nil || len(resp.Kvs) == 0 {
			t.Errorf("no lock held during the run: %v", err)
			return
		}
		if _, err := env.kv.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
			t.Error(err)
		}
	}}})
	wantOutcome(t, res, err, "failed", true)
	if failure.Code(err) != int(failure.Conflict) || !strings.Contains(err.Error(), "the cluster lock was lost") {
		t.Fatalf("exit %d: %v; want 6, the lock lost", failure.Code(err), err)
	}
	if h := strings.Join(failure.Hints(err), "\n"); !strings.Contains(h, "breakglass resume "+res.Incident) || !strings.Contains(h, "breakglass lock status") {
		t.Errorf("hints %q do not say how to continue", h)
	}
	wantStep(t, res, "restore", "failed")
	env.assertPodsDisable(true)
	if len(admissionRecords(t, env)) != 1 {
		t.Error("the records changed")
	}

	again, err := resumeRun(t, env, res.Incident, engineHooks{})
	wantOutcome(t, again, err, "completed", false)
	env.assertConfigsOriginal()
}
