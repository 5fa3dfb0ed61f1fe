package diagnose

import (
	"bytes"
	"strings"
	"testing"
)

// A culprit's name, webhook, target and key come from etcd: the text
// report shows them escaped, as the notes and next commands that name it.
func TestWriteTextEscapesNamesFromEtcd(t *testing.T) {
	const evil = "w\x1b[31m\a\u202e"
	r := &Report{Verdict: "admission-deadlock", Summary: "s", Culprits: []Culprit{{Kind: "ValidatingWebhookConfiguration", Name: evil,
		Webhook: evil + ".example.com", FailurePolicy: "Fail", Target: "https://" + evil, Key: "/registry/validatingwebhookconfigurations/" + evil, FoundInEtcd: true}},
		Notes: []string{"ValidatingWebhookConfiguration " + evil + " is not in the log yet"}, Next: []string{"breakglass recover --delete " + evil}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"\x1b", "\a", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("output holds %q:\n%s", bad, out)
		}
	}
	const shown = `w\x1b[31m\x07\u202e`
	for _, want := range []string{"culprit: ValidatingWebhookConfiguration " + shown + "\n", "webhook " + shown + ".example.com, failurePolicy Fail, https://" + shown,
		"etcd key /registry/validatingwebhookconfigurations/" + shown, "note: ValidatingWebhookConfiguration " + shown, "  breakglass recover --delete " + shown} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not show %q:\n%s", want, out)
		}
	}
}
