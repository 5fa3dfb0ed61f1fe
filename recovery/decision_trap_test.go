package recovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
)

// The MutatingAdmissionPolicy gate trap is fixed by flags: a guided
// recovery stops before any change and names the flag change.
func TestDecideMutatingAdmissionPolicyTrap(t *testing.T) {
	ev := &diagnose.Evidence{HealthAsked: true, Nodes: []diagnose.NodeEvidence{{
		Node: "127.0.0.11", NodeName: "cp-1", Image: "registry.k8s.io/kube-apiserver:v1.34.4",
		FeatureGates: []string{"MutatingAdmissionPolicy=true"}, RuntimeConfig: []string{"admissionregistration.k8s.io/v1alpha1=true"},
		Pod:    &diagnose.Pod{Found: true, Running: true},
		Readyz: &diagnose.Readyz{Node: "127.0.0.11", FailingChecks: []string{"poststarthook/rbac/bootstrap-roles"}},
	}}}
	d, err := decide(diagnose.Analyze(ev, diagnose.Options{}), RecoverOptions{Steps: webhookRunbookSteps()})
	var nd *NotDeadlockError
	if !errors.As(err, &nd) || nd.Verdict != diagnose.OtherFailure {
		t.Fatalf("err %v, decision %+v", err, d)
	}
	if len(admissionOf(d).Plugins) > 0 || !strings.Contains(strings.Join(nd.Hints(), "\n"), "runtime-config") {
		t.Errorf("plugins %v, hints %q", admissionOf(d).Plugins, nd.Hints())
	}
}
