package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestPolicyFix(t *testing.T) {
	in := vap(`["*"]`, `  validations:
  - expression: "false"`, actionsDeny) + "---\n" + mapolicy("v1beta1", `  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels/team", value: "a"}]'`)
	cfgs := parseYAML(t, in)
	for _, format := range []Format{FormatManifest, FormatJSONPatch, FormatStrategicPatch} {
		plan, err := PlanFix(cfgs, FixStyle{Format: format})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if plan.Before.Risk != RiskDeadlock || plan.After.Risk != RiskNone || len(plan.Changes) != 2 {
			t.Fatalf("%s: before %s, after %s, %d changes", format, plan.Before.Risk, plan.After.Risk, len(plan.Changes))
		}
		for _, ch := range plan.Changes {
			if ch.RiskBefore != RiskDeadlock || ch.RiskAfter != RiskNone || ch.Added[0].Expression != ExcludeAPIServerExpression {
				t.Errorf("%s: change %+v", format, ch)
			}
		}
		out, err := plan.Render()
		if err != nil {
			t.Fatal(err)
		}
		switch format {
		case FormatManifest:
			// The rendered manifests audit clean.
			again, err := ParseWebhookConfigurations(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			rep, _ := Audit(again, Options{})
			if rep.Risk != RiskNone {
				t.Errorf("the fixed manifests are %s:\n%s", rep.Risk, out)
			}
		case FormatJSONPatch, FormatStrategicPatch:
			var patches []ConfigurationPatch
			if err := json.Unmarshal(out, &patches); err != nil {
				t.Fatal(err)
			}
			if len(patches) != 2 || patches[0].Kind != "ValidatingAdmissionPolicy" || patches[1].Kind != "MutatingAdmissionPolicy" ||
				patches[1].APIVersion != "admissionregistration.k8s.io/v1beta1" {
				t.Fatalf("%s: %s", format, out)
			}
			want := `{"op":"add","path":"/spec/matchConditions","value":[{"name":"breakglass-exclude-apiserver"`
			if format == FormatStrategicPatch {
				want = `{"spec":{"matchConditions":[{"name":"breakglass-exclude-apiserver"`
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, patches[0].Patch); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(compact.String(), want) || !strings.HasPrefix(patches[0].Command, "kubectl patch validatingadmissionpolicy 'p'") {
				t.Errorf("%s: %s", format, out)
			}
		}
	}
}

func TestPolicyFixMissingParam(t *testing.T) {
	in := vap(`["servicecidrs"]`, `  paramKind: {apiVersion: v1, kind: ConfigMap}
  validations:
  - expression: "true"`, actionsDeny+`
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}`) + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: default}\n"
	cfgs := parseYAML(t, in)
	plan, err := PlanFix(cfgs, FixStyle{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Changes) != 0 || !plan.Partial || !strings.Contains(strings.Join(plan.Notes, " "), "parameterNotFoundAction") {
		t.Errorf("changes %+v, partial %v, notes %q", plan.Changes, plan.Partial, plan.Notes)
	}
}

// Objects decoded elsewhere (etcd) are written back without server fields.
func TestPolicyFixFromObjects(t *testing.T) {
	cfgs := parseYAML(t, vap(`["*"]`, `  validations:
  - expression: "false"`, actionsDeny))
	for _, c := range cfgs {
		c.src = nil
		c.Policy.Object["metadata"].(map[string]interface{})["resourceVersion"] = "42"
	}
	for i := range cfgs {
		cfgs[i].src = nil
	}
	plan, err := PlanFix(cfgs, FixStyle{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := plan.Render()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "resourceVersion") || !strings.Contains(string(out), ExcludeAPIServerExpression) {
		t.Errorf("rendered:\n%s", out)
	}
	var doc map[string]interface{}
	if err := yaml.Unmarshal([]byte(strings.Split(string(out), "---\n")[0]), &doc); err != nil || doc["kind"] != "ValidatingAdmissionPolicy" {
		t.Errorf("first object %v (%v):\n%s", doc, err, out)
	}
}
