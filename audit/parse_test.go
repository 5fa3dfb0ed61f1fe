package audit

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestParseShapes(t *testing.T) {
	for _, tc := range []struct {
		file  string
		kinds []Kind
		names []string
	}{
		{"list.json", []Kind{Validating, Mutating}, []string{"policy-engine", "defaults-injector"}},
		{"kyverno.yaml", []Kind{Validating, Mutating, Mutating, Validating},
			[]string{"kyverno-resource-validating-webhook-cfg", "kyverno-resource-mutating-webhook-cfg", "kyverno-verify-mutating-webhook-cfg", "kyverno-policy-validating-webhook-cfg"}},
		// A rendered chart: other kinds are kept as params a policy binding
		// may name; empty documents are skipped.
		{"parse-only-chart-with-service-ref.yaml", []Kind{Param, Param, Validating}, []string{"policy-webhook", "policy-webhook", "policy-webhook"}},
	} {
		cfgs := parseFile(t, tc.file)
		if len(cfgs) != len(tc.kinds) {
			t.Fatalf("%s: %d configurations", tc.file, len(cfgs))
		}
		for i, c := range cfgs {
			if c.Kind != tc.kinds[i] || c.Name() != tc.names[i] {
				t.Errorf("%s[%d]: %s %s", tc.file, i, c.Kind, c.Name())
			}
			if c.Policy != nil {
				continue
			}
			if (c.Validating == nil) == (c.Mutating == nil) {
				t.Errorf("%s[%d]: exactly one of Validating and Mutating must be set", tc.file, i)
			}
		}
	}
	// The parse-only file keeps its service reference as written.
	cfgs := parseFile(t, "parse-only-chart-with-service-ref.yaml")
	if cfgs[2].Validating.Webhooks[0].ClientConfig.Service == nil {
		t.Fatal("service reference lost")
	}
}

func TestParseBareArray(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "list.json"))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	arr, _ := json.Marshal(list.Items)
	cfgs, err := ParseWebhookConfigurations(arr)
	if err != nil || len(cfgs) != 2 {
		t.Fatalf("%v, %d", err, len(cfgs))
	}
	// Fix writes the array back as YAML with the condition added.
	out, err := Fix(cfgs, FixStyle{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseWebhookConfigurations(out)
	if err != nil || len(again) != 2 || len(again[0].matchConditions(0)) != 1 {
		t.Fatalf("%v:\n%s", err, out)
	}
	rep, _ := Audit(again, Options{})
	if rep.Risk != RiskNone {
		t.Fatalf("risk %s", rep.Risk)
	}
	if got := rep.ByWebhook("inject.defaults.example.com"); len(got) != 1 || got[0].Configuration != "defaults-injector" {
		t.Fatalf("ByWebhook: %+v", got)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "# nothing\n", "---\n---\n"} {
		cfgs, err := ParseWebhookConfigurations([]byte(in))
		if err != nil || len(cfgs) != 0 {
			t.Errorf("%q: %v, %d", in, err, len(cfgs))
		}
	}
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range []struct{ file, msg string }{
		{"v1beta1.yaml", "only admissionregistration.k8s.io/v1"},
		{"unknown-field.yaml", "failurePolicyy"},
		{"broken.yaml", "document 1"},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "invalid", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseNamed(tc.file, b)
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("%s: err %v", tc.file, err)
		}
		if !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "audit: "+tc.file+": document 1") {
			t.Errorf("%s: %v", tc.file, err)
		}
		if len(pe.Hints()) == 0 {
			t.Errorf("%s: no hint", tc.file)
		}
	}
	// The failing document is named.
	_, err := ParseWebhookConfigurations([]byte("apiVersion: v1\nkind: ConfigMap\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nwebhooks: 3\n"))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Document != 2 {
		t.Fatalf("err %v", err)
	}
}

func TestFromObjects(t *testing.T) {
	fail := admissionregistrationv1.Fail
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "v"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "w", FailurePolicy: &fail,
			Rules: []admissionregistrationv1.RuleWithOperations{rule([]string{"CREATE"}, []string{"*"}, []string{"*"}, []string{"*"}, "")}}}}
	ml := &admissionregistrationv1.MutatingWebhookConfigurationList{Items: []admissionregistrationv1.MutatingWebhookConfiguration{
		{ObjectMeta: metav1.ObjectMeta{Name: "m1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "m2"}}}}
	cfgs, err := FromObjects(v, ml)
	if err != nil || len(cfgs) != 3 || cfgs[0].Name() != "v" || cfgs[2].Name() != "m2" || cfgs[2].Kind != Mutating {
		t.Fatalf("%v %+v", err, cfgs)
	}
	// Copies: the caller's objects are never changed by Fix.
	if _, err := Fix(cfgs, FixStyle{}); err != nil {
		t.Fatal(err)
	}
	if len(v.Webhooks[0].MatchConditions) != 0 {
		t.Fatal("Fix changed the caller's object")
	}
	rep, _ := Audit(cfgs, Options{})
	if f, _ := rep.Find("v", "w"); f.Risk != RiskDeadlock {
		t.Fatalf("risk %s", f.Risk)
	}
	_, err = FromObjects(v, &corev1.ConfigMap{})
	if !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("err %v", err)
	}
	var _ runtime.Object = v
}
