package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Issue 29: audit --fix said "stopping cleanly" at SIGTERM and ran to the
// end. Its last check, that the fix changes nothing for ordinary users'
// requests, evaluated every webhook's matchConditions without the
// context. Here the conditions are cheap for kube-apiserver's own writes
// (they decide at once) and costly for anyone else (each evaluation runs
// to kube-apiserver's cost limit), so the audits before and after the fix
// are quick and the ordinary check is long; cancelled meanwhile, the plan
// must end with the context's cause, not a plan.
func TestPlanFixStopsInTheOrdinaryCheck(t *testing.T) {
	costly := "true"
	for i := 7; i > 0; i-- {
		costly = fmt.Sprintf("[0,1,2,3,4,5,6,7,8,9].all(x%d, %s)", i, costly)
	}
	var docs []string
	for i := range 40 {
		docs = append(docs, fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: costly-%d
webhooks:
- name: costly-%d.example.com
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://example.com/validate
  rules:
  - operations: ["*"]
    apiGroups: ["*"]
    apiVersions: ["*"]
    resources: ["*"]
  matchConditions:
  - name: costly
    expression: "request.userInfo.username == 'system:apiserver' || %s"
`, i, i, costly))
	}
	cfgs := parseYAML(t, strings.Join(docs, "---\n"))
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("interrupted by SIGTERM")
	time.AfterFunc(2*time.Second, func() { cancel(stop) })
	done := make(chan error, 1)
	go func() {
		plan, err := PlanFixContext(ctx, cfgs, FixStyle{})
		if err == nil && plan != nil {
			err = errors.New("a plan")
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the fix still plans a minute after it was cancelled")
	}
	if !errors.Is(err, stop) {
		t.Errorf("PlanFixContext cancelled: %v, want the context's cause", err)
	}
}
