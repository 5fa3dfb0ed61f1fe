package runbooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

func actionsOf(rb *Runbook) []Action {
	var out []Action
	for _, s := range rb.Spec.Steps {
		out = append(out, s.Action)
	}
	return out
}

func TestBuiltin(t *testing.T) {
	if got, want := BuiltinNames(), []string{"webhook-deadlock", "mutating-webhook-deadlock", "policy-deadlock", "apiserver-flags", "encryption-drift", "etcd-member-lost", "etcd-nospace", "etcd-quorum-lost"}; !slices.Equal(got, want) {
		t.Fatalf("BuiltinNames() = %q, want %q", got, want)
	}
	all := Builtin()
	if len(all) != 8 {
		t.Fatalf("Builtin() gave %d runbooks", len(all))
	}
	for _, rb := range all {
		name := rb.Metadata.Name
		if !rb.Builtin || rb.Source != "builtin/"+name+".yaml" {
			t.Errorf("%s: builtin %v, source %q (the file must be named after the runbook)", name, rb.Builtin, rb.Source)
		}
		if len(rb.Metadata.Description) < 400 {
			t.Errorf("%s: the description should explain the incident for the engineer on call (%d characters)", name, len(rb.Metadata.Description))
		}
		for _, s := range rb.Spec.Steps {
			if s.Description == "" {
				t.Errorf("%s: step %s has no description", name, s.Name)
			}
		}
		if err := rb.CheckInputs(); err != nil {
			t.Errorf("%s: without --delete it must still run (its deletes are optional): %v", name, err)
		}
		roundTrip(t, rb)
	}

	wd, _ := Get("webhook-deadlock")
	want := []Action{ActionPreflight, ActionDiagnose, ActionAdmissionDisable, ActionAPIServerWait, ActionEtcdSnapshot, ActionEtcdDelete, ActionWebhookWait, ActionAdmissionRestore, ActionVerify}
	if got := actionsOf(wd); !slices.Equal(got, want) {
		t.Errorf("webhook-deadlock actions %q, want %q", got, want)
	}
	for _, opt := range []string{"snapshot", "delete-webhook", "wait-webhook"} {
		if !wd.Step(opt).Optional {
			t.Errorf("webhook-deadlock: step %s must be optional", opt)
		}
	}
	for _, s := range wd.Spec.Steps {
		if s.Optional && !slices.Contains([]string{"snapshot", "delete-webhook", "wait-webhook"}, s.Name) {
			t.Errorf("webhook-deadlock: step %s must not be optional", s.Name)
		}
	}

	checkPlugins := func(rb *Runbook, plugin string, wantKinds ...string) {
		t.Helper()
		var disabled []string
		var deleted []string
		for _, s := range rb.Spec.Steps {
			switch p := s.Params.(type) {
			case *AdmissionDisableParams:
				disabled = append(disabled, p.Plugins...)
				if p.RevertAfter != 0 {
					t.Errorf("%s: a builtin leaves revertAfter to --revert-after", rb.Metadata.Name)
				}
			case *EtcdDeleteParams:
				deleted = append(deleted, p.Kind)
				if len(p.Names) != 0 {
					t.Errorf("%s: a builtin names no objects", rb.Metadata.Name)
				}
			}
		}
		if !slices.Equal(disabled, []string{plugin}) || !slices.Equal(deleted, wantKinds) {
			t.Errorf("%s disables %q and deletes %q, want %s and %q", rb.Metadata.Name, disabled, deleted, plugin, wantKinds)
		}
	}
	checkPlugins(wd, "ValidatingAdmissionWebhook", kinds.Validating)
	md, _ := Get("mutating-webhook-deadlock")
	checkPlugins(md, "MutatingAdmissionWebhook", kinds.Mutating)
	if got := actionsOf(md); !slices.Equal(got, want) {
		t.Errorf("mutating-webhook-deadlock actions %q, want %q", got, want)
	}
	pd, _ := Get("policy-deadlock")
	checkPlugins(pd, "ValidatingAdmissionPolicy", kinds.ValidatingPolicyBinding, kinds.ValidatingPolicy)
	if slices.Contains(actionsOf(pd), ActionWebhookWait) {
		t.Error("policy-deadlock: a policy has no backend to wait for")
	}
}

func TestBuiltinCopiesAreFresh(t *testing.T) {
	a, _ := Get("webhook-deadlock")
	a.Step("disable").Params.(*AdmissionDisableParams).Plugins[0] = "Changed"
	a.Spec.Steps = a.Spec.Steps[:1]
	b := Builtin()[0]
	if len(b.Spec.Steps) != 9 || b.Step("disable").Params.(*AdmissionDisableParams).Plugins[0] != "ValidatingAdmissionWebhook" {
		t.Error("a change to one copy of a builtin shows in the next")
	}
}

func TestGetUnknown(t *testing.T) {
	_, err := Get("webhook-deadlok")
	var nf *NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	h := strings.Join(nf.Hints(), "\n")
	if !strings.Contains(h, "did you mean webhook-deadlock?") || !strings.Contains(h, "policy-deadlock") {
		t.Errorf("hints %q", nf.Hints())
	}
	if err.Error() != `no builtin runbook named "webhook-deadlok"` {
		t.Errorf("Error() = %q", err)
	}
}

func TestResolve(t *testing.T) {
	data, err := os.ReadFile("testdata/valid/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	// A file called like a builtin must not shadow it: names are names, paths are paths.
	if err := os.WriteFile("webhook-deadlock", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("mine.yaml", data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		arg, name, source string
		builtin           bool
	}{
		{"webhook-deadlock", "webhook-deadlock", "builtin/webhook-deadlock.yaml", true},
		{"./webhook-deadlock", "check-only", "./webhook-deadlock", false},
		{"mine.yaml", "check-only", "mine.yaml", false},
		{filepath.Join(dir, "mine.yaml"), "check-only", filepath.Join(dir, "mine.yaml"), false},
	} {
		rb, err := Resolve(tc.arg)
		if err != nil {
			t.Errorf("Resolve(%q): %v", tc.arg, err)
			continue
		}
		if rb.Metadata.Name != tc.name || rb.Source != tc.source || rb.Builtin != tc.builtin {
			t.Errorf("Resolve(%q) = %s from %s (builtin %v)", tc.arg, rb.Metadata.Name, rb.Source, rb.Builtin)
		}
	}

	var nf *NotFoundError
	if _, err := Resolve("missing.yaml"); !errors.As(err, &nf) || !nf.File || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Resolve("no-such-runbook"); !errors.As(err, &nf) || nf.File {
		t.Errorf("unknown name: %v", err)
	}
	os.Mkdir("dir.yaml", 0o755)
	var le *LoadError
	if _, err := Resolve("dir.yaml"); !errors.As(err, &le) || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
}

func TestRender(t *testing.T) {
	rb, err := Get("webhook-deadlock")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Render(&b, rb); err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/render/webhook-deadlock.txt", b.Bytes())
	for _, each := range Builtin() {
		var out bytes.Buffer
		Render(&out, each)
		for _, line := range strings.Split(out.String(), "\n") {
			if len(line) > renderWidth {
				t.Errorf("%s: line longer than %d: %q", each.Metadata.Name, renderWidth, line)
			}
		}
	}

	// Values given on the command line show; a file runbook names its file.
	rb, _ = rb.WithOverrides(Overrides{Delete: []string{"kyverno-resource-validating-webhook-cfg"}, RevertAfter: Duration(15 * time.Minute)})
	rb.Source, rb.Builtin = "my/runbook.yaml", false
	b.Reset()
	Render(&b, rb)
	for _, want := range []string{
		"Runbook webhook-deadlock (my/runbook.yaml)",
		"with: kind   validating\n          names  kyverno-resource-validating-webhook-cfg\n",
		"revertAfter  15m\n",
		" 6. delete-webhook  [etcd.delete]  changes the cluster, asks first, optional\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("render lacks %q:\n%s", want, b.String())
		}
	}
}

func TestOverrides(t *testing.T) {
	wd, _ := Get("webhook-deadlock")
	got, err := wd.WithOverrides(Overrides{
		Plugins:     []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"},
		RevertAfter: Duration(30 * time.Minute),
		Delete:      []string{"kyverno-resource-validating-webhook-cfg", "validating/gatekeeper-validating-webhook-configuration", "kyverno-resource-validating-webhook-cfg"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Step("disable").Params.(*AdmissionDisableParams); len(p.Plugins) != 2 || p.RevertAfter.String() != "30m" {
		t.Errorf("disable: %#v", p)
	}
	if p := got.Step("delete-webhook").Params.(*EtcdDeleteParams); !slices.Equal(p.Names, []string{"kyverno-resource-validating-webhook-cfg", "gatekeeper-validating-webhook-configuration"}) {
		t.Errorf("delete names %q", p.Names)
	}
	if p := wd.Step("delete-webhook").Params.(*EtcdDeleteParams); len(p.Names) != 0 {
		t.Error("WithOverrides changed the original")
	}
	roundTrip(t, got)

	pd, _ := Get("policy-deadlock")
	got, err = pd.WithOverrides(Overrides{Delete: []string{"require-labels-binding", "validating-policy/require-labels"}})
	if err != nil {
		t.Fatal(err)
	}
	if b, p := got.Step("delete-binding").Params.(*EtcdDeleteParams), got.Step("delete-policy").Params.(*EtcdDeleteParams); !slices.Equal(b.Names, []string{"require-labels-binding"}) || !slices.Equal(p.Names, []string{"require-labels"}) {
		t.Errorf("binding names %q, policy names %q", b.Names, p.Names)
	}

	minimal, _ := LoadFile("testdata/valid/minimal.yaml")
	for _, tc := range []struct {
		rb   *Runbook
		o    Overrides
		want string
	}{
		{wd, Overrides{Plugins: []string{"validatingadmissionwebhook"}}, `--plugins: "validatingadmissionwebhook" is not an admission plugin name`},
		{wd, Overrides{Plugins: []string{}}, "--plugins: empty list"},
		{wd, Overrides{RevertAfter: Duration(48 * time.Hour)}, "--revert-after: 48h is out of range (2m to 24h)"},
		{wd, Overrides{RevertAfter: Duration(-time.Minute)}, "--revert-after: -1m0s is out of range"},
		{wd, Overrides{Delete: []string{"Bad_Name"}}, `--delete: "Bad_Name" is not a Kubernetes object name`},
		{wd, Overrides{Delete: []string{"mutating/x"}}, `--delete: "mutating/x": runbook webhook-deadlock has no etcd.delete step for kind mutating`},
		{wd, Overrides{Delete: []string{"webhooks/x"}}, `--delete: "webhooks/x": unknown kind "webhooks"`},
		{minimal, Overrides{Delete: []string{"x"}}, "--delete: runbook check-only has no etcd.delete step"},
		{minimal, Overrides{Plugins: []string{"ValidatingAdmissionWebhook"}}, "--plugins: runbook check-only has no admission.disable step"},
		{minimal, Overrides{RevertAfter: Duration(time.Minute)}, "--revert-after: runbook check-only has no admission.disable step"},
	} {
		_, err := tc.rb.WithOverrides(tc.o)
		var le *LoadError
		if !errors.As(err, &le) || le.Line != 0 || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("WithOverrides(%+v) = %v, want %s", tc.o, err, tc.want)
		}
	}
}

func TestSkipAndCheckInputs(t *testing.T) {
	wd, _ := Get("webhook-deadlock")
	skips := func(rb *Runbook) map[string]string {
		out := map[string]string{}
		for i, s := range rb.Spec.Steps {
			if why := rb.SkipReason(i); why != "" {
				out[s.Name] = why
			}
		}
		return out
	}
	if got := skips(wd); len(got) != 2 || got["delete-webhook"] != "no validating objects named (give them with --delete NAME)" || got["snapshot"] != "nothing will be deleted from etcd" {
		t.Errorf("without names: %q", got)
	}
	withNames, _ := wd.WithOverrides(Overrides{Delete: []string{"kyverno"}})
	if got := skips(withNames); len(got) != 0 {
		t.Errorf("with names: %q", got)
	}
	if wd.SkipReason(-1) != "" || wd.SkipReason(99) != "" {
		t.Error("out-of-range index")
	}

	rb, _ := LoadFile("testdata/valid/policy-both.yaml")
	if err := rb.CheckInputs(); err != nil {
		t.Fatal(err)
	}
	rb.Step("delete-bindings").Params.(*EtcdDeleteParams).Names = nil
	err := rb.CheckInputs()
	var le *LoadError
	if !errors.As(err, &le) || le.Line != 14 || !strings.Contains(err.Error(), `testdata/valid/policy-both.yaml:14: step "delete-bindings" is required but has nothing to do`) {
		t.Errorf("required delete without names: %v", err)
	}
	// A required snapshot runs even with nothing to delete: its author wants it.
	full, _ := LoadFile("testdata/valid/full.yaml")
	full.Step("snapshot").Optional = false
	full.Step("delete").Params.(*EtcdDeleteParams).Names = nil
	if full.SkipReason(4) != "" {
		t.Error("a required snapshot is skipped")
	}
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct{ in, out, err string }{
		{"30m", "30m", ""},
		{"90s", "1m30s", ""},
		{"1h30m", "1h30m", ""},
		{"1.5h", "1h30m", ""},
		{"24h", "24h", ""},
		{" 5m ", "5m", ""},
		{"1500ms", "1.5s", ""},
		{"300", "", `duration "300" has no unit`},
		{"5 minutes", "", `bad duration "5 minutes"`},
		{"0s", "", "is zero"},
		// The range is each field's: revertAfter 2m to 24h, timeouts 1s to
		// 24h (testdata/invalid/*-out-of-range.yaml).
		{"-5m", "-5m0s", ""},
		{"999ms", "999ms", ""},
		{"25h", "25h", ""},
		{"", "", "empty duration"},
	} {
		d, err := ParseDuration(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDuration(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || d.String() != tc.out {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s", tc.in, d, err, tc.out)
		}
	}
	for d := time.Second; d <= 24*time.Hour; d = d*7/3 + 13*time.Millisecond {
		back, err := ParseDuration(Duration(d).String())
		if err != nil || back.Std() != d {
			t.Errorf("%v -> %q -> %v, %v", d, Duration(d), back, err)
		}
	}

	type holder struct {
		D Duration `yaml:"d" json:"d"`
	}
	js, _ := json.Marshal(holder{Duration(90 * time.Minute)})
	if string(js) != `{"d":"1h30m"}` {
		t.Errorf("JSON %s", js)
	}
	var h holder
	if err := json.Unmarshal([]byte(`{"d":"2m"}`), &h); err != nil || h.D.Std() != 2*time.Minute {
		t.Errorf("JSON unmarshal: %v %v", h.D, err)
	}
	if err := json.Unmarshal([]byte(`{"d":120}`), &h); err == nil {
		t.Error("JSON number accepted as a duration")
	}
	y, _ := yaml.Marshal(holder{Duration(5 * time.Minute)})
	if string(y) != "d: 5m\n" {
		t.Errorf("YAML %q", y)
	}
	if err := yaml.Unmarshal([]byte("d: 10m"), &h); err != nil || h.D.String() != "10m" {
		t.Errorf("YAML unmarshal: %v %v", h.D, err)
	}
	if err := yaml.Unmarshal([]byte("d: true"), &h); err == nil {
		t.Error("YAML boolean accepted as a duration")
	}
}

func TestActionTable(t *testing.T) {
	acts := Actions()
	want := []Action{ActionPreflight, ActionDiagnose, ActionAdmissionDisable, ActionExtraArgsRemove, ActionEncryptionKeyAdd, ActionEncryptionUnreadableRemove, ActionAPIServerWait, ActionEtcdSnapshot, ActionEtcdUsage, ActionEtcdCompact, ActionEtcdDefragment, ActionEtcdDisarm,
		ActionEtcdCopy, ActionEtcdMemberRemove, ActionEtcdReset, ActionEtcdBootstrap, ActionEtcdWait, ActionEtcdDelete, ActionWebhookWait, ActionAdmissionRestore, ActionVerify}
	var names []Action
	types := map[reflect.Type]bool{}
	for _, a := range acts {
		names = append(names, a.Name)
		p := NewParams(a.Name)
		if p == nil || p.Action() != a.Name {
			t.Errorf("%s: NewParams gives %T", a.Name, p)
			continue
		}
		types[reflect.TypeOf(p)] = true
		if fe := p.check(); len(fe) != 0 {
			t.Errorf("%s: the defaults do not validate: %v", a.Name, fe)
		}
		// The documented parameters are exactly the struct's fields a
		// runbook can set (those tagged yaml "-" the diagnosis's decision
		// fills).
		var fields, documented []string
		st := reflect.TypeOf(p).Elem()
		for i := 0; i < st.NumField(); i++ {
			if n := yamlName(st.Field(i)); n != "-" {
				fields = append(fields, n)
			}
		}
		for _, pi := range a.Params {
			documented = append(documented, pi.Name)
			if pi.Help == "" || pi.Type == "" || (pi.Default == "") == (pi.Unset == "") {
				t.Errorf("%s.%s: help, type, and either a default or what unset means: %+v", a.Name, pi.Name, pi)
			}
		}
		if !slices.Equal(fields, documented) && !(len(fields) == 0 && len(documented) == 0) {
			t.Errorf("%s: fields %q, documented %q", a.Name, fields, documented)
		}
		if a.TakesParams() != (len(fields) > 0) {
			t.Errorf("%s: TakesParams %v", a.Name, a.TakesParams())
		}
		if a.Summary == "" || strings.HasSuffix(a.Summary, ".") {
			t.Errorf("%s: summary %q", a.Name, a.Summary)
		}
		changes := slices.Contains([]Action{ActionAdmissionDisable, ActionEtcdDelete, ActionAdmissionRestore, ActionExtraArgsRemove, ActionEncryptionKeyAdd, ActionEncryptionUnreadableRemove, ActionEtcdCompact, ActionEtcdDefragment, ActionEtcdDisarm,
			ActionEtcdMemberRemove, ActionEtcdReset, ActionEtcdBootstrap}, a.Name)
		if a.ChangesCluster != changes {
			t.Errorf("%s: ChangesCluster %v", a.Name, a.ChangesCluster)
		}
	}
	if !slices.Equal(names, want) || len(types) != len(want) {
		t.Errorf("actions %q (%d param types), want %q", names, len(types), want)
	}
	defaults := map[string]string{}
	for _, a := range acts {
		for _, p := range a.Params {
			defaults[string(a.Name)+"."+p.Name] = p.Default
		}
	}
	for k, v := range map[string]string{
		"diagnose.tailLines": "200", "admission.disable.plugins": "ValidatingAdmissionWebhook", "admission.disable.revertAfter": "",
		"apiserver.wait.timeout": "5m", "etcd.delete.kind": "validating", "etcd.delete.names": "", "webhook.wait.timeout": "2m",
	} {
		if got, ok := defaults[k]; !ok || got != v {
			t.Errorf("default of %s = %q, want %q", k, got, v)
		}
	}
	if _, ok := LookupAction("admission.enable"); ok || NewParams("nope") != nil {
		t.Error("unknown action found")
	}
	if a, ok := LookupAction(ActionEtcdDelete); !ok || len(a.Params) != 2 {
		t.Errorf("LookupAction(etcd.delete) = %+v", a)
	}
	js, err := json.Marshal(acts)
	if err != nil || !strings.Contains(string(js), `"changesCluster":true`) {
		t.Errorf("actions JSON: %v %s", err, js)
	}
}

// A runbook's etcd.delete step names one kind by its short name.
func TestObjectKinds(t *testing.T) {
	for _, k := range kinds.All {
		if fe := (&EtcdDeleteParams{Kind: k.Short()}).check(); len(fe) > 0 {
			t.Errorf("%s: %v", k.Short(), fe)
		}
	}
	for _, k := range []string{"validatingwebhookconfigurations", "all", "policy", ""} {
		if fe := (&EtcdDeleteParams{Kind: k}).check(); len(fe) == 0 {
			t.Errorf("kind %q accepted in a runbook", k)
		}
	}
}

func TestNames(t *testing.T) {
	for s, want := range map[string]bool{"webhook-deadlock": true, "a": true, "9x": true, "-a": false, "a-": false, "A": false, "a.b": false, "": false, strings.Repeat("a", 64): false} {
		if ValidName(s) != want {
			t.Errorf("ValidName(%q) != %v", s, want)
		}
	}
	for s, want := range map[string]bool{"istio-sidecar-injector.istio.io": true, "a..b": false, ".a": false, "UPPER": false, strings.Repeat("a.", 126) + "a": true, strings.Repeat("a.", 127) + "a": false} {
		if ValidObjectName(s) != want {
			t.Errorf("ValidObjectName(%q) != %v", s, want)
		}
	}
}

func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata/valid/*.yaml", "testdata/invalid/*.yaml", "builtin/*.yaml"} {
		files, _ := filepath.Glob(dir)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rb, err := Load(data, "fuzz.yaml")
		if err != nil {
			var le *LoadError
			if !errors.As(err, &le) || rb != nil {
				t.Fatalf("err = %v (%T), want only a *LoadError", err, err)
			}
			if le.Line < 0 || le.Line > lineCount(data) {
				t.Fatalf("line %d outside the input's %d lines: %v", le.Line, lineCount(data), err)
			}
			return
		}
		for _, s := range rb.Spec.Steps {
			if s.Params == nil || s.Params.Action() != s.Action || s.Params.check() != nil {
				t.Fatalf("step %s: params %#v", s.Name, s.Params)
			}
		}
		roundTrip(t, rb)
		if _, err := json.Marshal(rb); err != nil {
			t.Fatal(err)
		}
		if err := Render(&bytes.Buffer{}, rb); err != nil {
			t.Fatal(err)
		}
		for i := range rb.Spec.Steps {
			rb.SkipReason(i)
		}
	})
}
