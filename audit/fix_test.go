package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

func conditionsOf(c Configuration, i int) []admissionregistrationv1.MatchCondition {
	return c.matchConditions(i)
}

// withoutConditions drops every webhook's matchConditions, to compare the
// rest of a patched configuration with the original.
func withoutConditions(c Configuration) interface{} {
	c = c.deepCopy()
	if c.Policy != nil {
		return c.Policy.Name
	}
	if c.Validating != nil {
		for i := range c.Validating.Webhooks {
			c.Validating.Webhooks[i].MatchConditions = nil
		}
		return c.Validating
	}
	for i := range c.Mutating.Webhooks {
		c.Mutating.Webhooks[i].MatchConditions = nil
	}
	return c.Mutating
}

func TestFixIncident(t *testing.T) {
	orig := parseFile(t, "incident-kyverno-like.yaml")
	out, err := Fix(orig, FixStyle{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "a Kyverno-style catch-all") {
		t.Error("the input's comments were not kept")
	}
	patched, err := ParseWebhookConfigurations(out)
	if err != nil {
		t.Fatalf("patched manifest does not parse: %v\n%s", err, out)
	}
	if len(patched) != 1 {
		t.Fatalf("%d configurations", len(patched))
	}
	want := []admissionregistrationv1.MatchCondition{{Name: ExcludeAPIServerName, Expression: ExcludeAPIServerExpression}}
	if got := conditionsOf(patched[0], 0); !reflect.DeepEqual(got, want) {
		t.Fatalf("conditions %v", got)
	}
	if !reflect.DeepEqual(withoutConditions(patched[0]), withoutConditions(orig[0])) {
		t.Fatal("the fix changed more than matchConditions")
	}
	for _, opts := range []Options{{}, {IncludeNewCluster: true}, {KubernetesVersion: "1.32"}, {RuntimeConfig: []string{"networking.k8s.io/v1beta1"}}} {
		rep, err := Audit(patched, opts)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Risk != RiskNone {
			t.Errorf("patched webhook audits %s with %+v: %v", rep.Risk, opts, rep.Findings[0].Reasons)
		}
	}
	// Idempotent: fixing the fixed manifest adds nothing.
	plan, err := PlanFix(patched, FixStyle{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Changes) != 0 {
		t.Fatalf("second fix changed %v", plan.Changes)
	}
}

func TestFixKindExclusionsArePartial(t *testing.T) {
	plan, err := PlanFix(parseFile(t, "incident-kyverno-like.yaml"), FixStyle{Exclusion: ExcludeIncidentKinds})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Partial || len(plan.Changes) != 1 || len(plan.Changes[0].Added) != 2 {
		t.Fatalf("plan %+v", plan)
	}
	if plan.Changes[0].RiskAfter != RiskDeadlock {
		t.Fatalf("risk after %s", plan.Changes[0].RiskAfter)
	}
	f := plan.After.Findings[0]
	for _, b := range f.Blocks {
		if b.Resource == "servicecidrs" && b.Subresource == "" || b.Resource == "ipaddresses" {
			t.Errorf("still blocks %s", b.Request)
		}
	}
	notes := strings.Join(plan.Notes, "\n")
	for _, s := range []string{hookRBAC, "backend comes back", "also excluded", "servicecidrs extra-cidr by kubernetes-admin"} {
		if !strings.Contains(notes, s) {
			t.Errorf("notes lack %q:\n%s", s, notes)
		}
	}
	out, err := plan.Render()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "PARTIAL FIX") || !strings.Contains(string(out), `'!(request.kind.kind == "ServiceCIDR")'`) {
		t.Fatalf("rendered:\n%s", out)
	}
	// The incident's own manifest, already carrying the kinds: still partial, nothing to add.
	plan, err = PlanFix(parseFile(t, "incident-kind-exclusions.yaml"), FixStyle{Exclusion: ExcludeIncidentKinds})
	if err != nil || len(plan.Changes) != 0 || !plan.Partial {
		t.Fatalf("err %v, changes %v, partial %v", err, plan.Changes, plan.Partial)
	}
}

func TestFixEveryTestdataFile(t *testing.T) {
	for _, f := range testdataInputs() {
		cfgs := parseFile(t, filepath.Base(f))
		before, err := Audit(cfgs, Options{IncludeNewCluster: true})
		if err != nil {
			t.Fatal(err)
		}
		// All: every webhook gets the condition; ordinary requests must
		// match as before, and nothing may stay at risk.
		plan, err := PlanFix(cfgs, FixStyle{All: true, Audit: Options{IncludeNewCluster: true}})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if plan.After.Risk != RiskNone {
			t.Errorf("%s: after the fix: %s", f, plan.After.Risk)
		}
		out, err := plan.Render()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseNamed(f+" (fixed)", out)
		if err != nil {
			t.Fatalf("%s: fixed manifest does not parse: %v\n%s", f, err, out)
		}
		if len(again) != len(cfgs) {
			t.Fatalf("%s: %d configurations after the fix, %d before", f, len(again), len(cfgs))
		}
		for i := range cfgs {
			if !reflect.DeepEqual(withoutConditions(again[i]), withoutConditions(cfgs[i])) {
				t.Errorf("%s: configuration %d changed beyond matchConditions", f, i)
			}
		}
		// Only risky webhooks by default.
		plan, err = PlanFix(cfgs, FixStyle{Audit: Options{IncludeNewCluster: true}})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Changes) != len(before.Findings)-before.Count(RiskNone) {
			t.Errorf("%s: %d changes for %d risky webhooks", f, len(plan.Changes), len(before.Findings)-before.Count(RiskNone))
		}
	}
}

func TestFixNamesAndLimit(t *testing.T) {
	fail := admissionregistrationv1.Fail
	mk := func(conds ...admissionregistrationv1.MatchCondition) []Configuration {
		return []Configuration{{Kind: Validating, item: -1, Validating: &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: "w.example.com", FailurePolicy: &fail, MatchConditions: conds,
				Rules: []admissionregistrationv1.RuleWithOperations{rule([]string{"*"}, []string{"*"}, []string{"*"}, []string{"*"}, "")},
			}},
		}}}
	}
	taken := admissionregistrationv1.MatchCondition{Name: ExcludeAPIServerName, Expression: "true"}
	plan, err := PlanFix(mk(taken), FixStyle{})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.Changes[0].Added[0].Name; got != ExcludeAPIServerName+"-2" {
		t.Fatalf("name %q", got)
	}

	var many []admissionregistrationv1.MatchCondition
	for i := 0; i < maxMatchConditions; i++ {
		many = append(many, admissionregistrationv1.MatchCondition{Name: "c" + strconv.Itoa(i), Expression: "true"})
	}
	_, err = PlanFix(mk(many...), FixStyle{})
	var tm *TooManyConditionsError
	if !errors.As(err, &tm) || !errors.Is(err, ErrFixUnsafe) || tm.Existing != maxMatchConditions {
		t.Fatalf("err %v", err)
	}
	if _, err := PlanFix(mk(many[:maxMatchConditions-1]...), FixStyle{}); err != nil {
		t.Fatalf("63 + 1 conditions: %v", err)
	}
}

func TestOrdinaryRequestsCheck(t *testing.T) {
	cfgs := parseFile(t, "incident-kyverno-like.yaml")
	orig := cfgs[0].webhooks()[0]
	ok := cfgs[0].deepCopy()
	ok.setMatchConditions(0, []admissionregistrationv1.MatchCondition{{Name: "a", Expression: ExcludeAPIServerExpression}})
	if d := ordinaryDiffs(orig, ok.webhooks()[0], matchEnv{}); len(d) != 0 {
		t.Fatalf("username exclusion changes ordinary requests: %v", d)
	}
	// Excluding system:masters would also let cluster admins through: caught.
	bad := cfgs[0].deepCopy()
	bad.setMatchConditions(0, []admissionregistrationv1.MatchCondition{{Name: "a", Expression: "!('system:masters' in request.userInfo.groups)"}})
	d := ordinaryDiffs(orig, bad.webhooks()[0], matchEnv{})
	if len(d) == 0 || !strings.Contains(strings.Join(d, "\n"), "kubernetes-admin") {
		t.Fatalf("diffs %v", d)
	}
}

// applyJSONPatch applies the "test" and "add" operations the fix emits.
func applyJSONPatch(t *testing.T, doc interface{}, ops []PatchOp) interface{} {
	t.Helper()
	// at is the value the path's parts lead to from the document's root.
	at := func(parts []string) interface{} {
		node := doc
		for _, p := range parts {
			switch v := node.(type) {
			case map[string]interface{}:
				node = v[p]
			case []interface{}:
				i, _ := strconv.Atoi(p)
				node = v[i]
			}
		}
		return node
	}
	for _, op := range ops {
		parts := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		parent := at(parts[:len(parts)-1])
		last := parts[len(parts)-1]
		var value interface{}
		b, _ := json.Marshal(op.Value)
		json.Unmarshal(b, &value)
		m, ok := parent.(map[string]interface{})
		switch {
		case op.Op == "test":
			if !ok || !reflect.DeepEqual(m[last], value) {
				t.Fatalf("test %s failed: %v", op.Path, m[last])
			}
		case op.Op == "add" && last == "-":
			// parent is the list itself: set it in its own parent
			g := at(parts[:len(parts)-2]).(map[string]interface{})
			key := parts[len(parts)-2]
			g[key] = append(g[key].([]interface{}), value)
		case op.Op == "add":
			m[last] = value
		default:
			t.Fatalf("unexpected op %+v", op)
		}
	}
	return doc
}

// fixPatches is the patches Fix prints for a testdata file in a patch
// format, and the configurations they are for.
func fixPatches(t *testing.T, file string, style FixStyle) ([]Configuration, []ConfigurationPatch) {
	t.Helper()
	cfgs := parseFile(t, file)
	out, err := Fix(cfgs, style)
	if err != nil {
		t.Fatal(err)
	}
	var patches []ConfigurationPatch
	if err := json.Unmarshal(out, &patches); err != nil {
		t.Fatal(err)
	}
	return cfgs, patches
}

func TestFixJSONPatch(t *testing.T) {
	for _, file := range []string{"incident-kind-exclusions.yaml", "list.json", "request-namespace-condition.yaml"} {
		cfgs, patches := fixPatches(t, file, FixStyle{Format: FormatJSONPatch})
		var patched []Configuration
		for _, c := range cfgs {
			var doc interface{}
			b, _ := json.Marshal(map[bool]interface{}{true: c.Validating, false: c.Mutating}[c.Validating != nil])
			json.Unmarshal(b, &doc)
			for _, p := range patches {
				if p.Name == c.Name() && p.Kind == c.TypeName() {
					var ops []PatchOp
					if err := json.Unmarshal(p.Patch, &ops); err != nil || p.Type != "json" {
						t.Fatalf("patch %s: %v", p.Type, err)
					}
					doc = applyJSONPatch(t, doc, ops)
					if !strings.HasPrefix(p.Command, "kubectl patch "+strings.ToLower(p.Kind)+" ") {
						t.Errorf("command %q", p.Command)
					}
				}
			}
			b, _ = json.Marshal(doc)
			var obj map[string]interface{}
			json.Unmarshal(b, &obj)
			obj["apiVersion"], obj["kind"] = admissionGroupVersion, c.TypeName()
			b, _ = json.Marshal(obj)
			pc, err := ParseWebhookConfigurations(b)
			if err != nil {
				t.Fatal(err)
			}
			patched = append(patched, pc...)
		}
		rep, err := Audit(patched, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Risk != RiskNone {
			t.Errorf("%s: after the JSON patch: %s", file, rep.Risk)
		}
	}
}

// applyStrategic merges webhooks and their matchConditions by name, as the
// API server does for admissionregistration/v1.
func applyStrategic(t *testing.T, c Configuration, raw json.RawMessage) Configuration {
	t.Helper()
	var sp strategicPatch
	if err := json.Unmarshal(raw, &sp); err != nil {
		t.Fatal(err)
	}
	c = c.deepCopy()
	for _, pw := range sp.Webhooks {
		found := false
		for i, w := range c.webhooks() {
			if w.name != pw.Name {
				continue
			}
			found = true
			conds := c.matchConditions(i)
			for _, add := range pw.MatchConditions {
				replaced := false
				for j := range conds {
					if conds[j].Name == add.Name {
						conds[j], replaced = add, true
					}
				}
				if !replaced {
					conds = append(conds, add)
				}
			}
			c.setMatchConditions(i, conds)
		}
		if !found {
			t.Fatalf("patch names webhook %q that does not exist", pw.Name)
		}
	}
	return c
}

func TestFixStrategicPatch(t *testing.T) {
	for _, file := range []string{"incident-kind-exclusions.yaml", "list.json", "cert-manager.yaml", "slow-start.yaml"} {
		cfgs, patches := fixPatches(t, file, FixStyle{Format: FormatStrategicPatch, All: true})
		var patched []Configuration
		for _, c := range cfgs {
			for _, p := range patches {
				if p.Name == c.Name() && p.Kind == c.TypeName() {
					if p.Type != "strategic" || !strings.Contains(p.Command, "--type=strategic") {
						t.Errorf("%s: %s %s", file, p.Type, p.Command)
					}
					c = applyStrategic(t, c, p.Patch)
				}
			}
			patched = append(patched, c)
		}
		rep, err := Audit(patched, Options{IncludeNewCluster: true})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Risk != RiskNone {
			t.Errorf("%s: after the strategic patch: %s", file, rep.Risk)
		}
	}
}

func TestFixFromObjects(t *testing.T) {
	cfgs := parseFile(t, "list.json")
	objs, err := FromObjects(cfgs[0].Validating, cfgs[1].Mutating)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Fix(objs, FixStyle{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"resourceVersion", "managedFields", "uid:", "creationTimestamp"} {
		if strings.Contains(string(out), s) {
			t.Errorf("fixed manifest keeps server-set %s:\n%s", s, out)
		}
	}
	again, err := ParseWebhookConfigurations(out)
	if err != nil || len(again) != 2 {
		t.Fatalf("%v, %d configurations:\n%s", err, len(again), out)
	}
	rep, _ := Audit(again, Options{})
	if rep.Risk != RiskNone {
		t.Fatalf("risk %s", rep.Risk)
	}
	// The typed objects, for the API.
	plan, err := PlanFix(objs, FixStyle{})
	if err != nil {
		t.Fatal(err)
	}
	p := plan.Patched()
	if len(p) != 2 || len(p[0].Validating.Webhooks[0].MatchConditions) != 1 || len(p[1].Mutating.Webhooks[0].MatchConditions) != 1 {
		t.Fatalf("patched %+v", p)
	}
	p[0].Validating.Webhooks[0].MatchConditions = nil
	if len(plan.Patched()[0].Validating.Webhooks[0].MatchConditions) != 1 {
		t.Fatal("Patched returned shared objects")
	}
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := sigsyaml.Unmarshal([]byte(strings.Split(string(out), "---\n")[0]), &v); err != nil {
		t.Fatal(err)
	}
}

func ExampleFix() {
	cfgs, err := ParseWebhookConfigurations([]byte(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: policy
webhooks:
  - name: validate.policy.example.com
    admissionReviewVersions: ["v1"]
    sideEffects: None
    clientConfig:
      url: https://127.0.0.1:9443/validate
    rules:
      - apiGroups: ["*"]
        apiVersions: ["*"]
        resources: ["*"]
        operations: ["CREATE", "UPDATE"]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := Fix(cfgs, FixStyle{})
	if err != nil {
		fmt.Println(err)
		return
	}
	os.Stdout.Write(out)
	// Output:
	// # Patched by breakglass audit: matchConditions added to 1 webhook(s) (apiserver).
	// apiVersion: admissionregistration.k8s.io/v1
	// kind: ValidatingWebhookConfiguration
	// metadata:
	//   name: policy
	// webhooks:
	//   - name: validate.policy.example.com
	//     admissionReviewVersions: ["v1"]
	//     sideEffects: None
	//     clientConfig:
	//       url: https://127.0.0.1:9443/validate
	//     rules:
	//       - apiGroups: ["*"]
	//         apiVersions: ["*"]
	//         resources: ["*"]
	//         operations: ["CREATE", "UPDATE"]
	//     matchConditions:
	//       - name: breakglass-exclude-apiserver
	//         expression: "request.userInfo.username != 'system:apiserver'"
}
