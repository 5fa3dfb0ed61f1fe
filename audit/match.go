package audit

import (
	"context"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/breakglass-dev/breakglass/internal/webhooks"
)

// webhook is a validating or mutating webhook with the v1 defaults applied
// (k8s.io/kubernetes/pkg/apis/admissionregistration/v1/defaults.go:
// failurePolicy Fail, matchPolicy Equivalent, empty selectors, timeout 10s,
// rule scope "*").
type webhook struct {
	configuration   string
	kind            Kind
	index           int
	name            string
	rules           []admissionregistrationv1.RuleWithOperations
	failurePolicy   admissionregistrationv1.FailurePolicyType
	matchPolicy     admissionregistrationv1.MatchPolicyType
	nsSelector      *metav1.LabelSelector
	objSelector     *metav1.LabelSelector
	timeoutSeconds  int32
	matchConditions []admissionregistrationv1.MatchCondition
	compiled        []compiledCondition
}

// newWebhook models webhook s (from webhooks.FromValidating or
// FromMutating, which apply failurePolicy's and timeoutSeconds' defaults),
// the index-th of configuration cfg.
func newWebhook(cfg string, kind Kind, index int, s webhooks.Summary) *webhook {
	w := &webhook{configuration: cfg, name: s.Name, kind: kind, index: index, rules: s.Rules,
		failurePolicy: admissionregistrationv1.FailurePolicyType(s.FailurePolicy), matchPolicy: webhooks.DefaultMatchPolicy,
		nsSelector: s.NamespaceSelector, objSelector: s.ObjectSelector, timeoutSeconds: s.TimeoutSeconds, matchConditions: s.MatchConditions}
	if s.MatchPolicy != "" {
		w.matchPolicy = admissionregistrationv1.MatchPolicyType(s.MatchPolicy)
	}
	for _, c := range s.MatchConditions {
		w.compiled = append(w.compiled, compileCondition(c.Name, c.Expression))
	}
	return w
}

// outcome of one webhook for one request.
type outcome int

const (
	outNoMatch   outcome = iota
	outMatch             // the webhook is called
	outCondError         // a matchCondition errored: with Fail the request is rejected without a call
	outUnknown           // depends on what cannot be modelled
)

func (o outcome) String() string {
	return [...]string{"not called", "called", "rejected by a condition error", "unknown"}[o]
}

type matchResult struct {
	outcome outcome
	why     []string
}

// matchEnv carries what matching needs beyond the webhook and the request.
type matchEnv struct {
	ctx             context.Context // stops the audit; nil never does
	namespaceLabels map[string]map[string]string
	runtimeConfig   map[string]bool
	newCluster      bool
}

// done tells whether the audit was stopped.
func (e matchEnv) done() bool { return e.ctx != nil && e.ctx.Err() != nil }

func (e matchEnv) labelsOfNamespace(ns string) map[string]string {
	l := map[string]string{labelMetadataName: ns}
	for k, v := range e.namespaceLabels[ns] {
		l[k] = v
	}
	return l
}

// match follows ShouldCallHook in
// k8s.io/apiserver/pkg/admission/plugin/webhook/generic/webhook.go:
// namespaceSelector, objectSelector, rules (then, for matchPolicy
// Equivalent, the same rules against equivalent resources), then
// matchConditions (matchconditions/matcher.go).
func (w *webhook) match(r StartupRequest, env matchEnv) matchResult {
	ok, why, err := matchSelectors(w.nsSelector, w.objSelector, r, env)
	if err != nil {
		return matchResult{outcome: outCondError, why: []string{err.Error()}}
	}
	if !ok {
		return matchResult{outcome: outNoMatch, why: why}
	}

	// rules, first match wins; then equivalents.
	gvr, gvk, ruleWhy, matched := matchRules(w.rules, w.matchPolicy, r, env, nil)
	if !matched {
		return matchResult{outcome: outNoMatch, why: []string{"no rule matches " + r.String()}}
	}
	why = append(why, ruleWhy)

	if len(w.compiled) == 0 {
		return matchResult{outcome: outMatch, why: why}
	}
	in, err := r.celInput(gvr, gvk)
	if err != nil {
		return matchResult{outcome: outUnknown, why: append(why, err.Error())}
	}
	in.ctx = env.ctx
	in.budget = newBudget(matchConditionsBudget, fmt.Sprintf("(%d for one webhook's matchConditions on one request)", matchConditionsBudget))
	return w.evalConditions(in, why)
}

// celInput is what CEL sees of r when it is matched as gvr/gvk.
func (r StartupRequest) celInput(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) (celInput, error) {
	req, err := toUnstructured(r.admissionRequest(gvr, gvk, r.userInfo()))
	if err != nil {
		return celInput{}, err
	}
	in := celInput{request: req, unknown: r.unknownPatterns()}
	if r.hasObject() {
		in.object = r.object(gvk)
	}
	if r.hasOldObject() {
		in.oldObject = r.object(gvk)
	}
	return in, nil
}

// matchRules finds the first rule that matches r (and that accept, when
// given, accepts), then for matchPolicy Equivalent the first that matches
// an equivalent resource kube-apiserver serves. It returns the resource
// and kind the request is seen as, and why.
func matchRules(rules []admissionregistrationv1.RuleWithOperations, policy admissionregistrationv1.MatchPolicyType, r StartupRequest, env matchEnv,
	accept func(i int) bool) (schema.GroupVersionResource, schema.GroupVersionKind, string, bool) {
	ok := func(i int, rule admissionregistrationv1.RuleWithOperations, gvr schema.GroupVersionResource) bool {
		return ruleMatches(rule, r.Operation, gvr, r.Subresource, r.Namespace) && (accept == nil || accept(i))
	}
	for i, rule := range rules {
		if ok(i, rule, r.GVR()) {
			return r.GVR(), r.GVK(), fmt.Sprintf("rule %d %s matches", i+1, describeRule(rule)), true
		}
	}
	if policy != admissionregistrationv1.Equivalent {
		return schema.GroupVersionResource{}, schema.GroupVersionKind{}, "", false
	}
	for i, rule := range rules {
		for _, eq := range r.equivalents {
			if eq.runtimeConfig != "" && !env.runtimeConfig[eq.runtimeConfig] {
				continue
			}
			if ok(i, rule, eq.gvr) {
				served := "served by default"
				if eq.runtimeConfig != "" {
					served = "served because --runtime-config enables " + eq.runtimeConfig
				}
				return eq.gvr, eq.gvk, fmt.Sprintf("rule %d %s matches the equivalent %s (matchPolicy Equivalent; %s)",
					i+1, describeRule(rule), gvrString(eq.gvr), served), true
			}
		}
	}
	return schema.GroupVersionResource{}, schema.GroupVersionKind{}, "", false
}

// conditionsRun is what a webhook's or a binding's matchConditions gave, as
// reasons: the first false one ends the run (skipped, falseOne names it),
// and the ones before it were true, errors or unknown.
type conditionsRun struct {
	skipped               bool
	falseOne              string
	trues, errs, unknowns []string
}

// runConditions evaluates n matchConditions in order, eval giving the i-th's
// name, result and detail, up to the first false one.
func runConditions(n int, eval func(i int) (name string, res conditionResult, detail string)) conditionsRun {
	var run conditionsRun
	for i := range n {
		name, res, detail := eval(i)
		switch res {
		case condFalse:
			run.skipped, run.falseOne = true, name
			return run
		case condError:
			run.errs = append(run.errs, fmt.Sprintf("matchCondition %q errors: %s", name, detail))
		case condUnknown:
			run.unknowns = append(run.unknowns, fmt.Sprintf("matchCondition %q is unknown: %s", name, detail))
		case condTrue:
			run.trues = append(run.trues, fmt.Sprintf("matchCondition %q is true", name))
		}
	}
	return run
}

// evalConditions applies matchconditions/matcher.go Match: any false skips
// the webhook; otherwise errors apply the failure policy (Fail rejects the
// request, Ignore skips the webhook); otherwise the webhook is called. An
// unknown condition keeps the result unknown unless another one decides it.
func (w *webhook) evalConditions(in celInput, why []string) matchResult {
	conds := runConditions(len(w.compiled), func(i int) (string, conditionResult, string) {
		res, detail := w.compiled[i].eval(in)
		return w.compiled[i].name, res, detail
	})
	why = append(why, conds.trues...)
	if conds.skipped {
		return matchResult{outcome: outNoMatch, why: append(why, fmt.Sprintf("matchCondition %q is false: the webhook is skipped", conds.falseOne))}
	}
	errs, unknowns := conds.errs, conds.unknowns
	if len(errs) > 0 && w.failurePolicy == admissionregistrationv1.Ignore {
		// Whatever the unknown ones give, an error with Ignore skips the webhook.
		return matchResult{outcome: outNoMatch, why: append(append(why, errs...), "failurePolicy Ignore: a condition error skips the webhook")}
	}
	if len(unknowns) > 0 {
		return matchResult{outcome: outUnknown, why: append(append(why, errs...), unknowns...)}
	}
	if len(errs) > 0 {
		return matchResult{outcome: outCondError, why: append(append(why, errs...), "failurePolicy Fail: a condition error rejects the request without calling the webhook")}
	}
	return matchResult{outcome: outMatch, why: why}
}

// ruleMatches is predicates/rules/rules.go Matcher.Matches: scope,
// operation, group, version, resource/subresource, with "*" wildcards.
func ruleMatches(rule admissionregistrationv1.RuleWithOperations, op string, gvr schema.GroupVersionResource, sub, namespace string) bool {
	return scopeMatches(rule.Scope, gvr, namespace) &&
		operationMatches(rule.Operations, op) &&
		exactOrWildcard(rule.APIGroups, gvr.Group) &&
		exactOrWildcard(rule.APIVersions, gvr.Version) &&
		resourceMatches(rule.Resources, gvr.Resource, sub)
}

func exactOrWildcard(items []string, requested string) bool {
	for _, item := range items {
		if item == "*" || item == requested {
			return true
		}
	}
	return false
}

var namespaceResource = schema.GroupVersionResource{Group: "", Version: "v1", Resource: "namespaces"}

func scopeMatches(scope *admissionregistrationv1.ScopeType, gvr schema.GroupVersionResource, namespace string) bool {
	if scope == nil || *scope == admissionregistrationv1.AllScopes {
		return true
	}
	switch *scope {
	case admissionregistrationv1.NamespacedScope:
		return gvr != namespaceResource && namespace != metav1.NamespaceNone
	case admissionregistrationv1.ClusterScope:
		return gvr == namespaceResource || namespace == metav1.NamespaceNone
	default:
		return false
	}
}

func operationMatches(ops []admissionregistrationv1.OperationType, op string) bool {
	for _, o := range ops {
		if o == admissionregistrationv1.OperationAll || string(o) == op {
			return true
		}
	}
	return false
}

func resourceMatches(resources []string, res, sub string) bool {
	for _, r := range resources {
		rr, rs, _ := strings.Cut(r, "/")
		if (rr == "*" || rr == res) && (rs == "*" || rs == sub) {
			return true
		}
	}
	return false
}

// matchSelectors applies a namespaceSelector
// (predicates/namespace/matcher.go MatchNamespaceSelector), then an
// objectSelector (predicates/object/matcher.go MatchObjectSelector: the
// object's or the old object's labels): whether the request passes both,
// and what they said (on a miss, what the one that missed said). An error
// names the selector that cannot be parsed.
func matchSelectors(nsSel, objSel *metav1.LabelSelector, r StartupRequest, env matchEnv) (bool, []string, error) {
	var said []string
	for _, sel := range []struct {
		name  string
		match func() (bool, string, error)
	}{
		{"namespaceSelector", func() (bool, string, error) { return matchNamespaceSelector(nsSel, r, env) }},
		{"objectSelector", func() (bool, string, error) { return matchObjectSelector(objSel, r) }},
	} {
		ok, msg, err := sel.match()
		if err != nil {
			return false, nil, fmt.Errorf("%s cannot be parsed: %w", sel.name, err)
		}
		if !ok {
			return false, []string{msg}, nil
		}
		if msg != "" {
			said = append(said, msg)
		}
	}
	return true, said, nil
}

func matchNamespaceSelector(sel *metav1.LabelSelector, r StartupRequest, env matchEnv) (bool, string, error) {
	if r.clusterScoped() && r.Resource != "namespaces" {
		if sel != nil && !isEmptySelector(sel) {
			return true, fmt.Sprintf("namespaceSelector %s does not exempt cluster-scoped %s (Kubernetes never skips cluster-scoped objects)", describeSelector(sel), r.Resource), nil
		}
		return true, "", nil
	}
	if sel == nil || isEmptySelector(sel) {
		return true, "", nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, "", err
	}
	var l map[string]string
	what := "namespace " + r.Namespace
	if r.Resource == "namespaces" && r.Subresource == "" && (r.Operation == "CREATE" || r.Operation == "UPDATE") {
		// The Namespace object itself: its own labels (defaulting adds kubernetes.io/metadata.name).
		l = r.labels
		what = "the Namespace object " + r.Name
	} else {
		l = env.labelsOfNamespace(r.Namespace)
	}
	if s.Matches(labels.Set(l)) {
		return true, fmt.Sprintf("namespaceSelector %s matches %s %s", describeSelector(sel), what, describeLabels(l)), nil
	}
	return false, fmt.Sprintf("namespaceSelector %s excludes %s %s", describeSelector(sel), what, describeLabels(l)), nil
}

func matchObjectSelector(sel *metav1.LabelSelector, r StartupRequest) (bool, string, error) {
	if sel == nil || isEmptySelector(sel) {
		return true, "", nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, "", err
	}
	// Both object and old object carry the modelled labels.
	if s.Matches(labels.Set(r.labels)) {
		return true, fmt.Sprintf("objectSelector %s matches the object's labels %s", describeSelector(sel), describeLabels(r.labels)), nil
	}
	return false, fmt.Sprintf("objectSelector %s excludes the object (labels %s)", describeSelector(sel), describeLabels(r.labels)), nil
}

func isEmptySelector(s *metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

func describeSelector(s *metav1.LabelSelector) string {
	if s == nil || isEmptySelector(s) {
		return "{}"
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "(invalid)"
	}
	return "{" + sel.String() + "}"
}

func describeLabels(l map[string]string) string {
	if len(l) == 0 {
		return "{}"
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func describeRule(r admissionregistrationv1.RuleWithOperations) string {
	ops := make([]string, len(r.Operations))
	for i, o := range r.Operations {
		ops[i] = string(o)
	}
	scope := "*"
	if r.Scope != nil {
		scope = string(*r.Scope)
	}
	return fmt.Sprintf("(operations [%s], apiGroups [%s], apiVersions [%s], resources [%s], scope %s)",
		strings.Join(ops, " "), strings.Join(quoteEmpty(r.APIGroups), " "), strings.Join(r.APIVersions, " "), strings.Join(r.Resources, " "), scope)
}

func quoteEmpty(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		if v == "" {
			v = `""`
		}
		out[i] = v
	}
	return out
}

func gvrString(g schema.GroupVersionResource) string {
	if g.Group == "" {
		return g.Version + " " + g.Resource
	}
	return g.Group + "/" + g.Version + " " + g.Resource
}
