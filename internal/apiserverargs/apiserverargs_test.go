package apiserverargs

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// The facts the issue and LAB.md state, as the records hold them (the lab's
// TestRecordedArgsMatchBinaries checks the records against the binaries).
func TestRecordedFacts(t *testing.T) {
	get := func(v string) *Binary {
		t.Helper()
		b, err := For(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v32, v33, v34 := get("v1.32.13"), get("1.33"), get("v1.34")
	for _, tc := range []struct {
		name string
		got  Answer
		want Answer
	}{
		{"1.34 MultiCIDRServiceAllocator=false", v34.SetGate("MultiCIDRServiceAllocator", false),
			Answer{Refused: "cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true"}},
		{"1.33 MultiCIDRServiceAllocator=false", v33.SetGate("MultiCIDRServiceAllocator", false),
			Answer{Warning: "Setting GA feature gate MultiCIDRServiceAllocator=false. It will be removed in a future release."}},
		{"1.32 MultiCIDRServiceAllocator=false", v32.SetGate("MultiCIDRServiceAllocator", false), Answer{}},
		{"1.34 SidecarContainers=false", v34.SetGate("SidecarContainers", false),
			Answer{Refused: "cannot set feature gate SidecarContainers to false, feature is locked to true"}},
		{"1.34 ConsistentListFromCache=false", v34.SetGate("ConsistentListFromCache", false),
			Answer{Refused: "cannot set feature gate ConsistentListFromCache to false, feature is locked to true"}},
		{"1.33 WatchFromStorageWithoutResourceVersion=true", v33.SetGate("WatchFromStorageWithoutResourceVersion", true),
			Answer{Refused: "cannot set feature gate WatchFromStorageWithoutResourceVersion to true, feature is locked to false"}},
		{"1.32 WatchFromStorageWithoutResourceVersion=true", v32.SetGate("WatchFromStorageWithoutResourceVersion", true), Answer{}},
		{"1.34 NoSuchGate=true", v34.SetGate("NoSuchGate", true), Answer{Refused: "unrecognized feature gate: NoSuchGate"}},
		{"1.32 --cloud-provider", v32.SetFlag("cloud-provider"), Answer{Warning: "Flag --cloud-provider has been deprecated, will be removed in a future version"}},
		{"1.34 --cloud-provider", v34.SetFlag("cloud-provider"), Answer{Refused: "Error: unknown flag: --cloud-provider"}},
		{"1.34 runtime-config batch/v2alpha1", v34.RuntimeConfig("batch/v2alpha1"), Answer{Refused: "group version batch/v2alpha1 that has not been registered"}},
		{"1.34 runtime-config foo.k8s.io/v1", v34.RuntimeConfig("foo.k8s.io/v1"), Answer{Refused: "unknown api groups foo.k8s.io"}},
		{"1.34 runtime-config admissionregistration.k8s.io/v1beta1", v34.RuntimeConfig("admissionregistration.k8s.io/v1beta1"), Answer{}},
		{"1.34 runtime-config apps/v1/deployments", v34.RuntimeConfig("apps/v1/deployments"), Answer{}},
		{"1.34 runtime-config api/all", v34.RuntimeConfig("api/all"), Answer{}},
		{"1.34 runtime-config apiextensions.k8s.io/v1", v34.RuntimeConfig("apiextensions.k8s.io/v1"), Answer{Unknown: true}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
	if g, ok := v34.Gate("MultiCIDRServiceAllocator"); !ok || g.Stage != StageGA || g.LockedTo == nil || !*g.LockedTo {
		t.Errorf("1.34 MultiCIDRServiceAllocator: %+v", g)
	}
	if f, ok := v32.Flag("cloud-provider"); !ok || !f.Hidden {
		t.Errorf("1.32 --cloud-provider is accepted and hidden from --help: %+v %t", f, ok)
	}
	if got := v34.LogLine("unrecognized feature gate: X"); got != `"command failed" err="unrecognized feature gate: X"` {
		t.Errorf("log line %s", got)
	}
}

func TestFor(t *testing.T) {
	if len(Versions()) < 3 {
		t.Fatalf("recorded: %v", Versions())
	}
	for _, v := range Versions() {
		b, err := For(v)
		if err != nil || b.Version != v {
			t.Errorf("For(%s): %v %v", v, b, err)
		}
		m, _, _ := ParseVersion(v)
		if b2, err := For("1." + strings.Split(v, ".")[1]); err != nil || b2 != b {
			t.Errorf("For(minor of %s, %d): %v", v, m, err)
		}
		if len(b.Flags) < 100 || len(b.Gates) < 100 || len(b.GroupVersions) < 20 {
			t.Errorf("%s: %d flags, %d gates, %d group versions: a record that lost most of them", v, len(b.Flags), len(b.Gates), len(b.GroupVersions))
		}
	}
	var nr *NotRecordedError
	if _, err := For("1.99"); !errors.As(err, &nr) {
		t.Errorf("1.99: %v", err)
	}
	if _, err := For("banana"); !errors.As(err, &nr) {
		t.Errorf("banana: %v", err)
	}
}

// Decode is strict, and a record written back is the file byte for byte.
func TestDecodeRoundTrip(t *testing.T) {
	for _, v := range Versions() {
		data, err := os.ReadFile("recorded/" + v + ".json")
		if err != nil {
			t.Fatal(err)
		}
		b, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		out, err := b.Encode()
		if err != nil || string(out) != string(data) {
			t.Errorf("%s: encoded again differs from the file (%v)", v, err)
		}
	}
	for _, bad := range []string{`{"version":"v1.34.4","extra":1}`, `{"version":"x"}`, `{"version":"v1.34.4","words":{"unknownFlag":"no placeholder"}}`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%s) accepted", bad)
		}
	}
}

// Decoding every record: what the first lookup of a process costs.
func BenchmarkDecodeRecords(b *testing.B) {
	var files [][]byte
	for _, v := range Versions() {
		data, err := os.ReadFile("recorded/" + v + ".json")
		if err != nil {
			b.Fatal(err)
		}
		files = append(files, data)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for _, f := range files {
			if _, err := Decode(f); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// From 1.36 kube-apiserver logs a GA gate's warning structured; the record
// still knows the stage from it.
func TestRecordedStructuredWarnings(t *testing.T) {
	for _, v := range []string{"1.36", "1.37"} {
		b, err := For(v)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := b.Gate("MultiCIDRServiceAllocator")
		if g.Stage != StageGA || !strings.Contains(g.True.Warning, `featureGate="MultiCIDRServiceAllocator" value=true`) {
			t.Errorf("%s: %+v", v, g)
		}
		for _, g := range b.Gates {
			if g.Stage == "" {
				t.Errorf("%s: gate %s has no stage", v, g.Name)
			}
		}
	}
}
