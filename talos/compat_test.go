package talos

import (
	"strings"
	"testing"
)

// The machinery's table, as talosctl upgrade-k8s reads it: Talos 1.13 runs
// Kubernetes 1.31 to 1.36, 1.10 runs 1.28 to 1.33; a Talos minor the table
// has no row for is not known either way.
func TestSupportsKubernetes(t *testing.T) {
	for _, tc := range []struct {
		talos, k8s         string
		known, supported   bool
		min, max, inReason string
	}{
		{"v1.13.8", "1.34", true, true, "1.31", "1.36", ""},
		{"v1.13.8", "v1.36.3", true, true, "1.31", "1.36", ""},
		{"v1.13.0", "1.37", true, false, "1.31", "1.36", "too new"},
		{"v1.13.8", "1.30.2", true, false, "1.31", "1.36", "too old"},
		{"v1.10.6", "1.34", true, false, "1.28", "1.33", "too new"},
		{"v1.11.3", "1.34.4", true, true, "1.29", "1.34", ""},
		{"v1.14.0", "1.34", false, false, "", "", "not supported"},
	} {
		s, err := SupportsKubernetes(tc.talos, tc.k8s)
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.talos, tc.k8s, err)
		}
		if s.Known != tc.known || s.Supported != tc.supported || s.Min != tc.min || s.Max != tc.max || (tc.inReason != "" && !strings.Contains(s.Reason, tc.inReason)) {
			t.Errorf("%s runs %s: %+v", tc.talos, tc.k8s, s)
		}
	}
	if _, err := SupportsKubernetes("banana", "1.34"); err == nil {
		t.Error("a Talos version that is none was read")
	}
	if NewestTalosInTable() != "1.13" {
		t.Errorf("newest %s", NewestTalosInTable())
	}
}
