package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// What an on-call engineer types, on the lab's own Kyverno-like scenario,
// with no expert flag (the lab's etcd is not on 2379, hence its endpoints):
// a name that is not there changes nothing; then the mutating
// configuration named by name, no --plugins, no --runbook: the diagnosis
// turns both webhook plugins off, and the object of the other kind is found.
func TestRecoverAsTyped(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuided(t, 3)

	bad := g.run("", append([]string{"recover", "--yes", "--delete", "no-such-object"}, g.etcdFlags()...)...)
	if bad.code != 2 {
		t.Errorf("recover --delete no-such-object: exit %d, want 2\n%s", bad.code, bad.stderr)
	}
	for _, want := range []string{"no-such-object", MutatingWebhookConfig, ValidatingWebhookConfig} {
		if !strings.Contains(bad.stderr+bad.stdout, want) {
			t.Errorf("the refusal does not name %q (the names present):\n%s\n%s", want, bad.stdout, bad.stderr)
		}
	}
	g.unchanged("after recover --delete no-such-object")

	before := g.incidents()
	r := g.run("", append([]string{"recover", "--yes", "-o", "json", "--delete", MutatingWebhookConfig}, g.etcdFlags()...)...)
	t.Logf("recover stderr:\n%s", r.stderr)
	if r.code != 0 {
		t.Fatalf("recover --yes --delete %s: exit %d", MutatingWebhookConfig, r.code)
	}
	res := decodeResult(t, r.stdout)
	if res.Outcome != "completed" {
		t.Errorf("outcome %q, want completed", res.Outcome)
	}
	want := []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}
	if res.Decision == nil || !slices.Equal(decided(&res), want) {
		t.Errorf("decision %+v, want plugins %v", res.Decision, want)
	}
	for _, s := range res.Steps {
		if s.Outcome != recovery.OutcomeOK {
			t.Errorf("step %s: %s (%s), want ok", s.Name, s.Outcome, s.Message)
		}
	}
	if !strings.Contains(r.stderr, "Plan from the diagnosis") || !strings.Contains(r.stderr, "MutatingAdmissionWebhook: ") {
		t.Errorf("the plan does not say why each plugin is in it:\n%s", r.stderr)
	}
	id := g.newIncident(before)
	g.recovered(MutatingWebhookConfig, g.journaledBackup(id))
}

// `breakglass recover --yes`, nothing else, on one node: it completes.
func TestRecoverNoFlags(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuided(t, 1)
	r := g.run("", append([]string{"recover", "--yes", "-o", "json"}, g.etcdFlags()...)...)
	t.Logf("recover stderr:\n%s", r.stderr)
	if r.code != 0 {
		t.Fatalf("recover --yes: exit %d", r.code)
	}
	res := decodeResult(t, r.stdout)
	if res.Outcome != "completed" || res.Decision == nil || len(decided(&res)) != 2 {
		t.Errorf("outcome %q, decision %+v", res.Outcome, res.Decision)
	}
	ctx := context.Background()
	final := configHashes(t, ctx, g.tc, g.l.Nodes())
	for _, ip := range g.l.Nodes() {
		if final[ip] != g.orig[ip] {
			t.Errorf("node %s: config not byte-identical after recovery", ip)
		}
	}
	g.mustHaveKeys(g.keys...) // nothing was named: nothing removed
	g.wantReady("after recovery")
}

// A kube-apiserver that exits on its flags (a plugin both enabled and
// disabled) is not an admission deadlock: recover changes nothing and
// exits with diagnose's code for another failure (22).
func TestRecoverNotADeadlock(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuidedWith(t, 1, func(ctx context.Context, l *Lab) error {
		if err := l.WaitReady(ctx, 3*time.Minute); err != nil {
			return err
		}
		tc, err := l.TalosClient(ctx)
		if err != nil {
			return err
		}
		defer tc.Close()
		for _, ip := range l.Nodes() {
			if err := applyAPIServerArgs(ctx, tc, ip, map[string]string{"enable-admission-plugins": "ValidatingAdmissionWebhook", "disable-admission-plugins": "ValidatingAdmissionWebhook"}); err != nil {
				return err
			}
		}
		return waitCrashLoop(ctx, tc, l)
	})
	r := g.run("", append([]string{"recover", "--yes"}, g.etcdFlags()...)...)
	if r.code != 22 {
		t.Errorf("recover on a bad flag: exit %d, want 22\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "not an admission deadlock, nothing was changed") {
		t.Errorf("the stop does not say so:\n%s", r.stderr)
	}
	g.unchanged("after recover on a bad flag")
}

// waitCrashLoop waits until every node's kube-apiserver container of the
// new pod has exited at least once (the kubelet's poll and the old pod's
// shutdown come first).
func waitCrashLoop(ctx context.Context, tc *talos.Client, l *Lab) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for i, ip := range l.Nodes() {
		name := l.Cluster.Nodes[i].Name
		for {
			st, err := tc.ReadAPIServerStatus(ctx, ip, name)
			if err == nil && st.RestartCount >= 1 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %s: kube-apiserver did not exit on its flags: %+v (%v)", ip, st, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// The engineer insists on one plugin (--plugins ValidatingAdmissionWebhook)
// though the diagnosis says the mutating webhook blocks start-up too: the
// plan warns, and once the new flags run, the wait sees the mutating webhook
// still refusing the start-up writes and stops at once (exit 7) with the
// command that fixes it, instead of waiting out its timeout. That command,
// then resume, finish the recovery.
func TestRecoverPersistingDeadlock(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuided(t, 1)
	t0 := time.Now()
	r := g.run("", append([]string{"recover", "--yes", "--plugins", "ValidatingAdmissionWebhook"}, g.etcdFlags()...)...)
	took := time.Since(t0)
	if r.code != 7 {
		t.Fatalf("recover --plugins ValidatingAdmissionWebhook: exit %d, want 7\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"WARNING: the diagnosis says MutatingAdmissionWebhook must be off too",
		"the deadlock persists with the new flags: MutatingAdmissionWebhook still on",
		"hint: turn it off too (restore undoes both): breakglass admission disable --plugins MutatingAdmissionWebhook",
		"hint: then continue the recovery: breakglass resume ",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("recover does not say %q:\n%s", want, r.stderr)
		}
	}
	// the wait step's own timeout is 5 minutes: it stopped long before
	t.Logf("stopped after %s", took.Round(time.Second))
	if took > 3*time.Minute {
		t.Errorf("took %s: the persisting deadlock was not noticed early", took)
	}

	if d := g.run("", "admission", "disable", "--plugins", "MutatingAdmissionWebhook", "--yes"); d.code != 0 {
		t.Fatalf("the hinted admission disable: exit %d\n%s", d.code, d.stderr)
	}
	res := g.run("", "resume", "--yes", "-o", "json") // resume reaches etcd as the incident did
	if res.code != 0 {
		t.Fatalf("resume: exit %d\n%s", res.code, res.stderr)
	}
	if out := decodeResult(t, res.stdout); out.Outcome != "completed" {
		t.Errorf("resume: outcome %q", out.Outcome)
	}
	final := configHashes(t, context.Background(), g.tc, g.l.Nodes())
	for _, ip := range g.l.Nodes() {
		if final[ip] != g.orig[ip] {
			t.Errorf("node %s: config not byte-identical after the recovery (restore undoes both disables)", ip)
		}
	}
}

// A step asked for by name is never optional: when the object to remove is
// gone by the time the delete step runs (someone removed it meanwhile), the
// run still puts the plugins back, then ends as a partial failure (exit 5)
// naming what is left undone and the command that finishes it.
func TestRecoverRequestedDeleteFails(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuided(t, 1)
	before := g.incidents()
	p := g.start(nil, append([]string{"recover", "--yes", "-o", "json", "--delete", MutatingWebhookConfig}, g.etcdFlags()...)...)
	g.waitDisableBegins(p, before)
	if _, err := g.l.kv.Delete(context.Background(), objectKey(MutatingWebhookConfig)); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t, 5*time.Minute)
	t.Logf("recover stderr:\n%s", p.errOut.String())
	if code != 5 {
		t.Fatalf("exit %d, want 5 (partial)", code)
	}
	res := decodeResult(t, p.out.String())
	if res.Outcome != "partial" || len(res.Undone) != 1 || !strings.Contains(res.Undone[0], "finish it with: breakglass etcd delete --kind all "+MutatingWebhookConfig) {
		t.Errorf("outcome %q, undone %q", res.Outcome, res.Undone)
	}
	final := configHashes(t, context.Background(), g.tc, g.l.Nodes())
	for _, ip := range g.l.Nodes() {
		if final[ip] != g.orig[ip] {
			t.Errorf("node %s: the plugins were not put back after the failed delete", ip)
		}
	}
}
