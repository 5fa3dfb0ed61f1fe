package audit

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// vap is a ValidatingAdmissionPolicy named p on CREATE of the given
// resources, with extra spec lines, and its binding b.
func vap(resources, spec, bindingSpec string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: ["*"], apiVersions: ["*"], operations: ["CREATE", "UPDATE"], resources: ` + resources + `}
` + spec + `
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: b}
spec:
  policyName: p
` + bindingSpec + "\n"
}

func mapolicy(version, mutation string) string {
	return `apiVersion: admissionregistration.k8s.io/` + version + `
kind: MutatingAdmissionPolicy
metadata: {name: m}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {apiGroups: ["networking.k8s.io"], apiVersions: ["*"], operations: ["CREATE"], resources: ["servicecidrs"]}
  mutations:
` + mutation + `
---
apiVersion: admissionregistration.k8s.io/` + version + `
kind: MutatingAdmissionPolicyBinding
metadata: {name: mb}
spec:
  policyName: m
`
}

const (
	denyServiceCIDR = `  validations:
  - expression: "request.kind.kind != 'ServiceCIDR'"`
	actionsDeny = `  validationActions: [Deny]`
)

func TestPolicyAudit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		yaml    string
		policy  string
		risk    Risk
		outcome string // outcome of servicecidr-create ("" when not blocked)
		fix     bool
	}{
		{"deny refuses the default ServiceCIDR", vap(`["servicecidrs"]`, denyServiceCIDR, actionsDeny), "p", RiskDeadlock, OutcomeDenied, true},
		{"Warn and Audit only log", vap(`["servicecidrs"]`, denyServiceCIDR, `  validationActions: [Warn, Audit]`), "p", RiskNone, "", false},
		{"matchCondition excludes system:apiserver", vap(`["servicecidrs"]`, denyServiceCIDR+`
  matchConditions:
  - {name: not-apiserver, expression: "request.userInfo.username != 'system:apiserver'"}`, actionsDeny), "p", RiskNone, "", false},
		{"runtime error under Fail", vap(`["servicecidrs"]`, `  validations:
  - expression: "object.metadata.labels['team'] == 'a'"`, actionsDeny), "p", RiskDeadlock, OutcomeEvalError, true},
		{"runtime error under Ignore", vap(`["servicecidrs"]`, `  failurePolicy: Ignore
  validations:
  - expression: "object.metadata.labels['team'] == 'a'"`, actionsDeny), "p", RiskNone, "", false},
		{"a false validation denies under Ignore too", vap(`["servicecidrs"]`, "  failurePolicy: Ignore\n"+denyServiceCIDR, actionsDeny), "p", RiskDeadlock, OutcomeDenied, true},
		{"has() guards the missing key", vap(`["servicecidrs"]`, `  validations:
  - expression: "!has(object.metadata.labels) || object.metadata.labels['team'] == 'a'"`, actionsDeny), "p", RiskNone, "", false},
		{"namespaceSelector does not exempt cluster-scoped ServiceCIDR", vap(`["servicecidrs"]`, `    namespaceSelector: {matchLabels: {team: a}}
`+denyServiceCIDR, actionsDeny), "p", RiskDeadlock, OutcomeDenied, true},
		{"excludeResourceRules", vap(`["servicecidrs"]`, `    excludeResourceRules:
    - {apiGroups: ["networking.k8s.io"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["servicecidrs"], resourceNames: ["kubernetes"]}
`+denyServiceCIDR, actionsDeny), "p", RiskNone, "", false},
		{"status subresource denial is only logged", vap(`["servicecidrs/status"]`, `  validations:
  - expression: "false"`, actionsDeny), "p", RiskNone, "", false},
		{"object fields the model lacks: unknown", vap(`["servicecidrs"]`, `  validations:
  - expression: "object.spec.cidrs.size() < 3"`, actionsDeny), "p", RiskUnknown, OutcomeUnknown, true},
		{"binding matchResources narrows it away", vap(`["*"]`, denyServiceCIDR, actionsDeny+`
  matchResources:
    resourceRules:
    - {apiGroups: ["apps"], apiVersions: ["*"], operations: ["*"], resources: ["deployments"]}`), "p", RiskNone, "", false},
		{"catch-all deny", vap(`["*"]`, `  validations:
  - expression: "false"`, actionsDeny), "p", RiskDeadlock, OutcomeDenied, true},
		{"missing param, Deny", vap(`["servicecidrs"]`, `  paramKind: {apiVersion: v1, kind: ConfigMap}
  validations:
  - expression: "params.data.allowed == 'true'"`, actionsDeny+`
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}`) + `---
apiVersion: v1
kind: ConfigMap
metadata: {name: other, namespace: default}
`, "p", RiskDeadlock, OutcomeConfigError, false},
		{"missing param, Allow", vap(`["servicecidrs"]`, `  paramKind: {apiVersion: v1, kind: ConfigMap}
  validations:
  - expression: "params.data.allowed == 'true'"`, actionsDeny+`
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Allow}`) + `---
apiVersion: v1
kind: ConfigMap
metadata: {name: other, namespace: default}
`, "p", RiskNone, "", false},
		{"param found, validation uses it", vap(`["servicecidrs"]`, `  paramKind: {apiVersion: v1, kind: ConfigMap}
  validations:
  - expression: "params.data.allowed == 'true'"`, actionsDeny+`
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}`) + `---
apiVersion: v1
kind: ConfigMap
metadata: {name: limits, namespace: default}
data: {allowed: "false"}
`, "p", RiskDeadlock, OutcomeDenied, true},
		{"params not given: unknown", vap(`["servicecidrs"]`, `  paramKind: {apiVersion: v1, kind: ConfigMap}
  validations:
  - expression: "true"`, actionsDeny+`
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}`), "p", RiskUnknown, OutcomeUnknown, true},
		{"MAP JSONPatch under missing labels", mapolicy("v1beta1", `  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/team"), value: "a"}]'`), "m", RiskDeadlock, OutcomeEvalError, true},
		{"MAP JSONPatch adding the whole map", mapolicy("v1alpha1", `  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/metadata/labels", value: {"team": "a"}}]'`), "m", RiskNone, "", false},
		{"MAP ApplyConfiguration", mapolicy("v1beta1", `  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"team": "a"}}}'`), "m", RiskNone, "", false},
		{"MAP on the spec: unknown", mapolicy("v1beta1", `  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "replace", path: "/spec/cidrs", value: ["10.0.0.0/16"]}]'`), "m", RiskUnknown, OutcomeUnknown, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := auditYAML(t, tc.yaml)
			f := policyFinding(t, rep, tc.policy)
			if f.Risk != tc.risk {
				t.Fatalf("risk %s, want %s: %v %+v", f.Risk, tc.risk, f.Reasons, f.Blocks)
			}
			if rep.Risk != tc.risk {
				t.Errorf("report risk %s, want %s", rep.Risk, tc.risk)
			}
			got := ""
			for _, b := range f.Blocks {
				if b.ID == "servicecidr-create" {
					got = b.Outcome
					if len(b.Why) == 0 {
						t.Error("a blocked write without why")
					}
				}
			}
			if got != tc.outcome {
				t.Errorf("servicecidr-create outcome %q, want %q (%+v)", got, tc.outcome, f.Blocks)
			}
			if (f.Fix != "") != tc.fix {
				t.Errorf("fix %q, want one: %v", f.Fix, tc.fix)
			}
		})
	}
}

func policyFinding(t *testing.T, rep Report, policy string) Finding {
	t.Helper()
	for _, f := range rep.Findings {
		if f.Configuration == policy && f.Kind.isPolicyKind() {
			return f
		}
	}
	t.Fatalf("no finding for policy %s: %+v", policy, rep.Findings)
	return Finding{}
}

func TestPolicyFindingNames(t *testing.T) {
	rep := auditYAML(t, vap(`["*"]`, denyServiceCIDR, actionsDeny))
	f := policyFinding(t, rep, "p")
	if f.ObjectKind != "ValidatingAdmissionPolicy" || f.Binding != "b" || f.Kind != ValidatingPolicy || f.FailurePolicy != "Fail" {
		t.Errorf("finding names %+v", f)
	}
	var b strings.Builder
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "ValidatingAdmissionPolicy") || !strings.Contains(b.String(), "binding b") {
		t.Errorf("table does not name the kind and the binding:\n%s", b.String())
	}
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy p (binding b)") {
		t.Errorf("error %v does not name the policy", err)
	}
}

func TestPolicyWithoutBinding(t *testing.T) {
	y := strings.SplitN(vap(`["*"]`, denyServiceCIDR, actionsDeny), "---", 2)[0]
	rep := auditYAML(t, y)
	if f := policyFinding(t, rep, "p"); f.Risk != RiskNone || !strings.Contains(strings.Join(f.Reasons, " "), "without a binding") {
		t.Errorf("unbound policy: %+v", f)
	}
}

func TestPolicyParseErrors(t *testing.T) {
	for _, y := range []string{
		"apiVersion: admissionregistration.k8s.io/v2\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\n",
		"apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\nspec: {validatons: []}\n",
	} {
		if _, err := ParseWebhookConfigurations([]byte(y)); err == nil {
			t.Errorf("no error for %q", y)
		}
	}
}

// What the API server lists (items without apiVersion and kind) and what
// etcd decodes (typed objects) audit like files.
func TestPolicyInputs(t *testing.T) {
	list := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyList","items":[
{"metadata":{"name":"p"},"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["CREATE"],"resources":["*"]}]},"validations":[{"expression":"false"}]}}]}
---
{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyBindingList","items":[{"metadata":{"name":"b"},"spec":{"policyName":"p","validationActions":["Deny"]}}]}`
	cfgs := parseYAML(t, list)
	rep, err := Audit(cfgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f := policyFinding(t, rep, "p"); f.Risk != RiskDeadlock || f.Binding != "b" {
		t.Errorf("typed lists: %+v", f)
	}

	var objs []runtime.Object
	for _, c := range cfgs {
		typed, err := policyScheme.New(schema.FromAPIVersionAndKind(c.Policy.APIVersion, c.Policy.Kind))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(c.Policy.Object)
		if err := json.Unmarshal(raw, typed); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, typed)
	}
	decoded, err := FromObjects(objs...)
	if err != nil {
		t.Fatal(err)
	}
	rep, err = Audit(decoded, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f := policyFinding(t, rep, "p"); f.Risk != RiskDeadlock || f.ObjectKind != "ValidatingAdmissionPolicy" {
		t.Errorf("decoded objects: %+v", f)
	}
}
