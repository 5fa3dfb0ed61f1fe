package audit

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// addPolicyConditions adds the fix's conditions to every admission policy
// at risk (every one with FixStyle.All) as the policy's own
// matchConditions: bindings have none, and the policy's apply to each of
// its bindings. A policy whose risk a matchCondition cannot remove (a
// missing param: params are resolved first) is left as it is, with a note.
// It returns the (configuration, -1) pairs the fix is for.
func (plan *FixPlan) addPolicyConditions(cfgs []Configuration, add []admissionregistrationv1.MatchCondition) ([][2]int, error) {
	var selected [][2]int
	for ci, c := range cfgs {
		if c.Kind != ValidatingPolicy && c.Kind != MutatingPolicy {
			continue
		}
		risk, helps := RiskNone, true
		for _, f := range plan.Before.Findings {
			if f.configIndex != ci || f.Risk == RiskNone {
				continue
			}
			if f.Risk.severity() > risk.severity() {
				risk = f.Risk
			}
			if f.Fix == "" {
				helps = false
				plan.Partial = true
				plan.Notes = append(plan.Notes, fmt.Sprintf("%s is %s and a matchCondition cannot change that: %s", f.Subject(), f.Risk, strings.Join(f.Reasons, "; ")))
			}
		}
		if !helps || (!plan.Style.All && risk == RiskNone) {
			continue
		}
		selected = append(selected, [2]int{ci, -1})
		pc := plan.patched[ci]
		existing := pc.matchConditions(-1)
		added := conditionsToAdd(existing, add)
		if len(added) == 0 {
			continue
		}
		if len(existing)+len(added) > maxMatchConditions {
			return nil, &TooManyConditionsError{Configuration: c.Name(), Webhook: c.Policy.Kind, Existing: len(existing)}
		}
		pc.setMatchConditions(-1, append(append([]admissionregistrationv1.MatchCondition{}, existing...), added...))
		plan.Changes = append(plan.Changes, FixChange{Configuration: c.Name(), Kind: c.Kind, Index: -1, Added: added, RiskBefore: risk, config: ci})
	}
	if len(selected) > 0 {
		plan.Notes = append(plan.Notes, "admission policies get the condition in the policy's spec.matchConditions, which every binding shares; "+
			"a binding cannot exclude a user (its matchResources selects resources only)")
	}
	return selected, nil
}

// policyOrdinaryDiffs lists the ordinary requests whose outcome under an
// admission policy differs between the original and the patched input.
func policyOrdinaryDiffs(orig, patched []Configuration, env matchEnv) []string {
	key := func(f Finding) string { return f.Subject() }
	outcomes := func(cfgs []Configuration) map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, f := range auditPolicies(cfgs, ordinaryRequests(), env) {
			m := map[string]string{}
			for _, b := range f.Blocks {
				m[b.Request+" by "+b.userInfo().Username] = b.Outcome
			}
			out[key(f)] = m
		}
		return out
	}
	before, after := outcomes(orig), outcomes(patched)
	var diffs []string
	for _, f := range auditPolicies(patched, ordinaryRequests(), env) {
		b, a := before[key(f)], after[key(f)]
		for _, r := range ordinaryRequests() {
			k := r.String() + " by " + r.userInfo().Username
			if b[k] != a[k] {
				diffs = append(diffs, fmt.Sprintf("%s: %s changes from %q to %q", f.Subject(), k, b[k], a[k]))
			}
		}
	}
	return diffs
}

func (p *Policy) deepCopy() *Policy {
	out := *p
	out.Object, _ = copyJSON(p.Object).(map[string]interface{})
	out.Spec.MatchConditions = append([]admissionregistrationv1.MatchCondition(nil), p.Spec.MatchConditions...)
	return &out
}

// setMatchConditions sets spec.matchConditions in the model and in Object.
func (p *Policy) setMatchConditions(mc []admissionregistrationv1.MatchCondition) {
	p.Spec.MatchConditions = mc
	spec, _ := p.Object["spec"].(map[string]interface{})
	if spec == nil {
		spec = map[string]interface{}{}
		p.Object["spec"] = spec
	}
	list := make([]interface{}, len(mc))
	for i, c := range mc {
		list[i] = map[string]interface{}{"name": c.Name, "expression": c.Expression}
	}
	spec["matchConditions"] = list
}

// cleanObject is the object without what the server sets.
func (p *Policy) cleanObject() map[string]interface{} {
	o, _ := copyJSON(p.Object).(map[string]interface{})
	delete(o, "status")
	if md, ok := o["metadata"].(map[string]interface{}); ok {
		for _, k := range []string{"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp"} {
			delete(md, k)
		}
	}
	return o
}
