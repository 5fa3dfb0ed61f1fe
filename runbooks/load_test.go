package runbooks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	goldenfile "github.com/breakglass-dev/breakglass/internal/golden"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// comparable strips what legitimately differs between two loads of the same
// runbook from different bytes (lines, source).
func comparable(rb *Runbook) *Runbook {
	c := rb.Clone()
	c.Source, c.Builtin = "", false
	for i := range c.Spec.Steps {
		c.Spec.Steps[i].Line = 0
	}
	return c
}

func golden(t *testing.T, path string, got []byte) { t.Helper(); goldenfile.Check(t, path, got) }

// roundTrip checks that Marshal writes what Load reads back to the same runbook.
func roundTrip(t testing.TB, rb *Runbook) {
	t.Helper()
	out, err := Marshal(rb)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	again, err := Load(out, "marshalled")
	if err != nil {
		t.Fatalf("Load(Marshal(rb)): %v\n%s", err, out)
	}
	if a, b := comparable(rb), comparable(again); !reflect.DeepEqual(a, b) {
		t.Fatalf("round trip changed the runbook:\n%#v\n%#v\n%s", a, b, out)
	}
}

// examples are the runbooks under testdata/KIND, at least atLeast of them
// (a glob that finds fewer tests next to nothing).
func examples(t *testing.T, kind string, atLeast int) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", kind, "*.yaml"))
	if len(files) < atLeast {
		t.Fatalf("only %d %s examples", len(files), kind)
	}
	return files
}

func TestLoadValid(t *testing.T) {
	for _, f := range examples(t, "valid", 5) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			rb, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if rb.Source != f || rb.Builtin {
				t.Errorf("source %q builtin %v", rb.Source, rb.Builtin)
			}
			for _, s := range rb.Spec.Steps {
				if s.Params == nil || s.Params.Action() != s.Action {
					t.Errorf("step %s: params %T for action %s", s.Name, s.Params, s.Action)
				}
				if s.Line == 0 {
					t.Errorf("step %s: no line", s.Name)
				}
			}
			js, err := json.MarshalIndent(rb, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, strings.TrimSuffix(f, ".yaml")+".json", append(js, '\n'))
			roundTrip(t, rb)
		})
	}
}

func TestValidDetails(t *testing.T) {
	rb, err := LoadFile("testdata/valid/defaults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Params{
		"diagnose":     &DiagnoseParams{TailLines: 200},
		"disable":      &AdmissionDisableParams{Plugins: []string{"ValidatingAdmissionWebhook"}},
		"wait":         &APIServerWaitParams{Timeout: Duration(5 * 60 * 1e9)},
		"delete":       &EtcdDeleteParams{Kind: kinds.Validating, Names: []string{}},
		"wait-webhook": &WebhookWaitParams{Timeout: Duration(2 * 60 * 1e9)},
		"restore":      &AdmissionRestoreParams{},
	}
	for name, p := range want {
		if got := rb.Step(name).Params; !reflect.DeepEqual(got, p) {
			t.Errorf("step %s: params %#v, want the defaults %#v", name, got, p)
		}
	}
	for _, s := range rb.Spec.Steps {
		if changes := s.Action == ActionAdmissionDisable || s.Action == ActionEtcdDelete || s.Action == ActionAdmissionRestore; s.Confirm != changes {
			t.Errorf("step %s: confirm %v by default, want %v", s.Name, s.Confirm, changes)
		}
	}

	rb, err = LoadFile("testdata/valid/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := rb.Step("disable").Params.(*AdmissionDisableParams); p.RevertAfter.String() != "30m" || len(p.Plugins) != 2 {
		t.Errorf("disable: %#v", p)
	}
	if p := rb.Step("wait-webhook").Params.(*WebhookWaitParams); p.Timeout.String() != "1h30m" {
		t.Errorf("wait-webhook timeout %s", p.Timeout)
	}
	if p := rb.Step("delete").Params.(*EtcdDeleteParams); p.Kind != kinds.Mutating || p.Names[1] != "istio-sidecar-injector.istio.io" {
		t.Errorf("delete: %#v", p)
	}
	if !rb.Step("preflight").Confirm || rb.Step("diagnose").Confirm {
		t.Error("confirm: true on a read-only step must be kept, and false is its default")
	}
	if rb.Metadata.Description != "Every built-in action once, with every parameter set.\nA literal block keeps its line breaks." {
		t.Errorf("description %q", rb.Metadata.Description)
	}
}

// Each invalid example starts with "# want: LINE: MESSAGE".
func TestLoadInvalid(t *testing.T) {
	for _, f := range examples(t, "invalid", 30) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			spec, ok := strings.CutPrefix(first, "# want: ")
			lineText, msg, ok2 := strings.Cut(spec, ": ")
			line, convErr := strconv.Atoi(lineText)
			if !ok || !ok2 || convErr != nil {
				t.Fatalf("first line %q is not # want: LINE: MESSAGE", first)
			}
			_, err = Load(data, f)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v (%T), want a *LoadError", err, err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Error("a LoadError must wrap ErrInvalid")
			}
			if le.Line != line || !strings.Contains(le.Msg, msg) {
				t.Fatalf("got  %d: %s\nwant %d: %s", le.Line, le.Msg, line, msg)
			}
			want := fmt.Sprintf("%s:%d: %s", f, line, le.Msg)
			if line == 0 {
				want = f + ": " + le.Msg
			}
			if err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
			if le.Msg != strings.TrimRight(le.Msg, ". \n") || strings.Contains(le.Msg, "\n") {
				t.Errorf("message %q: one line, no trailing punctuation", le.Msg)
			}
		})
	}
}

func TestLoadErrorHints(t *testing.T) {
	for file, hint := range map[string]string{
		"unknown-action.yaml":          "did you mean admission.disable?",
		"unknown-step-field.yaml":      "did you mean optional?",
		"unknown-with-field.yaml":      "did you mean revertAfter?",
		"wrong-apiversion.yaml":        "a runbook starts with apiVersion: breakglass.dev/v1alpha1 and kind: Runbook",
		"plugins-not-list.yaml":        "a list, even of one: plugins: [ValidatingAdmissionWebhook]",
		"duration-no-unit.yaml":        "durations have a unit: 90s, 5m, 1h30m",
		"name-not-string.yaml":         `quote it to mean the string: "42"`,
		"confirm-false-on-change.yaml": "remove confirm; for unattended runs pass --yes on the command line",
		"plugin-unknown.yaml":          "did you mean ValidatingAdmissionWebhook?",
		"revert-after-negative.yaml":   "give revertAfter a duration from 2m to 24h",
	} {
		rb, err := LoadFile("testdata/invalid/" + file)
		var le *LoadError
		if rb != nil || !errors.As(err, &le) {
			t.Fatalf("%s: %v", file, err)
		}
		if !strings.Contains(strings.Join(le.Hints(), "\n"), hint) {
			t.Errorf("%s: hints %q lack %q", file, le.Hints(), hint)
		}
	}
}

func TestLoadLimits(t *testing.T) {
	big := bytes.Repeat([]byte("#"), maxFileSize+1)
	if _, err := Load(big, "big.yaml"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over %d bytes: %v", maxFileSize, err)
	}
	long := fmt.Sprintf("apiVersion: %s\nkind: Runbook\nmetadata:\n  name: x\n  description: %s\nspec:\n  steps:\n  - {name: a, action: verify}\n", APIVersion, strings.Repeat("a", maxDescription+1))
	if _, err := Load([]byte(long), "long.yaml"); err == nil || !strings.Contains(err.Error(), "long.yaml:5: metadata.description: longer than") {
		t.Errorf("a description over %d characters: %v", maxDescription, err)
	}
	bidi := fmt.Sprintf("apiVersion: %s\nkind: Runbook\nmetadata:\n  name: x\nspec:\n  steps:\n  - {name: a, action: verify, description: \"safe\u202eefas\"}\n", APIVersion)
	if _, err := Load([]byte(bidi), "bidi.yaml"); err == nil || !strings.Contains(err.Error(), "bidi.yaml:7:") {
		t.Errorf("a bidirectional override in a description: %v", err)
	}
}

func TestSourceDefault(t *testing.T) {
	_, err := Load([]byte("kind: Runbook"), "")
	if err == nil || !strings.HasPrefix(err.Error(), "runbook:1: ") {
		t.Errorf("err = %v, want it to start runbook:1:", err)
	}
}

// lineCount is how many lines data has, for the fuzz test's line check.
func lineCount(data []byte) int {
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxFileSize+1)
	for sc.Scan() {
		n++
	}
	return max(n, bytes.Count(data, []byte("\n"))+1)
}
