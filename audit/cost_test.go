package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// nestedAll is n nested .all() over ten elements: 10^n steps, and always
// true. Seven of them (10^7 steps) is far over kube-apiserver's CEL cost
// limit, which stops such an evaluation with an error.
func nestedAll(n int) string {
	e := "true"
	for i := n; i > 0; i-- {
		e = fmt.Sprintf("[0,1,2,3,4,5,6,7,8,9].all(x%d, %s)", i, e)
	}
	return e
}

func webhookWithCondition(expr string) string {
	return `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: costly
webhooks:
- name: costly.example.com
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://127.0.0.1:9443/validate
  rules:
  - operations: ["CREATE"]
    apiGroups: ["networking.k8s.io"]
    apiVersions: ["*"]
    resources: ["servicecidrs"]
  matchConditions:
  - name: costly
    expression: '` + expr + `'
`
}

// costlyFinding audits a webhookWithCondition document: the finding of its
// webhook (zero when there is none), and the reasons of what it blocks.
func costlyFinding(t *testing.T, doc string) (Finding, string) {
	t.Helper()
	cfgs, err := ParseNamed("costly.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Audit(cfgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := rep.Find("costly", "costly.example.com")
	var why []string
	for _, b := range f.Blocks {
		why = append(why, b.Why...)
	}
	return f, strings.Join(why, "\n")
}

// Issue 21, case 9: a matchCondition whose evaluation goes over
// kube-apiserver's per-call CEL cost limit is unknown, with the reason;
// on main the audit evaluated it to the end (10^7 steps, true), with no
// limit, and said deadlock as if kube-apiserver could evaluate it.
func TestAuditCELCostLimit(t *testing.T) {
	f, why := costlyFinding(t, webhookWithCondition(nestedAll(7)))
	if f.Risk != RiskUnknown {
		t.Fatalf("finding %+v, want risk unknown", f)
	}
	if !strings.Contains(why, "over kube-apiserver's CEL cost limit (1000000 per expression)") {
		t.Errorf("no reason names the cost limit: %q", why)
	}
	// Under the limit, the same shape is evaluated: three levels are 1000 steps.
	if f, _ := costlyFinding(t, webhookWithCondition(nestedAll(3))); f.Risk != RiskDeadlock {
		t.Errorf("three nested .all(): risk %s, want deadlock (the condition is true)", f.Risk)
	}
}

// Five nested .all() cost 455551: each stays under the per-call limit, and
// five of them under the 2500000 all of a webhook's matchConditions share
// per request, but not six.
func TestAuditCELMatchConditionsBudget(t *testing.T) {
	audit := func(conditions int) (Finding, string) {
		t.Helper()
		doc := webhookWithCondition(nestedAll(5))
		for i := 1; i < conditions; i++ {
			doc += fmt.Sprintf("  - name: costly%d\n    expression: '%s'\n", i, nestedAll(5))
		}
		return costlyFinding(t, doc)
	}
	if f, why := audit(5); f.Risk != RiskDeadlock {
		t.Errorf("five conditions: risk %s (%s), want deadlock: they are all true, within the budget", f.Risk, why)
	}
	if f, why := audit(6); f.Risk != RiskUnknown || !strings.Contains(why, "CEL cost budget (2500000 for one webhook's matchConditions on one request)") {
		t.Errorf("six conditions: risk %s, why %q: want unknown, over the matchConditions budget", f.Risk, why)
	}
}

// The audit stops when its context is cancelled, even inside one CEL
// evaluation, and returns the cancellation's cause.
func TestAuditContextStopsCEL(t *testing.T) {
	cfgs, err := ParseNamed("costly.yaml", []byte(webhookWithCondition(nestedAll(5))))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("interrupted by SIGTERM")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if _, err = AuditContext(ctx, cfgs, Options{}); !errors.Is(err, cause) {
		t.Fatalf("err %v, want the cause", err)
	}
}
