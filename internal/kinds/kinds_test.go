package kinds

import (
	"slices"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

func TestVocabularies(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range All {
		for _, name := range []string{k.Kind(), k.Resource(), k.Short()} {
			if seen[name] {
				t.Errorf("%s named twice", name)
			}
			seen[name] = true
		}
		if k.Resource() != strings.ToLower(k.Kind())+"s" && k.Resource() != strings.ToLower(strings.TrimSuffix(k.Kind(), "y"))+"ies" {
			t.Errorf("%s: resource %s is not the kind's plural", k.Kind(), k.Resource())
		}
		for name, f := range map[string]func(string) (Kind, bool){k.Resource(): ByResource, k.Short(): ByShort} {
			if got, ok := f(name); !ok || got != k {
				t.Errorf("lookup of %s: %+v %v", name, got, ok)
			}
		}
		if strings.HasPrefix(k.Plugin(), "Validating") != strings.HasPrefix(k.Kind(), "Validating") ||
			strings.HasSuffix(k.Plugin(), "Webhook") != strings.HasSuffix(k.Kind(), "WebhookConfiguration") {
			t.Errorf("%s: plugin %s", k.Kind(), k.Plugin())
		}
	}
	if len(names) != len(All) {
		t.Errorf("%d kinds named, %d listed", len(names), len(All))
	}
	if _, ok := ByShort("Validating"); ok {
		t.Error("lookups are exact")
	}
	if _, ok := ByResource("ValidatingWebhookConfigurations"); ok {
		t.Error("lookups are exact")
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string][]Kind{
		"validating":                     {ValidatingWebhookConfigurations},
		"mutating":                       {MutatingWebhookConfigurations},
		"all":                            All,
		"":                               All,
		"ValidatingWebhookConfiguration": {ValidatingWebhookConfigurations},
		"mutatingadmissionpolicies":      {MutatingAdmissionPolicies},
	} {
		got, err := Parse(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if got, _ := Parse("policy"); len(got) != 4 || slices.Contains(got, ValidatingWebhookConfigurations) {
		t.Errorf("policy = %v", got)
	}
	if _, err := Parse("webhookz"); failure.Code(err) != int(failure.BadInput) {
		t.Errorf("unknown kind: %v, want bad input", err)
	}
}
