package upgradecheck

import (
	"strings"
	"testing"
)

// --to and --from are read once, as talosctl upgrade-k8s takes them; what
// is not a version, or one breakglass does not know, is refused there.
func TestParseMinor(t *testing.T) {
	for in, want := range map[string]Minor{"1.35": 35, "1.35.0": 35, "v1.35.0": 35, " 1.32 ": 32, "1.37.2-rc.1": 37} {
		if got, err := ParseMinor(in); got != want || err != nil {
			t.Errorf("ParseMinor(%q) = %v, %v", in, got, err)
		}
	}
	for in, says := range map[string]string{"": "not a Kubernetes version", "banana": "not a Kubernetes version", "2.35": "not a Kubernetes version",
		"1.35.x": "not a Kubernetes version", "1.31": "1.31 is outside what breakglass knows (1.32 to 1.37)", "v1.38.0": "1.38 is outside"} {
		if got, err := ParseMinor(in); err == nil || got != 0 || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseMinor(%q) = %v, %v; want an error saying %q", in, got, err, says)
		}
	}
	if Minor(34).String() != "1.34" || Minor(0).String() != "" {
		t.Errorf("String: %q %q", Minor(34), Minor(0))
	}
}
