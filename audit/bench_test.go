package audit

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkAuditTestdata audits every webhook of the test data against the
// 1.34 model, with new-cluster writes.
func BenchmarkAuditTestdata(b *testing.B) {
	files := testdataInputs()
	var cfgs []Configuration
	for _, f := range files {
		cfgs = append(cfgs, parseFile(b, filepath.Base(f))...)
	}
	n := 0
	for _, c := range cfgs {
		n += len(c.webhooks())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Audit(cfgs, Options{IncludeNewCluster: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "webhooks")
}

// BenchmarkPlanFixIncident is the fix of the incident's webhook, with both
// audits and the ordinary-request check.
func BenchmarkPlanFixIncident(b *testing.B) {
	cfgs := parseFile(b, "incident-kyverno-like.yaml")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := PlanFix(cfgs, FixStyle{}); err != nil {
			b.Fatal(err)
		}
	}
}

// The extraArgs check of a control plane's config against the next minor
// (the records are decoded once per process, on first use).
func BenchmarkCheckExtraArgs(b *testing.B) {
	data, err := os.ReadFile("testdata/machineconfig/refused-flags-string.yaml")
	if err != nil {
		b.Fatal(err)
	}
	ea, err := MachineConfigArgs("cp", data)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if fs, err := CheckExtraArgs([]ExtraArgs{ea}, "1.33", "1.34"); err != nil || len(fs) != 6 {
			b.Fatal(len(fs), err)
		}
	}
}
