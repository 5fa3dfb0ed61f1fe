package diagnose

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/kinds"
)

const notReadyLine = `E1201 10:01:02.000000      44 writers.go:123] "Unhandled Error" err="apiserver received an error that is not an metav1.Status: not yet ready to handle request"`

func trapNode(image string, runtimeConfig ...string) NodeEvidence {
	ne := node("127.0.0.11", []string{notReadyLine}, runningPod, stuck())
	ne.Image, ne.FeatureGates, ne.RuntimeConfig = image, []string{"MutatingAdmissionPolicy=true"}, runtimeConfig
	return ne
}

func TestMutatingAdmissionPolicyGateTrap(t *testing.T) {
	for _, tc := range []struct {
		name string
		ne   NodeEvidence
		trap bool
	}{
		{"1.34, gate on, v1alpha1 only", trapNode("registry.k8s.io/kube-apiserver:v1.34.4", "admissionregistration.k8s.io/v1alpha1=true"), true},
		{"1.34, v1beta1 enabled too", trapNode("registry.k8s.io/kube-apiserver:v1.34.4", "admissionregistration.k8s.io/v1alpha1=true", "admissionregistration.k8s.io/v1beta1=true"), false},
		{"1.32, where v1alpha1 is the API", trapNode("registry.k8s.io/kube-apiserver:v1.32.13", "admissionregistration.k8s.io/v1alpha1=true"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &Evidence{HealthAsked: true, Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{tc.ne}}
			r := Analyze(ev, Options{})
			next := strings.Join(r.Next, "\n")
			if !tc.trap {
				if r.Verdict == OtherFailure && strings.Contains(r.Summary, "MutatingAdmissionPolicy") {
					t.Errorf("trap claimed: %s", r.Summary)
				}
				return
			}
			if r.Verdict != OtherFailure || !strings.Contains(r.Summary, "not yet ready to handle request") {
				t.Fatalf("verdict %s: %s", r.Verdict, r.Summary)
			}
			if !strings.Contains(next, "talosctl -n 127.0.0.11 patch machineconfig") || !strings.Contains(next, "admissionregistration.k8s.io/v1beta1=true") {
				t.Errorf("next is not the flag change: %q", r.Next)
			}
			if strings.Contains(next, "--delete") || strings.Contains(next, "etcd delete") || len(r.Culprits) > 0 || len(r.Plugins) > 0 {
				t.Errorf("the trap plans a deletion or a plugin: next %q, culprits %v, plugins %v", r.Next, r.Culprits, r.Plugins)
			}
		})
	}
}

func policyEtcd(risk string) EtcdEvidence {
	return EtcdEvidence{Asked: true, Objects: []AdmissionObject{
		{Kind: kinds.ValidatingAdmissionPolicy, Name: "deny-cidr", Key: "/registry/validatingadmissionpolicies/deny-cidr", Failure: "Fail", StartupRisk: risk},
		{Kind: kinds.ValidatingAdmissionPolicyBinding, Name: "deny-cidr-binding", Key: "/registry/validatingadmissionpolicybindings/deny-cidr-binding", Policy: "deny-cidr", StartupRisk: risk},
	}}
}

// At default verbosity only the event names the symptom: the culprit comes
// from the audit of etcd.
func TestPolicyCulpritsFromEtcd(t *testing.T) {
	logs := []string{`I1201 10:01:02.100900      44 event.go:389] "Event occurred" object="" fieldPath="" kind="ServiceCIDR" apiVersion="networking.k8s.io/v1" type="Warning" reason="KubernetesDefaultServiceCIDRError" message="The default ServiceCIDR can not be created"`}
	r := Analyze(&Evidence{HealthAsked: true, Etcd: policyEtcd("deadlock"), Nodes: []NodeEvidence{node("127.0.0.11", logs, runningPod, stuck())}}, Options{})
	if r.Verdict != AdmissionDeadlock || !r.Suspected || len(r.Culprits) != 1 {
		t.Fatalf("verdict %s, suspected %v, culprits %+v: %s", r.Verdict, r.Suspected, r.Culprits, r.Summary)
	}
	c := r.Culprits[0]
	if c.Kind != kinds.ValidatingAdmissionPolicy || c.Name != "deny-cidr" || c.Binding != "deny-cidr-binding" || c.Plugin != PluginValidatingPolicy || !c.FoundInEtcd {
		t.Errorf("culprit %+v", c)
	}
	next := strings.Join(r.Next, "\n")
	if !strings.Contains(next, "breakglass recover --runbook policy-deadlock --delete deny-cidr-binding") || !strings.Contains(next, "--plugins ValidatingAdmissionPolicy") {
		t.Errorf("next %q", r.Next)
	}
	if r.Runbook != "policy-deadlock" {
		t.Errorf("runbook %q", r.Runbook)
	}

	// A policy the audit clears (Warn only, say) is no suspect.
	r = Analyze(&Evidence{HealthAsked: true, Etcd: policyEtcd("none"), Nodes: []NodeEvidence{node("127.0.0.11", logs, runningPod, stuck())}}, Options{})
	if r.Verdict == AdmissionDeadlock || len(r.Culprits) > 0 || len(r.Plugins) > 0 {
		t.Errorf("a policy at risk none blamed: %s %+v %+v", r.Verdict, r.Culprits, r.Plugins)
	}
}

func TestStartupRisksAuditsPoliciesWithTheirBindings(t *testing.T) {
	deny := admissionregistrationv1.Deny
	warn := admissionregistrationv1.Warn
	policy := func(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{"CREATE"},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"servicecidrs"}},
			}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false"}},
		}}
	}
	binding := func(name, policy string, a admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: []admissionregistrationv1.ValidationAction{a}}}
	}
	objs := []etcd.Object{
		{Kind: kinds.ValidatingAdmissionPolicy, Name: "p", Decoded: policy("p")},
		{Kind: kinds.ValidatingAdmissionPolicyBinding, Name: "b", Decoded: binding("b", "p", deny)},
		{Kind: kinds.ValidatingAdmissionPolicy, Name: "q", Decoded: policy("q")},
		{Kind: kinds.ValidatingAdmissionPolicyBinding, Name: "w", Decoded: binding("w", "q", warn)},
	}
	risks := startupRisks(t.Context(), objs)
	for key, want := range map[string]string{
		"ValidatingAdmissionPolicy/p": "deadlock", "ValidatingAdmissionPolicyBinding/b": "deadlock",
		"ValidatingAdmissionPolicy/q": "none", "ValidatingAdmissionPolicyBinding/w": "none",
	} {
		if risks[key] != want {
			t.Errorf("%s: %q, want %q (%v)", key, risks[key], want, risks)
		}
	}
}
