package audit

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/breakglass-dev/breakglass/internal/webhooks"
)

func rule(ops []string, groups, versions, resources []string, scope string) admissionregistrationv1.RuleWithOperations {
	r := admissionregistrationv1.RuleWithOperations{}
	for _, o := range ops {
		r.Operations = append(r.Operations, admissionregistrationv1.OperationType(o))
	}
	r.APIGroups, r.APIVersions, r.Resources = groups, versions, resources
	if scope != "" {
		s := admissionregistrationv1.ScopeType(scope)
		r.Scope = &s
	}
	return r
}

// Cases after k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules/rules_test.go.
func TestRuleMatches(t *testing.T) {
	all := []string{"*"}
	cidrs := schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}
	roles := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	ns := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	for _, tc := range []struct {
		name      string
		rule      admissionregistrationv1.RuleWithOperations
		op        string
		gvr       schema.GroupVersionResource
		sub, nspc string
		want      bool
	}{
		{"all wildcards", rule(all, all, all, all, ""), "CREATE", cidrs, "", "", true},
		{"* does not match a subresource", rule(all, all, all, all, ""), "UPDATE", cidrs, "status", "", false},
		{"*/* matches a subresource", rule(all, all, all, []string{"*/*"}, ""), "UPDATE", cidrs, "status", "", true},
		{"*/* matches the main resource too", rule(all, all, all, []string{"*/*"}, ""), "CREATE", cidrs, "", "", true},
		{"*/status does not match the main resource", rule(all, all, all, []string{"*/status"}, ""), "CREATE", cidrs, "", "", false},
		{"*/status", rule(all, all, all, []string{"*/status"}, ""), "UPDATE", cidrs, "status", "", true},
		{"resource/*", rule(all, all, all, []string{"servicecidrs/*"}, ""), "UPDATE", cidrs, "status", "", true},
		{"exact resource", rule(all, []string{"networking.k8s.io"}, []string{"v1"}, []string{"servicecidrs"}, ""), "CREATE", cidrs, "", "", true},
		{"other group", rule(all, []string{""}, all, all, ""), "CREATE", cidrs, "", "", false},
		{"other version", rule(all, all, []string{"v1beta1"}, all, ""), "CREATE", cidrs, "", "", false},
		{"operation not listed", rule([]string{"UPDATE"}, all, all, all, ""), "CREATE", cidrs, "", "", false},
		{"operation wildcard", rule([]string{"*"}, all, all, all, ""), "CREATE", cidrs, "", "", true},
		{"scope * ", rule(all, all, all, all, "*"), "CREATE", roles, "", "kube-system", true},
		{"Cluster scope, cluster object", rule(all, all, all, all, "Cluster"), "CREATE", cidrs, "", "", true},
		{"Cluster scope, namespaced object", rule(all, all, all, all, "Cluster"), "CREATE", roles, "", "kube-system", false},
		{"Namespaced scope, namespaced object", rule(all, all, all, all, "Namespaced"), "CREATE", roles, "", "kube-system", true},
		{"Namespaced scope, cluster object", rule(all, all, all, all, "Namespaced"), "CREATE", cidrs, "", "", false},
		// A Namespace carries its own name as namespace attribute, yet is cluster-scoped.
		{"Namespaced scope, namespace object", rule(all, all, all, all, "Namespaced"), "CREATE", ns, "", "kube-system", false},
		{"Cluster scope, namespace object", rule(all, all, all, all, "Cluster"), "CREATE", ns, "", "kube-system", true},
	} {
		if got := ruleMatches(tc.rule, tc.op, tc.gvr, tc.sub, tc.nspc); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSelectors(t *testing.T) {
	notKubeSystem := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: labelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}
	reqs, _ := ModelledStartupRequests("1.32", "1.34")
	byID := map[string]StartupRequest{}
	for _, r := range reqs {
		byID[r.ID] = r
	}
	env := matchEnv{}
	for _, tc := range []struct {
		id   string
		sel  *metav1.LabelSelector
		want bool
	}{
		{"servicecidr-create", notKubeSystem, true},       // cluster-scoped: never exempted
		{"role-kube-system-create", notKubeSystem, false}, // namespace labels
		{"role-kube-public-create", notKubeSystem, true},
		{"namespace-create-kube-system", notKubeSystem, false}, // the Namespace's own labels
		{"namespace-create-kube-node-lease", notKubeSystem, true},
		{"role-kube-system-create", &metav1.LabelSelector{}, true},
		{"role-kube-system-create", nil, true},
	} {
		got, msg, err := matchNamespaceSelector(tc.sel, byID[tc.id], env)
		if err != nil || got != tc.want {
			t.Errorf("namespaceSelector %s: got %v (%s, %v), want %v", tc.id, got, msg, err, tc.want)
		}
	}
	bootstrap := &metav1.LabelSelector{MatchLabels: map[string]string{labelRBACBootstrap: "rbac-defaults"}}
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"clusterrole-create", true},
		{"rolebinding-kube-public-update", true},
		{"servicecidr-create", false},
		{"flowschema-create", false},
	} {
		got, msg, err := matchObjectSelector(bootstrap, byID[tc.id])
		if err != nil || got != tc.want {
			t.Errorf("objectSelector %s: got %v (%s, %v), want %v", tc.id, got, msg, err, tc.want)
		}
	}
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
	if _, _, err := matchObjectSelector(bad, byID["clusterrole-create"]); err == nil {
		t.Error("invalid objectSelector accepted")
	}
}

// evalConditions follows matchconditions/matcher.go: false wins over errors
// and unknowns; errors apply the failure policy.
func TestConditionCombination(t *testing.T) {
	r := findRequest(t, "servicecidr-create")
	in := celInputFor(t, r)
	const (
		isFalse = "request.name == 'other'"
		isTrue  = "request.name == 'kubernetes'"
		isError = "request.namespace == 'x'"
		isUnk   = "authorizer.requestResource.check('x').allowed()"
	)
	for _, tc := range []struct {
		policy admissionregistrationv1.FailurePolicyType
		exprs  []string
		want   outcome
	}{
		{admissionregistrationv1.Fail, []string{isTrue}, outMatch},
		{admissionregistrationv1.Fail, []string{isTrue, isFalse}, outNoMatch},
		{admissionregistrationv1.Fail, []string{isError, isFalse}, outNoMatch},
		{admissionregistrationv1.Fail, []string{isError, isTrue}, outCondError},
		{admissionregistrationv1.Ignore, []string{isError, isTrue}, outNoMatch},
		{admissionregistrationv1.Fail, []string{isUnk, isTrue}, outUnknown},
		{admissionregistrationv1.Fail, []string{isUnk, isFalse}, outNoMatch},
		{admissionregistrationv1.Fail, []string{isUnk, isError}, outUnknown},
		{admissionregistrationv1.Ignore, []string{isUnk, isError}, outNoMatch},
	} {
		var conds []admissionregistrationv1.MatchCondition
		for i, e := range tc.exprs {
			conds = append(conds, admissionregistrationv1.MatchCondition{Name: string(rune('a' + i)), Expression: e})
		}
		p := tc.policy
		w := newWebhook("c", Validating, 0, webhooks.FromValidating(admissionregistrationv1.ValidatingWebhook{Name: "w", FailurePolicy: &p, MatchConditions: conds}))
		if got := w.evalConditions(in, nil); got.outcome != tc.want {
			t.Errorf("%s %v: %s, want %s (%v)", tc.policy, tc.exprs, got.outcome, tc.want, got.why)
		}
	}
}

func TestWebhookDefaults(t *testing.T) {
	w := newWebhook("c", Mutating, 0, webhooks.FromMutating(admissionregistrationv1.MutatingWebhook{Name: "w"}))
	if w.failurePolicy != admissionregistrationv1.Fail || w.matchPolicy != admissionregistrationv1.Equivalent || w.timeoutSeconds != 10 {
		t.Fatalf("defaults: %+v", w)
	}
}
