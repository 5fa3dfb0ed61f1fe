package lab

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/labflags"
)

// ArgsSampleEnv set to "all" checks every recorded name, not a sample.
const ArgsSampleEnv = "BREAKGLASS_ARGS_SAMPLE"

// The names the incident and the issue are about, asked of every binary.
var namedArgs = ArgCandidates{
	Flags: []string{"cloud-provider", "cloud-config", "feature-gates", "runtime-config", "enable-admission-plugins", "disable-admission-plugins", "insecure-port"},
	Gates: []string{"MultiCIDRServiceAllocator", "SidecarContainers", "ConsistentListFromCache", "WatchFromStorageWithoutResourceVersion",
		"MutatingAdmissionPolicy", "NoSuchGate", "AllAlpha"},
	GroupVersions: []string{"admissionregistration.k8s.io/v1alpha1", "admissionregistration.k8s.io/v1beta1", "batch/v2alpha1", "foo.k8s.io/v1"},
}

// What each recorded binary accepts, asked again of the binary: --help in
// full, the refusals' words, the names the issue is about and a sample of
// the rest (BREAKGLASS_ARGS_SAMPLE=all: everything). A rebuilt binary that
// answers otherwise fails here; refresh the record with
// `go run ./lab/recordargs VERSION`. Every version the lab builds must have
// a record, and with CI=true its binary.
//
// It runs beside the other lab tests, one version after another in the
// order they are built: while make test builds binaries beside the tests,
// each version waits for its own (needKubeBinaries), holding one of the
// package's -parallel slots, not one per version.
func TestRecordedArgsMatchBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lab's kube-apiserver binaries: skipped with -short")
	}
	t.Parallel() // beside the other lab tests (parallel_test.go)
	if got := apiserverargs.Versions(); !slices.Equal(got, Versions) {
		t.Errorf("recorded %v, the lab builds %v: go run ./lab/recordargs", got, Versions)
	}
	entries, err := os.ReadDir("kubeapiserver")
	if err != nil {
		t.Fatal(err)
	}
	var modules []string
	for _, e := range entries {
		modules = append(modules, e.Name())
	}
	if !slices.Equal(modules, Versions) {
		t.Errorf("lab/kubeapiserver holds %v, lab.Versions says %v", modules, Versions)
	}
	all := os.Getenv(ArgsSampleEnv) == "all"
	for _, v := range Versions {
		t.Run(v, func(t *testing.T) {
			dir := needKubeBinaries(t, v)
			rec, err := apiserverargs.For(v)
			if err != nil {
				t.Fatalf("%v: record it with go run ./lab/recordargs %s", err, v)
			}
			sample := ArgsSample(rec, 12, 0, namedArgs)
			if all {
				sample = ArgsSample(rec, 1, 0, namedArgs)
			}
			start := time.Now()
			diffs, err := CheckArgsRecord(context.Background(), filepath.Join(dir, v, "kube-apiserver"), rec, sample, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: asked about %d flags, %d gates, %d group versions and --help in %s", v, len(sample.Flags), len(sample.Gates), len(sample.GroupVersions), time.Since(start).Round(time.Millisecond))
			if len(diffs) > 0 {
				t.Errorf("%s answers otherwise than its record (refresh it: go run ./lab/recordargs %s):\n  %s", v, v, strings.Join(diffs, "\n  "))
			}
		})
	}
}

func TestSortAggregate(t *testing.T) {
	for in, want := range map[string]string{
		"plain error":                     "plain error",
		"[b is on, but needs: [x, y], a]": "[a, b is on, but needs: [x, y]]",
		"[only one]":                      "[only one]",
		"[c, b, a]":                       "[a, b, c]",
		"[unbalanced [x, y, z]":           "[unbalanced [x, y, z]",
	} {
		if got := sortAggregate(in); got != want {
			t.Errorf("sortAggregate(%q) = %q, want %q", in, got, want)
		}
	}
}

// The flags the lab's commands name its scenarios with are the lab's own.
func TestScenarioFlagsName(t *testing.T) {
	if !slices.Equal(labflags.UpScenarios, Scenarios()) {
		t.Errorf("labflags.UpScenarios %v, lab.Scenarios() %v", labflags.UpScenarios, Scenarios())
	}
	for _, s := range labflags.RehearseScenarios[1:] {
		if !isFlagsScenario(s) && s != ScenarioEtcdNoSpace && !isEtcdLossScenario(s) {
			t.Errorf("rehearse names %s, not a flags scenario, etcd-nospace or an etcd loss", s)
		}
	}
	if labflags.RehearseScenarios[0] != ScenarioKyvernoServiceCIDR || len(labflags.RehearseScenarios) != len(FlagsScenarios)+4 {
		t.Errorf("rehearse scenarios %v", labflags.RehearseScenarios)
	}
}
