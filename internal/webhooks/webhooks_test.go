package webhooks

import (
	"encoding/json"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func TestTarget(t *testing.T) {
	for want, cc := range map[string]admissionregistrationv1.WebhookClientConfig{
		"https://10.0.0.1:9443/validate":      {URL: ptr("https://10.0.0.1:9443/validate")},
		"service kyverno/kyverno-svc:443":     {Service: &admissionregistrationv1.ServiceReference{Namespace: "kyverno", Name: "kyverno-svc"}},
		"service gk/gk-webhook:8443/v1/admit": {Service: &admissionregistrationv1.ServiceReference{Namespace: "gk", Name: "gk-webhook", Port: ptr(int32(8443)), Path: ptr("/v1/admit")}},
		"none":                                {},
	} {
		if got := (Summary{ClientConfig: cc}).Target(); got != want {
			t.Errorf("Target = %q, want %q", got, want)
		}
	}
}

func TestDefaults(t *testing.T) {
	if fp, to := Defaults("v1"); fp != "Fail" || to != 10 {
		t.Errorf("v1: %s %d", fp, to)
	}
	if fp, to := Defaults("v1beta1"); fp != "Ignore" || to != 30 {
		t.Errorf("v1beta1: %s %d", fp, to)
	}
	s := FromMutating(admissionregistrationv1.MutatingWebhook{Name: "w"})
	if s.FailurePolicy != "Fail" || s.TimeoutSeconds != 10 || s.MatchPolicy != "" || s.SideEffects != "" || s.ReinvocationPolicy != "" {
		t.Errorf("unset fields: %+v", s)
	}
}

// FromValidating and FromMutating agree with a summary read through JSON,
// the way etcd reads objects of any version.
func TestFromV1MatchesJSON(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"CREATE"}}}
	conds := []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "true"}}
	cc := admissionregistrationv1.WebhookClientConfig{URL: ptr("https://x")}
	ignore, exact, none, ifNeeded := admissionregistrationv1.Ignore, admissionregistrationv1.Exact, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.IfNeededReinvocationPolicy
	for _, v := range []admissionregistrationv1.ValidatingWebhook{
		{Name: "bare"},
		{Name: "full", ClientConfig: cc, Rules: rules, FailurePolicy: &ignore, MatchPolicy: &exact, NamespaceSelector: sel, ObjectSelector: sel,
			SideEffects: &none, TimeoutSeconds: ptr(int32(3)), MatchConditions: conds},
	} {
		viaJSON := func(obj any) Summary {
			raw, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			var w struct {
				Summary
				FailurePolicy  *string `json:"failurePolicy"`
				TimeoutSeconds *int32  `json:"timeoutSeconds"`
			}
			if err := json.Unmarshal(raw, &w); err != nil {
				t.Fatal(err)
			}
			s := w.Summary
			s.FailurePolicy, s.TimeoutSeconds = Defaults("v1")
			if w.FailurePolicy != nil {
				s.FailurePolicy = *w.FailurePolicy
			}
			if w.TimeoutSeconds != nil {
				s.TimeoutSeconds = *w.TimeoutSeconds
			}
			return s
		}
		if got, want := FromValidating(v), viaJSON(v); !reflect.DeepEqual(got, want) {
			t.Errorf("validating %s:\n%+v\n%+v", v.Name, got, want)
		}
		m := admissionregistrationv1.MutatingWebhook{Name: v.Name, ClientConfig: v.ClientConfig, Rules: v.Rules, FailurePolicy: v.FailurePolicy,
			MatchPolicy: v.MatchPolicy, NamespaceSelector: v.NamespaceSelector, ObjectSelector: v.ObjectSelector, SideEffects: v.SideEffects,
			TimeoutSeconds: v.TimeoutSeconds, MatchConditions: v.MatchConditions}
		if v.Name == "full" {
			m.ReinvocationPolicy = &ifNeeded
		}
		if got, want := FromMutating(m), viaJSON(m); !reflect.DeepEqual(got, want) {
			t.Errorf("mutating %s:\n%+v\n%+v", v.Name, got, want)
		}
	}
}
