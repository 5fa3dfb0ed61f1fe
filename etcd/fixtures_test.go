package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

func ptr[T any](v T) *T { return &v }

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, UID: types.UID("0b6f3a1e-" + name), Generation: 1,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)),
		Labels:            map[string]string{"app.kubernetes.io/name": "kyverno"},
	}
}

// validatingWebhook is the incident's kind of webhook: fail-closed, catch-all,
// as kube-apiserver stores it (defaults filled in).
func validatingWebhook(name string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: meta(name),
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "validate.kyverno.svc-fail",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr("https://127.0.0.1:9443/validate/fail"),
				CABundle: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: ptr(admissionregistrationv1.AllScopes),
				},
			}},
			FailurePolicy:           ptr(admissionregistrationv1.Fail),
			MatchPolicy:             ptr(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kyverno"}}}},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr(int32(10)),
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "not-servicecidr", Expression: `!(request.kind.kind == "ServiceCIDR")`},
			},
		}},
	}
}

func mutatingWebhook(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: meta(name),
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "mutate.kyverno.svc",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: "kyverno", Name: "kyverno-svc", Path: ptr("/mutate"), Port: ptr(int32(443))},
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: ptr(admissionregistrationv1.NamespacedScope)},
			}},
			FailurePolicy:           ptr(admissionregistrationv1.Ignore),
			MatchPolicy:             ptr(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds:          ptr(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
}

func validatingPolicy(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: meta(name),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}},
				MatchPolicy:       ptr(admissionregistrationv1.Equivalent),
				NamespaceSelector: &metav1.LabelSelector{},
				ObjectSelector:    &metav1.LabelSelector{},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas <= 5"}},
		},
	}
}

func validatingBinding(name, policy string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: meta(name),
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

func mutatingPolicy(name string) *admissionregistrationv1alpha1.MutatingAdmissionPolicy {
	return &admissionregistrationv1alpha1.MutatingAdmissionPolicy{
		ObjectMeta: meta(name),
		Spec: admissionregistrationv1alpha1.MutatingAdmissionPolicySpec{
			FailurePolicy:      ptr(admissionregistrationv1alpha1.Fail),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1alpha1.Mutation{{
				PatchType:          admissionregistrationv1alpha1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1alpha1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"x": "y"}}}`},
			}},
		},
	}
}

func mutatingBinding(name, policy string) *admissionregistrationv1alpha1.MutatingAdmissionPolicyBinding {
	return &admissionregistrationv1alpha1.MutatingAdmissionPolicyBinding{
		ObjectMeta: meta(name),
		Spec:       admissionregistrationv1alpha1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy},
	}
}

func mustProtobuf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	gv := admissionregistrationv1.SchemeGroupVersion
	if _, ok := obj.(*admissionregistrationv1alpha1.MutatingAdmissionPolicy); ok {
		gv = admissionregistrationv1alpha1.SchemeGroupVersion
	}
	if _, ok := obj.(*admissionregistrationv1alpha1.MutatingAdmissionPolicyBinding); ok {
		gv = admissionregistrationv1alpha1.SchemeGroupVersion
	}
	b, err := etcdtest.EncodeProtobuf(obj, gv)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:4]) != "k8s\x00" {
		t.Fatalf("protobuf value does not start with k8s\\x00: %q", b[:8])
	}
	return b
}

// cluster is an embedded TLS etcd with a connected breakglass client and a raw etcd client.
type cluster struct {
	srv *etcdtest.Server
	c   *etcd.Client
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	srv := etcdtest.StartTLS(t)
	c, err := etcd.Connect(context.Background(), etcd.Config{
		Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile,
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &cluster{srv: srv, c: c}
}

func (cl *cluster) put(t testing.TB, key string, value []byte) int64 {
	t.Helper()
	resp, err := cl.c.KV().Put(context.Background(), key, string(value))
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

func (cl *cluster) get(t testing.TB, key string) ([]byte, bool) {
	t.Helper()
	resp, err := cl.c.KV().Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false
	}
	return resp.Kvs[0].Value, true
}

func (cl *cluster) revision(t testing.TB) int64 {
	t.Helper()
	info, err := cl.c.Cluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Revision
}

// Names used across tests.
const (
	vwcName = "kyverno-resource-validating-webhook-cfg"
	mwcName = "kyverno-resource-mutating-webhook-cfg"
)

// seedIncident writes what a cluster in the incident holds: admission
// objects of every kind (protobuf, as kube-apiserver stores them), one JSON
// value, one encrypted value, one garbage value, and unrelated keys
// (including the wrong, guessed, key with an API group segment).
func (cl *cluster) seedIncident(t testing.TB) map[string][]byte {
	t.Helper()
	vals := map[string][]byte{
		"/registry/validatingwebhookconfigurations/" + vwcName:      mustProtobuf(t, validatingWebhook(vwcName)),
		"/registry/mutatingwebhookconfigurations/" + mwcName:        mustProtobuf(t, mutatingWebhook(mwcName)),
		"/registry/validatingadmissionpolicies/replica-limit":       mustProtobuf(t, validatingPolicy("replica-limit")),
		"/registry/validatingadmissionpolicybindings/replica-limit": mustProtobuf(t, validatingBinding("replica-limit", "replica-limit")),
		"/registry/mutatingadmissionpolicies/add-label":             mustProtobuf(t, mutatingPolicy("add-label")),
		"/registry/mutatingadmissionpolicybindings/add-label":       mustProtobuf(t, mutatingBinding("add-label", "add-label")),
		"/registry/validatingwebhookconfigurations/encrypted-one":   append([]byte("k8s:enc:aescbc:v1:key1:"), 0x8f, 0x00, 0x13, 0xfe, 0x42),
		"/registry/validatingwebhookconfigurations/garbage":         []byte("\x01\x02not a kubernetes value"),
	}
	js, err := etcdtest.EncodeJSON(validatingWebhook("json-stored"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	vals["/registry/validatingwebhookconfigurations/json-stored"] = js
	for k, v := range vals {
		cl.put(t, k, v)
	}
	// Unrelated keys that must never be listed.
	cl.put(t, "/registry/admissionregistration.k8s.io/validatingwebhookconfigurations/"+vwcName, []byte("guessed key"))
	cl.put(t, "/registry/pods/default/web-0", []byte("k8s\x00pod"))
	cl.put(t, "/registry/validatingadmissionpolicybindingsx/not-a-binding", []byte("x"))
	cl.put(t, "/other/validatingwebhookconfigurations/other-prefix", []byte("x"))
	return vals
}
