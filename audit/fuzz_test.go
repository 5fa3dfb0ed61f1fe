package audit

import (
	"os"
	"testing"
)

// FuzzParseAuditFix: whatever the input, parsing does not panic; what
// parses can be audited, and a fix renders documents that parse back to the
// same configurations.
func FuzzParseAuditFix(f *testing.F) {
	files := testdataInputs()
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgs, err := ParseWebhookConfigurations(data)
		if err != nil {
			return
		}
		if _, err := Audit(cfgs, Options{}); err != nil {
			t.Fatal(err)
		}
		plan, err := PlanFix(cfgs, FixStyle{All: true})
		if err != nil {
			return // e.g. too many conditions, or a fix that fails its own audit
		}
		out, err := plan.Render()
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		again, err := ParseWebhookConfigurations(out)
		if err != nil {
			t.Fatalf("fixed output does not parse: %v\n%s", err, out)
		}
		if len(again) != len(cfgs) {
			t.Fatalf("%d configurations after the fix, %d before", len(again), len(cfgs))
		}
	})
}
