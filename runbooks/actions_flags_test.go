package runbooks

import (
	"slices"
	"strings"
	"testing"
)

// The runbook of kube-apiserver refusing its own flags: no admission plugin
// goes off, nothing is deleted, and no restore follows (the edit stays).
func TestBuiltinAPIServerFlags(t *testing.T) {
	rb, err := Get("apiserver-flags")
	if err != nil {
		t.Fatal(err)
	}
	want := []Action{ActionPreflight, ActionDiagnose, ActionExtraArgsRemove, ActionAPIServerWait}
	if got := actionsOf(rb); !slices.Equal(got, want) {
		t.Errorf("actions %q, want %q", got, want)
	}
	s := rb.Step("remove-flags")
	if s == nil || !s.Confirm || s.Optional || len(s.Params.(*ExtraArgsRemoveParams).Flags) != 0 {
		t.Errorf("remove-flags: %+v", s)
	}
	for _, w := range []string{"Omni template", "revert", "cluster.apiServer.extraArgs"} {
		if !strings.Contains(rb.Metadata.Description, w) {
			t.Errorf("the description does not say %q", w)
		}
	}
}

func TestExtraArgsRemoveParams(t *testing.T) {
	for _, ok := range []string{"cloud-provider", "feature-gates:MultiCIDRServiceAllocator=false", "feature-gates:kube:X=true", "runtime-config:networking.k8s.io/v1alpha1"} {
		if _, _, err := ParseExtraArgFlag(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	if k, it, _ := ParseExtraArgFlag("feature-gates:kube:X=true"); k != "feature-gates" || it != "kube:X=true" {
		t.Errorf("%q %q", k, it)
	}
	for _, bad := range []string{"", "--cloud-provider", "Feature-Gates", "feature-gates:", "feature-gates:A=true,B=false", "x:a b"} {
		if _, _, err := ParseExtraArgFlag(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	rb, err := Load([]byte("apiVersion: breakglass.dev/v1alpha1\nkind: Runbook\nmetadata:\n  name: x\nspec:\n  steps:\n  - name: rm\n    action: extraargs.remove\n    with:\n      flags: [cloud-provider, \"feature-gates:NoSuchGate=true\"]\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := rb.Spec.Steps[0].Params.(*ExtraArgsRemoveParams); !slices.Equal(p.Flags, []string{"cloud-provider", "feature-gates:NoSuchGate=true"}) || !rb.Spec.Steps[0].Confirm {
		t.Errorf("%+v", rb.Spec.Steps[0])
	}
	_, err = Load([]byte("apiVersion: breakglass.dev/v1alpha1\nkind: Runbook\nmetadata:\n  name: x\nspec:\n  steps:\n  - name: rm\n    action: extraargs.remove\n    with:\n      flags: [\"--cloud-provider\"]\n"), "x.yaml")
	if err == nil || !strings.Contains(err.Error(), "x.yaml:10") {
		t.Errorf("a bad flag: %v", err)
	}
}
