package audit

import (
	"fmt"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/startupwrites"
)

// The pairs talosctl upgrade-k8s accepts, one minor at a time, and the
// lab's incident: each recorded from its own binaries.
var recordedPairs = [][2]string{{"1.32", "1.33"}, {"1.33", "1.34"}, {"1.34", "1.35"}, {"1.35", "1.36"}, {"1.36", "1.37"}, {"1.32", "1.34"}}

func TestEveryPairRecorded(t *testing.T) {
	all, err := startupwrites.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(recordedPairs) {
		t.Errorf("%d recordings, want %d", len(all), len(recordedPairs))
	}
	for _, p := range recordedPairs {
		pair, ok := RecordedPair(p[0], p[1])
		if !ok {
			t.Errorf("%s -> %s: not recorded", p[0], p[1])
			continue
		}
		if !strings.HasPrefix(pair, "v"+p[0]+".") || !strings.Contains(pair, " -> v"+p[1]+".") {
			t.Errorf("%s -> %s: recorded as %s", p[0], p[1], pair)
		}
		reqs, err := StartupRequests(p[0], p[1])
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := startupwrites.For(minorOf(t, p[0]), minorOf(t, p[1]))
		recorded := 0
		for _, r := range reqs {
			if r.Recorded != "" {
				recorded++
				if r.Recorded != pair {
					t.Errorf("%s: %s says recorded on %s", pair, r.String(), r.Recorded)
				}
			}
		}
		if recorded != len(rec.Writes) {
			t.Errorf("%s: %d recorded requests for %d recorded writes", pair, recorded, len(rec.Writes))
		}
	}
	// A restart, and a pair that skips a minor (but the lab's), are the model's.
	for _, p := range [][2]string{{"1.34", "1.34"}, {"1.33", "1.35"}} {
		if _, ok := RecordedPair(p[0], p[1]); ok {
			t.Errorf("%s -> %s: recorded", p[0], p[1])
		}
		reqs, _ := StartupRequests(p[0], p[1])
		for _, r := range reqs {
			if r.Recorded != "" {
				t.Errorf("%s -> %s: %s recorded", p[0], p[1], r.ID)
			}
		}
	}
}

func minorOf(t *testing.T, v string) int {
	t.Helper()
	var m int
	if _, err := fmt.Sscanf(v, "1.%d", &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Every write the binaries sent is one the catalogue describes: the same
// identity, scope, options, field manager and labels (what says what its
// refusal does: effect, hook, deadline).
func TestCatalogueDescribesEveryRecordedWrite(t *testing.T) {
	all, err := startupwrites.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range all {
		model, err := ModelledStartupRequests(rec.From, rec.To)
		if err != nil {
			t.Fatal(err)
		}
		for _, problem := range Uncovered(model, rec.Writes) {
			t.Errorf("%s -> %s: %s", rec.From, rec.To, problem)
		}
		if _, err := recordedRequests(rec); err != nil {
			t.Error(err)
		}
	}
}

// webhookOn is a fail-closed validating webhook on every operation of the
// resources, with its backend unreachable.
func webhookOn(name string, groups, resources []string) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: %s}
webhooks:
- name: %s.example.com
  clientConfig: {url: "https://127.0.0.1:1/validate"}
  rules:
  - operations: ["*"]
    apiGroups: [%s]
    apiVersions: ["*"]
    resources: [%s]
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
`, name, name, quoteAll(groups), quoteAll(resources))
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// The model says deadlock for writes a minor never makes on that upgrade;
// the recording does not: these were the gate's false alarms. And a write
// the target does make is still a deadlock.
func TestRecordedPairsAgainstTheModel(t *testing.T) {
	apf := webhookOn("apf-guard", []string{"flowcontrol.apiserver.k8s.io"}, []string{"flowschemas", "prioritylevelconfigurations"})
	apiservices := webhookOn("apiservice-guard", []string{"apiregistration.k8s.io"}, []string{"apiservices"})
	roles := webhookOn("role-guard", []string{"rbac.authorization.k8s.io"}, []string{"roles", "rolebindings"})
	clusterRoles := webhookOn("clusterrole-guard", []string{"rbac.authorization.k8s.io"}, []string{"clusterroles"})
	bindings := webhookOn("binding-guard", []string{"rbac.authorization.k8s.io"}, []string{"clusterrolebindings"})
	serviceCIDRs := webhookOn("servicecidr-guard", []string{"networking.k8s.io"}, []string{"servicecidrs"})
	for _, tc := range []struct {
		from, to, doc     string
		recorded, modeled Risk
	}{
		// 1.35 writes no APF object, no APIService, no Role: it updates 3 ClusterRoles.
		{"1.34", "1.35", apf, RiskNone, RiskDeadlock},
		{"1.34", "1.35", apiservices, RiskNone, RiskDeadlock},
		{"1.34", "1.35", roles, RiskNone, RiskDeadlock},
		{"1.34", "1.35", bindings, RiskNone, RiskDeadlock},
		{"1.34", "1.35", clusterRoles, RiskDeadlock, RiskDeadlock},
		// 1.36 creates a ClusterRoleBinding, and no APIService.
		{"1.35", "1.36", bindings, RiskDeadlock, RiskDeadlock},
		{"1.35", "1.36", apiservices, RiskNone, RiskDeadlock},
		// 1.37 registers storagemigration.k8s.io/v1: a new APIService.
		{"1.36", "1.37", apiservices, RiskDeadlock, RiskDeadlock},
		{"1.36", "1.37", apf, RiskNone, RiskDeadlock},
		// 1.34 deletes two FlowSchemas 1.33 still had: APF's hook.
		{"1.33", "1.34", apf, RiskDeadlock, RiskDeadlock},
		// The default ServiceCIDR is created once, by the first 1.33+.
		{"1.32", "1.33", serviceCIDRs, RiskDeadlock, RiskDeadlock},
		{"1.33", "1.34", serviceCIDRs, RiskNone, RiskNone},
	} {
		cfgs, err := ParseNamed("webhook.yaml", []byte(tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		name := cfgs[0].Name()
		rec, err := Audit(cfgs, Options{FromVersion: tc.from, ToVersion: tc.to})
		if err != nil {
			t.Fatal(err)
		}
		mod, err := Audit(cfgs, Options{FromVersion: tc.from, ToVersion: tc.to, modelled: true})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Risk != tc.recorded || mod.Risk != tc.modeled {
			t.Errorf("%s -> %s, %s: recorded %s (want %s), modelled %s (want %s)", tc.from, tc.to, name, rec.Risk, tc.recorded, mod.Risk, tc.modeled)
		}
		for _, f := range rec.Findings {
			for _, b := range f.Blocks {
				if b.Fatal && b.Recorded == "" {
					t.Errorf("%s -> %s, %s: fatal %s not recorded", tc.from, tc.to, name, b.Request)
				}
			}
		}
	}
}
