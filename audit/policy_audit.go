package audit

import (
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Outcomes of a start-up write under an admission policy.
const (
	// OutcomeDenied: a validation is false and the binding's
	// validationActions hold Deny (whatever the failurePolicy).
	OutcomeDenied = "denied"
	// OutcomeEvalError: a validation, audit annotation or mutation errors
	// (or a JSONPatch cannot apply) under failurePolicy Fail.
	OutcomeEvalError = "rejected-evaluation-error"
	// OutcomeConfigError: the binding cannot be applied (its param or param
	// kind is missing, parameterNotFoundAction Deny) under failurePolicy Fail.
	OutcomeConfigError = "rejected-configuration-error"
)

// The policy audit follows k8s.io/apiserver v0.34
// admission/plugin/policy: generic/policy_dispatcher.go (the policy's
// matchConstraints, then the binding's matchResources, then its params: a
// missing one with parameterNotFoundAction Deny, or a missing param kind,
// is a configuration error that failurePolicy Fail turns into a denial
// whatever the validationActions and before any matchCondition),
// matching/matching.go (namespace and object selectors, excludeResourceRules,
// resourceRules with resourceNames, matchPolicy; empty resourceRules in a
// binding match everything), validating/validator.go (matchConditions, then
// validations and audit annotations: a false validation denies whatever the
// failurePolicy, an error does so only under Fail) and validating/dispatcher.go
// (only validationActions Deny rejects; Warn and Audit let it through), and
// mutating/dispatcher.go (a mutation that errors or whose JSONPatch cannot
// apply rejects under Fail).

// policyUnit is a policy compiled once for all its bindings.
type policyUnit struct {
	c           Configuration
	index       int
	conditions  []namedExpr
	variables   []namedExpr
	validations []policyExpr
	annotations []policyExpr
	mutations   []policyExpr
	patchTypes  []string
}

type namedExpr struct {
	name string
	policyExpr
}

func compilePolicy(c Configuration, index int) *policyUnit {
	p, u := c.Policy, &policyUnit{c: c, index: index}
	for _, mc := range p.Spec.MatchConditions {
		u.conditions = append(u.conditions, namedExpr{mc.Name, compilePolicyExpr(fmt.Sprintf("matchCondition %q", mc.Name), mc.Expression, true)})
	}
	for _, v := range p.Spec.Variables {
		u.variables = append(u.variables, namedExpr{v.Name, compilePolicyExpr(fmt.Sprintf("variable %q", v.Name), v.Expression, false)})
	}
	for i, v := range p.Spec.Validations {
		u.validations = append(u.validations, compilePolicyExpr(fmt.Sprintf("validation %d %q", i+1, v.Expression), v.Expression, true))
	}
	for _, a := range p.Spec.AuditAnnotations {
		u.annotations = append(u.annotations, compilePolicyExpr(fmt.Sprintf("auditAnnotation %q", a.Key), a.ValueExpression, false))
	}
	for i, m := range p.Spec.Mutations {
		expr := ""
		switch {
		case m.JSONPatch != nil:
			expr = m.JSONPatch.Expression
		case m.ApplyConfiguration != nil:
			expr = m.ApplyConfiguration.Expression
		}
		u.mutations = append(u.mutations, compilePolicyExpr(fmt.Sprintf("mutation %d (%s)", i+1, m.PatchType), expr, false))
		u.patchTypes = append(u.patchTypes, m.PatchType)
	}
	return u
}

// auditPolicies audits every (policy, binding) pair of cfgs; a policy
// without a binding does nothing and is reported so.
func auditPolicies(cfgs []Configuration, reqs []StartupRequest, env matchEnv) []Finding {
	var out []Finding
	var params []*Policy
	for _, c := range cfgs {
		if c.Policy != nil {
			params = append(params, c.Policy) // any object can be a param
		}
	}
	for pi, c := range cfgs {
		if c.Kind != ValidatingPolicy && c.Kind != MutatingPolicy {
			continue
		}
		u := compilePolicy(c, pi)
		bound := false
		for bi, b := range cfgs {
			if b.Kind != c.Kind.bindingKind() || b.Policy.Spec.PolicyName != c.Policy.Name {
				continue
			}
			bound = true
			f := u.audit(b.Policy, params, reqs, env)
			f.bindingIndex = bi
			out = append(out, f)
		}
		if !bound {
			f := u.finding("")
			f.Risk = RiskNone
			f.Reasons = append(f.Reasons, "no "+policyKindName[c.Kind.bindingKind()]+" names it: a policy without a binding does nothing")
			out = append(out, f)
		}
	}
	return out
}

func (u *policyUnit) finding(binding string) Finding {
	return Finding{Configuration: u.c.Policy.Name, Kind: u.c.Kind, ObjectKind: u.c.Policy.Kind, Binding: binding,
		FailurePolicy: string(u.c.Policy.failurePolicy()), Blocks: []BlockedRequest{}, Reasons: []string{}, configIndex: u.index, webhookIndex: -1}
}

// audit decides one binding of the policy for every start-up write.
func (u *policyUnit) audit(b *Policy, params []*Policy, reqs []StartupRequest, env matchEnv) Finding {
	f := u.finding(b.Name)
	var fatalHit, fatalUnknown int
	hooks := []string{}
	configOnly := true // every rejection is a configuration error: a matchCondition cannot help
	for _, r := range reqs {
		if env.done() {
			break
		}
		if r.NewClusterOnly && !env.newCluster {
			continue
		}
		out, why := u.decide(b, params, r, env)
		if out == "" {
			continue
		}
		f.Blocks = append(f.Blocks, BlockedRequest{StartupRequest: r, Request: r.String(), Outcome: out, Why: why})
		if !r.Fatal {
			continue
		}
		if out == OutcomeUnknown {
			fatalUnknown++
			continue
		}
		fatalHit++
		hooks = appendUnique(hooks, r.Hook)
		configOnly = configOnly && out == OutcomeConfigError
	}
	fp := u.c.Policy.failurePolicy()
	switch {
	case fatalHit > 0:
		f.Risk = RiskDeadlock
		f.Reasons = append(f.Reasons, fmt.Sprintf("binding %s: %d fatal start-up write(s) are rejected (failurePolicy %s); kube-apiserver fails %s",
			b.Name, fatalHit, fp, strings.Join(hooks, ", ")))
	case fatalUnknown > 0:
		f.Risk = RiskUnknown
		f.Reasons = append(f.Reasons, fmt.Sprintf("binding %s: whether %d fatal start-up write(s) are rejected depends on what the audit cannot evaluate", b.Name, fatalUnknown))
	default:
		f.Risk = RiskNone
		if len(f.Blocks) > 0 {
			f.Reasons = append(f.Reasons, fmt.Sprintf("binding %s: it can reject only non-fatal start-up writes (%d): logged and retried", b.Name, len(f.Blocks)))
		} else {
			f.Reasons = append(f.Reasons, fmt.Sprintf("binding %s: no start-up write of kube-apiserver is rejected", b.Name))
		}
	}
	switch {
	case f.Risk == RiskNone:
	case fatalHit > 0 && configOnly:
		f.Reasons = append(f.Reasons, "a matchCondition cannot help: params are resolved before matchConditions; create the param, or set the binding's paramRef.parameterNotFoundAction to Allow")
	default:
		f.Fix = ExcludeAPIServerExpression
	}
	return f
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// decide returns the outcome of one start-up write ("" when it passes) and why.
func (u *policyUnit) decide(b *Policy, params []*Policy, r StartupRequest, env matchEnv) (string, []string) {
	p := u.c.Policy
	fail := p.failurePolicy() != admissionregistrationv1.Ignore
	onError := func(out string, why []string) (string, []string) {
		if fail {
			return out, append(why, "failurePolicy Fail: the error rejects the request")
		}
		return "", nil
	}
	if p.Spec.MatchConstraints == nil {
		return "", nil
	}
	m := matchConstraints(p.Spec.MatchConstraints, r, env, "matchConstraints")
	if m.status == matchNo {
		return "", nil
	}
	if m.status == matchError {
		return onError(OutcomeConfigError, m.why)
	}
	why := m.why
	unknown := m.status == matchMaybe
	if b.Spec.MatchResources != nil {
		bm := matchConstraints(b.Spec.MatchResources, r, env, "binding matchResources")
		switch bm.status {
		case matchNo:
			return "", nil
		case matchError:
			return onError(OutcomeConfigError, append(why, bm.why...))
		case matchMaybe:
			unknown = true
		}
		why = append(why, bm.why...)
	}
	in, err := r.celInput(m.gvr, m.gvk)
	if err != nil {
		return OutcomeUnknown, append(why, err.Error())
	}
	in.ctx = env.ctx
	if r.Namespace != "" {
		// Its labels beyond kubernetes.io/metadata.name are not modelled.
		in.unknown = append(in.unknown, cel.AttributePattern(varNamespaceObject))
	}

	// Params are resolved before any expression runs.
	var ps []map[string]interface{}
	if pk := p.Spec.ParamKind; pk != nil {
		res, pwhy := resolveParams(pk, b.Spec.ParamRef, params, r)
		why = append(why, pwhy...)
		switch res.status {
		case paramsUnknown:
			return OutcomeUnknown, why
		case paramsMissingDeny:
			return onError(OutcomeConfigError, why)
		case paramsMissingAllow:
			return "", nil
		}
		ps = res.objects
	} else {
		ps = []map[string]interface{}{nil}
	}

	// Each param is one evaluation; the worst decides.
	var unknownWhy []string
	for _, param := range ps {
		in.extra = map[string]interface{}{varParams: param}
		out, ewhy := u.evaluate(in, r, b, fail)
		switch out {
		case "":
		case OutcomeUnknown:
			unknownWhy = append(unknownWhy, ewhy...)
		default:
			if unknown {
				return OutcomeUnknown, append(append(why, ewhy...), "whether the policy matches at all is not known")
			}
			return out, append(why, ewhy...)
		}
	}
	if len(unknownWhy) > 0 {
		return OutcomeUnknown, append(why, unknownWhy...)
	}
	return "", nil
}

// evaluate runs matchConditions, variables, then validations and audit
// annotations (validating) or mutations (mutating) for one param.
func (u *policyUnit) evaluate(in celInput, r StartupRequest, b *Policy, fail bool) (string, []string) {
	in.budget = newBudget(matchConditionsBudget, fmt.Sprintf("(%d for one binding's matchConditions on one request)", matchConditionsBudget))
	conds := runConditions(len(u.conditions), func(i int) (string, conditionResult, string) {
		res, detail := u.conditions[i].evalBool(in)
		return u.conditions[i].name, res, detail
	})
	if conds.skipped {
		return "", nil // any false skips the policy
	}
	why, errs, unknowns := conds.trues, conds.errs, conds.unknowns
	if len(errs) > 0 && !fail {
		return "", nil
	}
	if len(unknowns) > 0 {
		return OutcomeUnknown, append(append(why, errs...), unknowns...)
	}
	vars := map[string]interface{}{}
	in.extra[varVariables] = vars
	in.budget = newBudget(policyBudget, fmt.Sprintf("(%d for one binding's expressions on one request)", policyBudget))
	for _, v := range u.variables {
		val, res, _ := v.evalValue(in)
		switch res {
		case condTrue:
			vars[v.name] = val
		case condError:
			vars[v.name] = types.NewErr("variable %q errors", v.name) // an error where it is used
		default:
			in.unknown = append(in.unknown, cel.AttributePattern(varVariables).QualString(v.name))
		}
	}
	if u.c.Kind == MutatingPolicy {
		if len(errs) > 0 {
			return OutcomeConditionError, append(append(why, errs...), "failurePolicy Fail: a condition error rejects the request")
		}
		return u.mutate(in, r, fail, why)
	}

	// Validating: collect the deny decisions, then apply validationActions.
	var denies, evalErrs []string
	if len(errs) > 0 {
		evalErrs = append(evalErrs, errs...)
	} else {
		for _, v := range u.validations {
			res, detail := v.evalBool(in)
			switch res {
			case condFalse:
				denies = append(denies, v.what+" is false: the request is denied")
			case condError:
				if fail {
					evalErrs = append(evalErrs, v.what+" errors: "+detail)
				}
			case condUnknown:
				unknowns = append(unknowns, v.what+" is unknown: "+detail)
			}
		}
		for _, a := range u.annotations {
			if _, res, detail := a.evalValue(in); res == condError && fail {
				evalErrs = append(evalErrs, a.what+" errors: "+detail)
			} else if res == condUnknown {
				unknowns = append(unknowns, a.what+" is unknown: "+detail)
			}
		}
	}
	enforced := false
	for _, a := range b.Spec.ValidationActions {
		enforced = enforced || a == admissionregistrationv1.Deny
	}
	switch {
	case (len(denies) > 0 || len(evalErrs) > 0) && !enforced:
		return "", nil // Warn and Audit only: logged, never rejected
	case len(denies) > 0:
		return OutcomeDenied, append(why, append(denies, "validationActions include Deny")...)
	case len(evalErrs) > 0:
		return OutcomeEvalError, append(why, append(evalErrs, "failurePolicy Fail and validationActions Deny: the error rejects the request")...)
	case len(unknowns) > 0 && enforced:
		return OutcomeUnknown, append(why, unknowns...)
	}
	return "", nil
}

// mutate applies the mutations in order to the modelled object.
func (u *policyUnit) mutate(in celInput, r StartupRequest, fail bool, why []string) (string, []string) {
	obj := in.object
	for i, m := range u.mutations {
		if obj == nil {
			return "", nil // DELETE: nothing to mutate
		}
		in.object = obj
		val, res, detail := m.evalValue(in)
		switch res {
		case condUnknown:
			return OutcomeUnknown, append(why, m.what+" is unknown: "+detail)
		case condError:
			if !fail {
				continue
			}
			return OutcomeEvalError, append(why, m.what+" errors: "+detail, "failurePolicy Fail: the error rejects the request")
		}
		v, ok := nativeValue(val)
		if !ok {
			return OutcomeUnknown, append(why, m.what+": its result is not plain data")
		}
		var next map[string]interface{}
		var err error
		var undecided string
		if u.patchTypes[i] == PatchTypeApplyConfiguration {
			next, undecided = applyConfiguration(obj, v)
		} else {
			next, err, undecided = applyPolicyPatch(obj, v, r)
		}
		switch {
		case undecided != "":
			return OutcomeUnknown, append(why, m.what+": "+undecided)
		case err != nil && fail:
			return OutcomeEvalError, append(why, m.what+" cannot apply to "+r.Kind+": "+err.Error(), "failurePolicy Fail: the failed patch rejects the request")
		case err != nil:
			continue
		}
		obj = next
	}
	return "", nil
}

// matchStatus is how a policy's or binding's match criteria see a request.
type matchStatus int

const (
	matchNo matchStatus = iota
	matchYes
	matchMaybe // resourceNames against a name the model does not know
	matchError // a selector that cannot be parsed
)

type criteriaMatch struct {
	status matchStatus
	gvr    schema.GroupVersionResource
	gvk    schema.GroupVersionKind
	why    []string
}

// matchConstraints is matching/matching.go Matches for one MatchResources.
func matchConstraints(mr *admissionregistrationv1.MatchResources, r StartupRequest, env matchEnv, what string) criteriaMatch {
	res := criteriaMatch{status: matchYes, gvr: r.GVR(), gvk: r.GVK()}
	ok, said, err := matchSelectors(mr.NamespaceSelector, mr.ObjectSelector, r, env)
	if err != nil {
		return criteriaMatch{status: matchError, why: []string{what + " " + err.Error()}}
	}
	if !ok {
		return criteriaMatch{status: matchNo}
	}
	for _, msg := range said {
		res.why = append(res.why, what+" "+msg)
	}
	policy := admissionregistrationv1.Equivalent
	if mr.MatchPolicy != nil {
		policy = *mr.MatchPolicy
	}
	maybe := false
	named := func(rules []admissionregistrationv1.NamedRuleWithOperations) func(i int) bool {
		return func(i int) bool {
			names := rules[i].ResourceNames
			if len(names) == 0 {
				return true
			}
			if r.unknownName {
				maybe = true
				return true
			}
			for _, n := range names {
				if n == r.Name {
					return true
				}
			}
			return false
		}
	}
	plain := func(rules []admissionregistrationv1.NamedRuleWithOperations) []admissionregistrationv1.RuleWithOperations {
		out := make([]admissionregistrationv1.RuleWithOperations, len(rules))
		for i, nr := range rules {
			out[i] = nr.RuleWithOperations
		}
		return out
	}
	if _, _, w, ex := matchRules(plain(mr.ExcludeResourceRules), policy, r, env, named(mr.ExcludeResourceRules)); ex && !maybe {
		return criteriaMatch{status: matchNo, why: []string{what + " excludeResourceRules: " + w}}
	}
	maybe = false
	if len(mr.ResourceRules) > 0 {
		gvr, gvk, w, ok := matchRules(plain(mr.ResourceRules), policy, r, env, named(mr.ResourceRules))
		if !ok {
			return criteriaMatch{status: matchNo}
		}
		res.gvr, res.gvk = gvr, gvk
		res.why = append(res.why, what+" "+w)
		if maybe {
			res.status = matchMaybe
			res.why = append(res.why, what+" resourceNames: the name "+r.Name+" stands for names that vary per cluster")
		}
	} else {
		res.why = append(res.why, what+" has no resourceRules: it matches every request")
	}
	return res
}

type paramStatus int

const (
	paramsFound paramStatus = iota
	paramsMissingDeny
	paramsMissingAllow
	paramsUnknown
)

type paramResult struct {
	status  paramStatus
	objects []map[string]interface{}
}

// resolveParams finds the binding's params among the objects the audit
// was given. When it was given no object of the param kind at all, it
// cannot tell a missing param from one it was not shown: unknown.
func resolveParams(pk *admissionregistrationv1.ParamKind, ref *admissionregistrationv1.ParamRef, objs []*Policy, r StartupRequest) (paramResult, []string) {
	deny := ref != nil && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.DenyAction
	if ref == nil {
		return paramResult{status: paramsMissingDeny}, []string{"paramKind " + pk.Kind + " is set but the binding has no paramRef: a configuration error"}
	}
	var ofKind []*Policy
	for _, o := range objs {
		if o.isOfKind(pk) {
			ofKind = append(ofKind, o)
		}
	}
	if len(ofKind) == 0 {
		return paramResult{status: paramsUnknown}, []string{fmt.Sprintf("no %s %s was given to the audit: whether the param (or its kind) exists decides it (missing, with parameterNotFoundAction Deny, rejects under failurePolicy Fail); pass the params with -f", pk.APIVersion, pk.Kind)}
	}
	var sel labels.Selector
	if ref.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return paramResult{status: paramsMissingDeny}, []string{"paramRef selector cannot be parsed: " + err.Error()}
		}
		sel = s
	}
	var found []map[string]interface{}
	for _, o := range ofKind {
		ns := ref.Namespace
		if ns == "" && o.Namespace != "" {
			if r.Namespace == "" {
				return paramResult{status: paramsUnknown}, []string{"a namespaced param kind without paramRef.namespace, for a cluster-scoped request: not modelled"}
			}
			ns = r.Namespace
		}
		if o.Namespace != ns {
			continue
		}
		if (ref.Name != "" && o.Name == ref.Name) || (sel != nil && sel.Matches(labels.Set(o.Labels))) {
			found = append(found, o.Object)
		}
	}
	if len(found) > 0 {
		return paramResult{status: paramsFound, objects: found}, []string{fmt.Sprintf("%d param(s) %s found", len(found), pk.Kind)}
	}
	what := fmt.Sprintf("no %s matches paramRef (name %q, namespace %q) among the %d given", pk.Kind, ref.Name, ref.Namespace, len(ofKind))
	if deny {
		return paramResult{status: paramsMissingDeny}, []string{what + "; parameterNotFoundAction Deny: a configuration error"}
	}
	return paramResult{status: paramsMissingAllow}, []string{what + "; parameterNotFoundAction Allow: the binding is not applied"}
}
