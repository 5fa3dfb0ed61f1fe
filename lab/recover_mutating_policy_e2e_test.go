package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
)

const (
	mutatingPolicyKey        = "/registry/mutatingadmissionpolicies/" + MutatingPolicy
	mutatingPolicyBindingKey = "/registry/mutatingadmissionpolicybindings/" + MutatingPolicyBinding
)

// The mutating-policy-servicecidr scenario, as an engineer meets it:
// `breakglass diagnose` names the policy and the plugin, and `breakglass
// recover` with nothing but the answer to its questions (--yes) turns the
// MutatingAdmissionPolicy plugin off, waits for the start-up, and puts the
// flags back: ready with the plugin on, configs byte-identical, the policy
// and its binding kept, still mutating.
func TestRecoverMutatingPolicy(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuidedWith(t, 1, func(ctx context.Context, l *Lab) error {
		_, err := RunScenario(ctx, l, ScenarioMutatingPolicy, NewTimeline(testWriter{t}))
		return err
	}, mutatingPolicyKey, mutatingPolicyBindingKey)
	ctx := context.Background()

	r := g.run("", append([]string{"diagnose", "-o", "json"}, g.etcdFlags()...)...)
	if r.code != 21 {
		t.Fatalf("diagnose: exit %d, want 21 (admission deadlock)\n%s", r.code, r.stderr)
	}
	var rep diagnose.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("diagnose: %s; plugins %+v; next %v", rep.Summary, rep.Plugins, rep.Next)
	if got := rep.PluginNames(); !slices.Equal(got, []string{"MutatingAdmissionPolicy"}) {
		t.Errorf("diagnose names plugins %v, want [MutatingAdmissionPolicy]", got)
	}
	if !strings.Contains(r.stdout, MutatingPolicy) {
		t.Errorf("diagnose does not name the policy %s", MutatingPolicy)
	}
	g.unchanged("after diagnose")

	r = g.run("", append([]string{"recover", "--yes", "-o", "json"}, g.etcdFlags()...)...)
	t.Logf("recover stderr:\n%s", r.stderr)
	if r.code != 0 {
		t.Fatalf("recover --yes: exit %d", r.code)
	}
	res := decodeResult(t, r.stdout)
	if res.Outcome != "completed" || res.Decision == nil || !slices.Equal(decided(&res), []string{"MutatingAdmissionPolicy"}) {
		t.Errorf("outcome %q, decision %+v", res.Outcome, res.Decision)
	}
	health, err := recovery.CheckHealth(ctx, g.tc)
	if err != nil {
		t.Fatal(err)
	}
	final := configHashes(t, ctx, g.tc, g.l.Nodes())
	for _, h := range health {
		if !h.Ready {
			t.Errorf("node %s not ready after recovery: %s", h.Node, h.Summary())
		}
		if final[h.Node] != g.orig[h.Node] {
			t.Errorf("node %s: config not byte-identical after recovery", h.Node)
		}
		pod, err := g.tc.ReadAPIServerPod(ctx, h.Node)
		if err != nil {
			t.Fatal(err)
		}
		if v := pod.DisabledPlugins(); len(v) > 0 {
			t.Errorf("node %s: kube-apiserver still runs with --disable-admission-plugins=%v", h.Node, v)
		}
	}
	g.mustHaveKeys(mutatingPolicyKey, mutatingPolicyBindingKey, "/registry/servicecidrs/kubernetes")
	g.lockFree("after recovery")

	// The plugin is on again: a labelled ServiceCIDR gets the team label.
	kube, err := g.l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct{ Labels map[string]string }
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		// The policy cache may lag the restart by a moment: try again, under a new name.
		cidr := map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
			"metadata": map[string]any{"name": fmt.Sprintf("labelled-%d", i), "labels": map[string]string{"owner": "lab"}},
			"spec":     map[string]any{"cidrs": []string{fmt.Sprintf("10.2.%d.0/24", i%250)}}}
		err := kube.Do(ctx, "POST", "/apis/networking.k8s.io/v1/servicecidrs", cidr, &got)
		if err == nil && got.Metadata.Labels["team"] == "platform" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a labelled ServiceCIDR is not mutated by the policy after the restore: labels %v, %v", got.Metadata.Labels, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
