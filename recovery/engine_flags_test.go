package recovery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// The line kube-apiserver v1.34.4 exits with on --feature-gates=MultiCIDRServiceAllocator=false
// (recovery/diagnose/testdata/logs/flags-gate-locked.log).
const lockedGateLine = `E1202 06:00:42.064243   17564 run.go:72] "command failed" err="cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true"`

// newFlagsEnv is a cluster whose kube-apiserver refuses
// MultiCIDRServiceAllocator=false, carried in every control plane's
// extraArgs (a list on one node, a string on the other), crash-looping.
func newFlagsEnv(t *testing.T) *engineEnv {
	t.Helper()
	env := newEngineEnv(t, envOptions{controlPlanes: 2})
	env.refuses = func(c talostest.ContainerConfig) string {
		if talostest.FlagHas(c, "feature-gates", "MultiCIDRServiceAllocator=false") {
			return lockedGateLine
		}
		return ""
	}
	forms := []string{
		"        extraArgs:\n            feature-gates: MutatingAdmissionPolicy=true,MultiCIDRServiceAllocator=false # carried from 1.33\n            audit-log-maxage: \"30\"\n",
		"        extraArgs:\n            feature-gates:\n                - MultiCIDRServiceAllocator=false\n                - MutatingAdmissionPolicy=true\n",
	}
	for i, n := range env.cluster.ControlPlanes() {
		cfg := strings.Replace(string(n.RunningConfig()), "\n    apiServer:\n", "\n    apiServer:\n"+forms[i%2], 1)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		if _, err := env.tc.Apply(ctx, n.IP, talos.ApplyRequest{Config: []byte(cfg), Mode: talos.NoReboot}); err != nil {
			t.Fatal(err)
		}
		cancel()
		env.original[n.IP], env.originalDisk[n.IP] = n.RunningConfig(), n.PersistentConfig()
	}
	waitCrashLooping(t, env, env.cluster.ControlPlanes()...)
	return env
}

// waitCrashLooping waits until kube-apiserver on the nodes runs with the
// refused gate and crash-loops on it.
func waitCrashLooping(t *testing.T, env *engineEnv, nodes ...*talostest.Node) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for {
			n.RefreshPodStatus()
			st, err := env.tc.ReadAPIServerStatus(t.Context(), n.IP, n.Name)
			if err == nil && st.RestartCount >= 2 && !st.Running && talostest.FlagHas(n.Pod().Config, "feature-gates", "MultiCIDRServiceAllocator=false") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: kube-apiserver does not crash-loop on the refused gate: %+v %v", n.IP, st, err)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition, with a deadline
		}
	}
}

// recover with no flag: the diagnosis says flags-refused and switches the
// run to apiserver-flags; the gate goes, nothing else changes, kube-apiserver
// is ready; revert puts the configs back byte for byte.
func TestEngineRecoverRefusedFlags(t *testing.T) {
	env := newFlagsEnv(t)
	before := map[string][]byte{}
	for ip, b := range env.original {
		before[ip] = b
	}
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	for _, s := range []string{"preflight", "diagnose", "remove-flags", "wait-apiserver"} {
		wantStep(t, res, s, "ok")
	}
	for _, s := range []string{"disable", "restore", "delete-webhook"} {
		if hasStep(res.Begun, s) {
			t.Errorf("the admission step %s ran", s)
		}
	}
	if m := res.step("diagnose").Message; !strings.Contains(m, "verdict flags-refused") || !strings.Contains(m, "feature-gates:") {
		t.Errorf("diagnose: %s", m)
	}
	if m := res.step("remove-flags").Message; !strings.Contains(m, "MultiCIDRServiceAllocator=false") || !strings.Contains(m, "meant to stay") || !strings.Contains(m, "Omni") {
		t.Errorf("remove-flags: %s", m)
	}
	for _, n := range env.cluster.ControlPlanes() {
		got := n.RunningConfig()
		want := bytes.Replace(before[n.IP], []byte("MutatingAdmissionPolicy=true,MultiCIDRServiceAllocator=false"), []byte("MutatingAdmissionPolicy=true"), 1)
		want = bytes.Replace(want, []byte("                - MultiCIDRServiceAllocator=false\n"), nil, 1)
		if !bytes.Equal(got, want) || bytes.Equal(got, before[n.IP]) {
			t.Errorf("node %s: the config differs from before in more than the gate:\n%s", n.IP, got)
		}
		if p := n.Pod(); !p.Running || talostest.FlagHas(p.Config, "feature-gates", "MultiCIDRServiceAllocator=false") {
			t.Errorf("node %s: pod %+v", n.IP, p)
		}
	}
	rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	wantStep(t, rev, "revert-flags", "ok")
	if m := rev.step("revert-flags").Message; !strings.Contains(m, "byte-identical") {
		t.Errorf("revert-flags: %s", m)
	}
	env.assertConfigsOriginal()
}

// --dry-run plans the edit with the nodes' dry runs and changes nothing.
func TestEngineRecoverRefusedFlagsDryRun(t *testing.T) {
	env := newFlagsEnv(t)
	res, err := recoverRun(t, env, recoverRequest{DryRun: true})
	wantOutcome(t, res, err, "completed", false)
	if !res.DryRun {
		t.Error("not a dry run")
	}
	if m := res.step("remove-flags").Message; !strings.Contains(m, "dry run") {
		t.Errorf("remove-flags: %s", m)
	}
	env.assertConfigsOriginal()
}

// Interrupted at the edit's confirmation: resume follows the diagnosis's
// runbook (journaled with the diagnose step), not the one it started with.
func TestEngineResumeRefusedFlags(t *testing.T) {
	env := newFlagsEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, _ := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{begin: func(s string) {
		if s == "remove-flags" {
			cancel()
		}
	}}})
	if first.Outcome != "aborted" {
		t.Fatalf("first run: %s", first.Outcome)
	}
	env.assertConfigsOriginal()
	res, err := resumeRun(t, env, first.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	wantStep(t, res, "remove-flags", "ok") // with the flags main's decision named: the step names none
	if hasStep(res.Begun, "disable") {
		t.Error("resume ran the admission runbook's steps")
	}
}

// Killed while the edit was being applied: the apply record, journaled
// before any node changed, holds the old values; one node had the gate
// taken out, the other not yet. Resume finishes that one; revert puts both
// back byte for byte.
func TestEngineResumeRefusedFlagsAfterKill(t *testing.T) {
	env := newFlagsEnv(t)
	first, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, first, err, "completed", false)
	simulateKillAfter(t, env, first.Incident, "apply", "remove-flags")
	n := env.cluster.ControlPlanes()[1]
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := env.tc.Apply(ctx, n.IP, talos.ApplyRequest{Config: env.original[n.IP], Mode: talos.NoReboot}); err != nil {
		t.Fatal(err) // the second node never got its edit
	}
	waitCrashLooping(t, env, n)

	res, err := resumeRun(t, env, first.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	if s := res.step("remove-flags"); s.Outcome != "ok" || !strings.Contains(s.Message, "on 1 node(s)") {
		t.Errorf("remove-flags on resume: %+v, want the one node left", s)
	}
	if p := n.Pod(); !p.Running || talostest.FlagHas(p.Config, "feature-gates", "MultiCIDRServiceAllocator=false") {
		t.Errorf("node %s: pod %+v", n.IP, p)
	}
	rev, err := revertRun(t, env, first.Incident, false, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	if m := rev.step("revert-flags").Message; !strings.Contains(m, "on 2 node(s)") || !strings.Contains(m, "byte-identical") {
		t.Errorf("revert-flags: %s", m)
	}
	env.assertConfigsOriginal()
}

// The flags steps through the one loop (issue 20's proof): recover dry and
// declined at the edit, resume of that declined incident, and revert of a
// real recovery, dry and declined: nothing changes, and the exit codes are
// the documented ones.
func TestLoopFlagsDryRunAndDecline(t *testing.T) {
	env := newFlagsEnv(t)
	checkLoopCase(t, env, loopCase{name: "recover (flags-refused)", declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
		res, err := recoverFull(t, env, recoverRequest{DryRun: dry, Hooks: h})
		if dry && err == nil && (len(res.Steps) != 4 || res.Steps[2].Name != "remove-flags") {
			t.Errorf("the dry run walked %+v, want apiserver-flags's 4 steps", res.Steps)
		}
		return res, err
	}})
	declinedRun, err := recoverFull(t, env, recoverRequest{Hooks: declineAll()})
	if failure.Code(err) != int(failure.Declined) {
		t.Fatalf("declined: exit %d: %v", failure.Code(err), err)
	}
	checkLoopCase(t, env, loopCase{name: "resume (flags-refused)", existing: true, declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
		return recovery.Resume(t.Context(), env.tc, env.state(), env.effects(dry), newTestUI(t, h), recovery.IncidentOptions{ID: declinedRun.Incident})
	}})
	env.assertConfigsOriginal()

	done, err := recoverFull(t, env, recoverRequest{})
	if err != nil || done.Outcome != "completed" {
		t.Fatalf("recover: %v %+v", err, done)
	}
	checkLoopCase(t, env, loopCase{name: "revert (flags)", existing: true, declined: 8, run: func(dry bool, h engineHooks) (*recovery.RecoverResult, error) {
		return recovery.Revert(t.Context(), env.tc, env.state(), env.effects(dry), newTestUI(t, h), recovery.IncidentOptions{ID: done.Incident, Etcd: env.etcdOptions()})
	}})
	for _, n := range env.cluster.ControlPlanes() {
		if talostest.FlagHas(n.Pod().Config, "feature-gates", "MultiCIDRServiceAllocator=false") {
			t.Errorf("node %s: the gate is back after a revert that was only dry or declined", n.IP)
		}
	}
}

// An incident journaled by main before each type owned its decision (the
// decision's fields laid out by main's Decision: "plugins": null, "flags"
// beside the verdict) still resumes, the flags its diagnosis named taken
// out, and reverts byte for byte.
func TestEngineResumeAndRevertJournalOfSharedDecision(t *testing.T) {
	env := newFlagsEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, _ := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{begin: func(s string) {
		if s == "remove-flags" {
			cancel()
		}
	}}})
	if first.Outcome != "aborted" {
		t.Fatalf("first run: %s", first.Outcome)
	}
	rewriteDecisionAsMain(t, filepath.Join(incident(t, env, first.Incident).Dir, "journal.jsonl"))

	res, err := resumeRun(t, env, first.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	wantStep(t, res, "remove-flags", "ok") // with the flags main's decision named: the step names none
	if hasStep(res.Begun, "disable") {
		t.Error("resume ran the admission runbook's steps")
	}
	for _, n := range env.cluster.ControlPlanes() {
		if p := n.Pod(); !p.Running || talostest.FlagHas(p.Config, "feature-gates", "MultiCIDRServiceAllocator=false") {
			t.Errorf("node %s: pod %+v", n.IP, p)
		}
	}
	rev, err := revertRun(t, env, first.Incident, false, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	if m := rev.step("revert-flags").Message; !strings.Contains(m, "byte-identical") {
		t.Errorf("revert-flags: %s", m)
	}
	env.assertConfigsOriginal()
}

// mainDecision is how main (before issue 36, item 2) wrote a decision.
type mainDecision struct {
	Verdict  string            `json:"verdict"`
	Type     string            `json:"type,omitempty"`
	Plugins  []string          `json:"plugins"`
	Reasons  []string          `json:"reasons,omitempty"`
	Runbook  string            `json:"runbook,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
	Flags    []string          `json:"flags,omitempty"`
	Lost     []json.RawMessage `json:"lost,omitempty"`
	Source   string            `json:"source,omitempty"`
	Steps    []json.RawMessage `json:"steps,omitempty"`
}

// rewriteDecisionAsMain lays the journal's decision out as main did.
func rewriteDecisionAsMain(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	found := false
	for i, l := range lines {
		var e map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		if string(e["kind"]) != `"end"` || string(e["action"]) != `"diagnose"` {
			continue
		}
		var data map[string]json.RawMessage
		if err := json.Unmarshal(e["data"], &data); err != nil {
			t.Fatal(err)
		}
		var old mainDecision
		if err := json.Unmarshal(data["decision"], &old); err != nil {
			t.Fatal(err)
		}
		if len(old.Flags) == 0 {
			t.Fatalf("the decision names no flag: %s", data["decision"])
		}
		b, err := json.Marshal(old)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(b, data["decision"]) || !strings.Contains(string(b), `"plugins":null`) {
			t.Fatalf("main's layout %s is the same as today's", b)
		}
		data["decision"] = b
		if e["data"], err = json.Marshal(data); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		lines[i], found = string(out), true
	}
	if !found {
		t.Fatal("no diagnose end record")
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
