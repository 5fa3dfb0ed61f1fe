package kinds

import (
	"strings"
	"testing"
)

func TestVocabularies(t *testing.T) {
	seen := map[string]bool{}
	for _, i := range All {
		for _, name := range []string{i.Kind, i.Resource, i.Short} {
			if seen[name] {
				t.Errorf("%s named twice", name)
			}
			seen[name] = true
		}
		if i.Resource != strings.ToLower(i.Kind)+"s" && i.Resource != strings.ToLower(strings.TrimSuffix(i.Kind, "y"))+"ies" {
			t.Errorf("%s: resource %s is not the kind's plural", i.Kind, i.Resource)
		}
		for name, f := range map[string]func(string) (Info, bool){i.Kind: ByKind, i.Resource: ByResource, i.Short: ByShort} {
			if got, ok := f(name); !ok || got != i {
				t.Errorf("lookup of %s: %+v %v", name, got, ok)
			}
		}
		if strings.HasPrefix(i.Plugin, "Validating") != strings.HasPrefix(i.Kind, "Validating") ||
			strings.HasSuffix(i.Plugin, "Webhook") != strings.HasSuffix(i.Kind, "WebhookConfiguration") {
			t.Errorf("%s: plugin %s", i.Kind, i.Plugin)
		}
	}
	if _, ok := ByKind("validatingwebhookconfiguration"); ok {
		t.Error("lookups are exact")
	}
}
