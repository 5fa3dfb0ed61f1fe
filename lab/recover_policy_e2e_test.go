package lab

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery"
)

// A ValidatingAdmissionPolicy scenario, for the policy-deadlock runbook: a
// label policy over ServiceCIDRs, bound with Deny, installed on v1.32 (which
// creates no ServiceCIDR, so it is healthy), then the upgrade to v1.34: its
// first start cannot create the default ServiceCIDR, denied by the policy
// inside kube-apiserver itself, and it never becomes ready. No webhook, no
// backend to bring back: the policy plugin must be turned off.
const (
	denyPolicy  = "require-team-label"
	denyBinding = "require-team-label-binding"

	denyPolicyKey  = "/registry/validatingadmissionpolicies/" + denyPolicy
	denyBindingKey = "/registry/validatingadmissionpolicybindings/" + denyBinding
)

func installDenyingPolicy(ctx context.Context, kube *KubeClient) error {
	policy := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": denyPolicy},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []string{"networking.k8s.io"}, "apiVersions": []string{"*"},
				"operations": []string{"CREATE", "UPDATE"}, "resources": []string{"servicecidrs"},
			}}},
			"validations": []any{map[string]any{
				"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
				"message":    "every ServiceCIDR needs a team label",
			}},
		},
	}
	binding := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": denyBinding},
		"spec":     map[string]any{"policyName": denyPolicy, "validationActions": []string{"Deny"}},
	}
	if err := kube.Do(ctx, "POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", policy, nil); err != nil {
		return err
	}
	return kube.Do(ctx, "POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", binding, nil)
}

func policyScenario(t *testing.T) func(context.Context, *Lab) error {
	return func(ctx context.Context, l *Lab) error {
		tl := NewTimeline(testWriter{t})
		if err := tl.Step("kube-apiserver "+OldVersion+" ready", func() error { return l.WaitReady(ctx, 3*time.Minute) }); err != nil {
			return err
		}
		kube, err := l.Kube(ctx)
		if err != nil {
			return err
		}
		if err := tl.Step("install ValidatingAdmissionPolicy "+denyPolicy+" bound with Deny", func() error { return installDenyingPolicy(ctx, kube) }); err != nil {
			return err
		}
		if err := tl.Step("upgrade to "+NewVersion, func() error { return Upgrade(ctx, l, NewVersion) }); err != nil {
			return err
		}
		return tl.Step("deadlock observed", func() error {
			_, err := ObserveDeadlock(ctx, l, 3*time.Minute)
			return err
		})
	}
}

// TestRecoverPolicyDeadlock runs the policy-deadlock runbook on the
// ValidatingAdmissionPolicy scenario: first as a dry run (nothing changes),
// then for real with --delete of the binding: exit 0, ready with the
// ValidatingAdmissionPolicy plugin on again, configs byte-identical, the
// binding gone with its verified backup, the policy kept, the default
// ServiceCIDR created, the lock free.
func TestRecoverPolicyDeadlock(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuidedWith(t, 1, policyScenario(t), denyPolicyKey, denyBindingKey)
	ctx := context.Background()
	base := append([]string{"recover", "--runbook", "policy-deadlock", "-o", "json", "--delete", denyBinding}, g.etcdFlags()...)

	r := g.run("", append(base, "--dry-run")...)
	if r.code != 0 {
		t.Fatalf("policy-deadlock --dry-run: exit %d\n%s", r.code, r.stderr)
	}
	if res := decodeResult(t, r.stdout); !res.DryRun || res.Outcome != "completed" {
		t.Errorf("dry run: dryRun %v outcome %q", res.DryRun, res.Outcome)
	}
	g.unchanged("policy-deadlock dry run")
	if ok, _ := g.l.EtcdKeyExists(ctx, "/registry/servicecidrs/kubernetes"); ok {
		t.Fatal("the default ServiceCIDR exists: the scenario is not deadlocked")
	}

	r = g.run("", append(base, "--yes")...)
	t.Logf("recover --runbook policy-deadlock stderr:\n%s", r.stderr)
	if r.code != 0 {
		t.Fatalf("policy-deadlock: exit %d", r.code)
	}
	res := decodeResult(t, r.stdout)
	if res.Outcome != "completed" {
		t.Errorf("outcome %q", res.Outcome)
	}
	for _, s := range res.Steps {
		want := recovery.OutcomeOK
		if s.Name == "delete-policy" {
			want = recovery.OutcomeSkipped // no policy named: only the binding goes
		}
		if s.Outcome != want {
			t.Errorf("step %s: %s (%s), want %s", s.Name, s.Outcome, s.Message, want)
		}
	}
	if !strings.Contains(r.stderr, "ValidatingAdmissionPolicy") {
		t.Errorf("the run does not name the ValidatingAdmissionPolicy plugin")
	}

	health, err := recovery.CheckHealth(ctx, g.tc)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range health {
		if !h.Ready {
			t.Errorf("node %s not ready: %s", h.Node, h.Summary())
		}
	}
	final := configHashes(t, ctx, g.tc, g.l.Nodes())
	for _, ip := range g.l.Nodes() {
		if final[ip] != g.orig[ip] {
			t.Errorf("node %s: config not byte-identical after recovery", ip)
		}
		pod, err := g.tc.ReadAPIServerPod(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		if v := pod.DisabledPlugins(); len(v) > 0 {
			t.Errorf("node %s: kube-apiserver still runs with --disable-admission-plugins=%v", ip, v)
		}
		if rec, _ := g.st.LoadAdmission(g.l.Cluster.Name, ip); rec != nil {
			t.Errorf("node %s: state record left", ip)
		}
	}
	for key, want := range map[string]bool{denyBindingKey: false, denyPolicyKey: true, "/registry/servicecidrs/kubernetes": true} {
		if ok, err := g.l.EtcdKeyExists(ctx, key); err != nil || ok != want {
			t.Errorf("%s: exists %v (%v), want %v", key, ok, err, want)
		}
	}
	backup := g.journaledBackupOf(res.Incident, "delete-binding")
	b, err := etcd.ReadBackup(backup)
	if err != nil || len(b.Keys) != 1 || b.Keys[0].Key != denyBindingKey {
		t.Errorf("backup %s: %v, %+v", backup, err, b)
	}
	if filepath.Dir(backup) != filepath.Join(g.stateDir, "incidents", res.Incident) {
		t.Errorf("backup %s is not in the incident directory", backup)
	}
	g.lockFree("after recovery")
	g.timelineLists(res.Incident, g.runbookSteps("policy-deadlock"))

	// The plugin is on again: the policy, bound anew, is enforced.
	kube, err := g.l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bind := map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": denyBinding + "-again"},
		"spec":     map[string]any{"policyName": denyPolicy, "validationActions": []string{"Deny"}}}
	if err := kube.Do(ctx, "POST", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", bind, nil); err != nil {
		t.Fatal(err)
	}
	cidr := map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
		"metadata": map[string]any{"name": "unlabelled"}, "spec": map[string]any{"cidrs": []string{"10.2.0.0/24"}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := kube.Do(ctx, "POST", "/apis/networking.k8s.io/v1/servicecidrs", cidr, nil)
		if err != nil && strings.Contains(err.Error(), "team label") {
			break
		}
		if err == nil {
			_ = kube.Do(ctx, "DELETE", "/apis/networking.k8s.io/v1/servicecidrs/unlabelled", nil, nil)
		}
		if time.Now().After(deadline) {
			raw, _ := json.Marshal(cidr)
			t.Fatalf("an unlabelled ServiceCIDR %s is not denied by the policy after the restore: %v", raw, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
