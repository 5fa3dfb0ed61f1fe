package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	goldenfile "github.com/breakglass-dev/breakglass/internal/golden"
)

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", "golden", name), got)
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"incident", "incident-kyverno-like.yaml"},
		{"kind-exclusions", "incident-kind-exclusions.yaml"},
		{"gatekeeper", "gatekeeper.yaml"},
		{"authorizer", "authorizer-condition.yaml"},
	} {
		rep, err := Audit(parseFile(t, tc.file), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var txt bytes.Buffer
		if err := WriteTable(&txt, rep); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name+".txt", txt.Bytes())
		var js bytes.Buffer
		if err := WriteJSON(&js, rep); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name+".json", js.Bytes())
	}
	plan, err := PlanFix(parseFile(t, "incident-kyverno-like.yaml"), FixStyle{Exclusion: ExcludeIncidentKinds})
	if err != nil {
		t.Fatal(err)
	}
	var sum bytes.Buffer
	if err := WriteFixSummary(&sum, plan); err != nil {
		t.Fatal(err)
	}
	golden(t, "fix-kinds-summary.txt", sum.Bytes())
}

// The JSON field names are an interface (runbooks, -o json): keep them.
func TestJSONFieldNames(t *testing.T) {
	rep, err := Audit(parseFile(t, "incident-kyverno-like.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		KubernetesVersion string                   `json:"kubernetesVersion"`
		Risk              string                   `json:"risk"`
		Findings          []map[string]interface{} `json:"findings"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Risk != "deadlock" || doc.KubernetesVersion != "1.34" || len(doc.Findings) != 1 {
		t.Fatalf("%+v", doc)
	}
	f := doc.Findings[0]
	for _, k := range []string{"configuration", "webhook", "kind", "risk", "blocks", "reasons", "failurePolicy", "timeoutSeconds", "fix"} {
		if _, ok := f[k]; !ok {
			t.Errorf("finding lacks %q", k)
		}
	}
	b := f["blocks"].([]interface{})[0].(map[string]interface{})
	for _, k := range []string{"id", "request", "operation", "group", "version", "resource", "kind", "name", "fatal", "effect", "hook", "deadline", "when", "source", "outcome", "why"} {
		if _, ok := b[k]; !ok {
			t.Errorf("blocked request lacks %q", k)
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

func TestRenderWriteError(t *testing.T) {
	rep, _ := Audit(parseFile(t, "incident-kyverno-like.yaml"), Options{})
	if err := WriteTable(failingWriter{}, rep); err == nil {
		t.Fatal("write error lost")
	}
}
