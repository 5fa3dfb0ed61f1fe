package lab

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The lab's Kyverno-like catch-all webhooks on the incident's upgrade,
// replayed on real binaries: as given it deadlocks, with the fix `audit
// --fix` prints it starts, and the audit predicted both.
func TestReplayKyvernoLike(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	replayKyvernoLike(t, OldVersion, NewVersion, OutcomeDeadlock)
}

// The same on the newest pair the lab builds: 1.36 already has its
// ServiceCIDR and IPAddresses, but 1.37 updates bootstrap RBAC roles through
// the catch-all mutating webhook, and the post-start hook gives up.
func TestReplayNewestPair(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	replayKyvernoLike(t, "v1.36.3", "v1.37.2", OutcomeDeadlock)
}

// replayKyvernoLike replays the lab's webhooks from -> to, and again with
// the fix. want is the outcome as given, or "" where the replay decides
// and only the audit's agreement is checked.
func replayKyvernoLike(t *testing.T, from, to, want string) {
	bin := needBinaries(t, from, to)
	data, err := os.ReadFile("testdata/kyverno-like.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Replay(ctx, ReplayOptions{From: from, To: to, Sources: []ReplaySource{{Name: "kyverno-like.yaml", Data: data}},
		Fix: true, KubeBinDir: bin, FirstIP: labFirstIP(), Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	asGiven, fixed := rep.Runs[0], rep.Runs[1]
	t.Logf("as given: %s in %s (exited %v: %s), refusals %+v; with the fix: %s in %s", asGiven.Outcome, asGiven.Elapsed, asGiven.Exited, asGiven.ExitReason, asGiven.Refusals, fixed.Outcome, fixed.Elapsed)
	if !asGiven.Agrees {
		t.Errorf("as given: %s, but audit predicted %+v: %s", asGiven.Outcome, asGiven.Prediction, asGiven.Mismatch)
	}
	if want == "" {
		t.Logf("as given %s -> %s: %s (the replay decides)", from, to, asGiven.Outcome)
	} else {
		checkKyvernoLikeDeadlock(t, asGiven)
	}
	if fixed.Outcome != OutcomeStarts || len(fixed.Refusals) != 0 {
		t.Errorf("with the fix: %s, refusals %+v, failing %v; want starts and none", fixed.Outcome, fixed.Refusals, fixed.FailingChecks)
	}
	if !fixed.Agrees {
		t.Errorf("with the fix: %s", fixed.Mismatch)
	}
	if rep.Outcome != OutcomeStarts || rep.Err() != nil {
		t.Errorf("report: %s, %v; the fixed run decides", rep.Outcome, rep.Err())
	}
}

// checkKyvernoLikeDeadlock: the deadlock, refused by the mutating webhook.
func checkKyvernoLikeDeadlock(t *testing.T, asGiven *ReplayRun) {
	t.Helper()
	if asGiven.Outcome != OutcomeDeadlock || asGiven.Ready {
		t.Errorf("as given: %s, want deadlock", asGiven.Outcome)
	}
	// Mutating webhooks are called first: the catch-all mutating one fails
	// closed and the validating one is never reached.
	if !slices.ContainsFunc(asGiven.Refusals, func(r Refusal) bool {
		return r.Kind == "MutatingWebhookConfiguration" && r.Configuration == "kyverno-resource-mutating-webhook-cfg" && r.Webhook == "mutate.kyverno.svc-fail" && r.Count > 0
	}) {
		t.Errorf("as given: the mutating webhook's refusals are not counted: %+v", asGiven.Refusals)
	}
	if asGiven.Exited && !strings.Contains(asGiven.ExitReason, "PostStartHook") {
		t.Errorf("as given: exit reason %q does not name the post-start hook that gave up", asGiven.ExitReason)
	}
	if asGiven.Prediction.Outcome != OutcomeDeadlock {
		t.Errorf("as given: audit predicted %+v", asGiven.Prediction)
	}
}

// A ValidatingAdmissionPolicy that refuses the default ServiceCIDR: the
// upgrade deadlocks with no webhook at all, the audit's policy fix lets it
// start, and the audit predicted both.
func TestReplayPolicy(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	bin := needBinaries(t)
	data, err := os.ReadFile("testdata/deny-servicecidr-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Replay(ctx, ReplayOptions{From: OldVersion, To: NewVersion, Sources: []ReplaySource{{Name: "deny-servicecidr-policy.yaml", Data: data}},
		Fix: true, KubeBinDir: bin, FirstIP: labFirstIP(), Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	asGiven, fixed := rep.Runs[0], rep.Runs[1]
	t.Logf("as given: %s in %s (exited %v: %s, failing %v); with the fix: %s in %s", asGiven.Outcome, asGiven.Elapsed, asGiven.Exited, asGiven.ExitReason, asGiven.FailingChecks, fixed.Outcome, fixed.Elapsed)
	if asGiven.Outcome != OutcomeDeadlock || !asGiven.Agrees {
		t.Errorf("as given: %s, prediction %+v (%s); want deadlock, predicted", asGiven.Outcome, asGiven.Prediction, asGiven.Mismatch)
	}
	if fixed.Outcome != OutcomeStarts || !fixed.Agrees {
		t.Errorf("with the fix: %s, prediction %+v (%s); want starts, predicted", fixed.Outcome, fixed.Prediction, fixed.Mismatch)
	}
}

// The mutating-policy scenario's objects, replayed with the extraArgs that
// serve their API on both versions (--apiserver-arg): the upgrade
// deadlocks, the audit's policy fix lets it start, and the audit
// predicted both.
func TestReplayMutatingPolicy(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	bin := needBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Replay(ctx, ReplayOptions{From: OldVersion, To: NewVersion, Sources: []ReplaySource{{Name: "mutating-policy.yaml", Data: MutatingPolicyManifest}},
		APIServerArgs: MutatingPolicyArgs, Fix: true, KubeBinDir: bin, FirstIP: labFirstIP(), Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	asGiven, fixed := rep.Runs[0], rep.Runs[1]
	t.Logf("as given: %s in %s (exited %v: %s, failing %v, installed %v); with the fix: %s in %s", asGiven.Outcome, asGiven.Elapsed, asGiven.Exited, asGiven.ExitReason, asGiven.FailingChecks, asGiven.Installed, fixed.Outcome, fixed.Elapsed)
	if asGiven.Installed["MutatingAdmissionPolicy"] != 1 || asGiven.Installed["MutatingAdmissionPolicyBinding"] != 1 {
		t.Errorf("installed %v, want the policy and its binding", asGiven.Installed)
	}
	if asGiven.Outcome != OutcomeDeadlock || !asGiven.Agrees {
		t.Errorf("as given: %s, prediction %+v (%s); want deadlock, predicted", asGiven.Outcome, asGiven.Prediction, asGiven.Mismatch)
	}
	if fixed.Outcome != OutcomeStarts || !fixed.Agrees {
		t.Errorf("with the fix: %s, prediction %+v (%s); want starts, predicted", fixed.Outcome, fixed.Prediction, fixed.Mismatch)
	}
}
