package apiserverargs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
)

func TestValidPluginName(t *testing.T) {
	for s, want := range map[string]bool{"ValidatingAdmissionWebhook": true, "NodeRestriction": true, "A": false, "validating": false, "Validating-Webhook": false} {
		if apiserverargs.ValidPluginName(s) != want {
			t.Errorf("ValidPluginName(%q) != %v", s, want)
		}
	}
}

func TestCheckPlugin(t *testing.T) {
	for in, want := range map[string]string{
		"ValidatingAdmissionWebhook": "",
		"validatingadmissionwebhook": "did you mean ValidatingAdmissionWebhook?",
		"ValidatingAdmisionWebhook":  "did you mean ValidatingAdmissionWebhook?",
		"MutatingAdmissionPolcy":     "did you mean MutatingAdmissionPolicy?",
		"FooBar":                     "e.g. ValidatingAdmissionWebhook",
	} {
		err := apiserverargs.CheckPlugin(in)
		var pe *apiserverargs.PluginError
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", in, err)
		case want != "":
			if !errors.As(err, &pe) || !strings.Contains(pe.Hint(), want) {
				t.Errorf("%s: %v, want a hint saying %q", in, err, want)
			}
		}
	}
}
