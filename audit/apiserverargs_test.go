package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

func readArgs(t *testing.T, name string) ExtraArgs {
	t.Helper()
	data, err := os.ReadFile("testdata/machineconfig/" + name)
	if err != nil {
		t.Fatal(err)
	}
	ea, err := MachineConfigArgs(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return ea
}

func TestMachineConfigArgs(t *testing.T) {
	s, l := readArgs(t, "refused-flags-string.yaml"), readArgs(t, "refused-flags-list.yaml")
	if len(s.Args) != 4 || s.Args[0].Key != "feature-gates" || s.Args[0].List || len(s.Args[0].Items()) != 4 {
		t.Errorf("string form: %+v", s.Args)
	}
	if len(l.Args) != 3 || !l.Args[0].List || len(l.Args[0].Values) != 3 || len(l.Args[0].Items()) != 4 || !l.Args[1].List {
		t.Errorf("list form: %+v", l.Args)
	}
	if _, err := MachineConfigArgs("x", []byte("apiVersion: v1\nkind: ConfigMap\n")); !errors.Is(err, ErrNotMachineConfig) {
		t.Errorf("a ConfigMap: %v", err)
	}
	if ea, err := MachineConfigArgs("x", []byte("version: v1alpha1\ncluster:\n  clusterName: x\n")); err != nil || len(ea.Args) != 0 {
		t.Errorf("no extraArgs: %+v %v", ea, err)
	}
	if _, err := MachineConfigArgs("x", []byte("cluster:\n  apiServer:\n    extraArgs:\n      a: {b: c}\n")); err == nil {
		t.Error("a mapping value was accepted")
	}
}

// The issue's proof: on a config carrying each refused flag, the audit of
// 1.33 -> 1.34 finds each one, in kube-apiserver's own words, in both value
// forms, with the fix; what is accepted is not reported.
func TestCheckExtraArgsIssue(t *testing.T) {
	want := map[string]string{
		"--feature-gates MultiCIDRServiceAllocator=false": "cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true",
		"--feature-gates SidecarContainers=false":         "cannot set feature gate SidecarContainers to false, feature is locked to true",
		"--feature-gates ConsistentListFromCache=false":   "cannot set feature gate ConsistentListFromCache to false, feature is locked to true",
		"--feature-gates NoSuchGate=true":                 "unrecognized feature gate: NoSuchGate",
		"--cloud-provider":                                "Error: unknown flag: --cloud-provider",
		"--runtime-config batch/v2alpha1=true":            "group version batch/v2alpha1 that has not been registered",
	}
	for _, file := range []string{"refused-flags-string.yaml", "refused-flags-list.yaml"} {
		fs, err := CheckExtraArgs([]ExtraArgs{readArgs(t, file)}, "1.33", "1.34")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]ArgFinding{}
		for _, f := range fs {
			got[strings.Replace(f.Subject(), "kube:", "", 1)] = f
		}
		for subj, words := range want {
			f, ok := got[subj]
			if !ok || f.Risk != RiskDeadlock || f.OnTo != words || f.Fix == "" || f.Recorded != "v1.33.13 -> v1.34.4" {
				t.Errorf("%s: %s: %+v (found %t), want deadlock %q", file, subj, f, ok, words)
			}
		}
		if len(fs) != len(want) {
			t.Errorf("%s: %d findings, want %d: %+v", file, len(fs), len(want), fs)
		}
		mc := got["--feature-gates MultiCIDRServiceAllocator=false"]
		if !strings.Contains(mc.OnFrom, "Setting GA feature gate MultiCIDRServiceAllocator=false") || mc.FromRefuses {
			t.Errorf("1.33 only warns about MultiCIDRServiceAllocator=false: %+v", mc)
		}
		if !got["--cloud-provider"].FromRefuses || !got["--cloud-provider"].RemoveKey {
			t.Errorf("1.33 refuses --cloud-provider too, and the key goes: %+v", got["--cloud-provider"])
		}
		rc := got["--runtime-config batch/v2alpha1=true"]
		if rc.FixedValue != "admissionregistration.k8s.io/v1beta1=true" || rc.RemoveKey {
			t.Errorf("runtime-config without the refused entry: %+v", rc)
		}
	}
	// The same config on 1.32 -> 1.33: the gates 1.33 only warns about are warnings.
	fs, _ := CheckExtraArgs([]ExtraArgs{readArgs(t, "refused-flags-string.yaml")}, "1.32", "1.33")
	risks := map[string]Risk{}
	for _, f := range fs {
		risks[f.Subject()] = f.Risk
	}
	if risks["--feature-gates MultiCIDRServiceAllocator=false"] != RiskWarning || risks["--feature-gates SidecarContainers=false"] != RiskDeadlock ||
		risks["--cloud-provider"] != RiskDeadlock {
		t.Errorf("1.32 -> 1.33: %v", risks)
	}
	fs, err := CheckExtraArgs([]ExtraArgs{readArgs(t, "accepted-flags.yaml")}, "1.33", "1.34")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Risk != RiskWarning {
			t.Errorf("accepted flags: %+v", f)
		}
	}
}

// Through Audit: the report's risk, its error (exit 24), the JSON field and
// the table.
func TestAuditExtraArgs(t *testing.T) {
	rep, err := Audit(nil, Options{FromVersion: "1.33", ToVersion: "1.34", ExtraArgs: []ExtraArgs{readArgs(t, "refused-flags-string.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Risk != RiskDeadlock || !errors.Is(rep.Err(), ErrDeadlockRisk) {
		t.Fatalf("risk %s, err %v", rep.Risk, rep.Err())
	}
	var re *RiskError
	if !errors.As(rep.Err(), &re) || len(re.Flags) != 6 || len(re.Hints()) == 0 || !strings.Contains(re.Error(), "kube-apiserver flag(s)") {
		t.Errorf("risk error: %+v", re)
	}
	var tbl, js bytes.Buffer
	if err := WriteTable(&tbl, rep); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true", "Error: unknown flag: --cloud-provider",
		"fix --feature-gates MultiCIDRServiceAllocator=false", "Omni template", "kube-apiserver flags: 6 deadlock, 0 unknown, 0 warning"} {
		if !strings.Contains(tbl.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, tbl.String())
		}
	}
	if err := WriteJSON(&js, rep); err != nil || !strings.Contains(js.String(), `"apiServerArgs": [`) || !strings.Contains(js.String(), `"onTo": "unrecognized feature gate: NoSuchGate"`) {
		t.Errorf("json: %v\n%s", err, js.String())
	}
	ok, _ := Audit(nil, Options{FromVersion: "1.33", ToVersion: "1.34", ExtraArgs: []ExtraArgs{readArgs(t, "accepted-flags.yaml")}})
	if ok.Risk != RiskNone || ok.Err() != nil {
		t.Errorf("accepted flags: risk %s", ok.Risk)
	}
	// Without extraArgs the JSON has no new field: the old shape.
	var old bytes.Buffer
	plain, _ := Audit(nil, Options{})
	_ = WriteJSON(&old, plain)
	if strings.Contains(old.String(), "apiServerArgs") {
		t.Errorf("a webhook-only audit grew the field: %s", old.String())
	}
}

// Issue 29, the machine-config audit's hostile inputs: a YAML alias to a
// string was refused, a null value was read as the item "~", and a broken
// config got the webhook file's hint.
func TestMachineConfigArgsHostileYAML(t *testing.T) {
	const head = "version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  controllerManager:\n    extraArgs:\n      feature-gates: &gates MultiCIDRServiceAllocator=false\n      bind-address: &addr 0.0.0.0\n"
	for _, c := range []struct {
		name, apiServer string
		want            []ExtraArg
	}{
		{"an alias to a string", "feature-gates: *gates", []ExtraArg{{Key: "feature-gates", Values: []string{"MultiCIDRServiceAllocator=false"}}}},
		{"an alias in a list", "feature-gates:\n        - *gates\n        - SidecarContainers=false", []ExtraArg{{Key: "feature-gates", List: true, Values: []string{"MultiCIDRServiceAllocator=false", "SidecarContainers=false"}}}},
		{"an alias to a key's value of another flag", "advertise-address: *addr", []ExtraArg{{Key: "advertise-address", Values: []string{"0.0.0.0"}}}},
		{"~", "feature-gates: ~", []ExtraArg{{Key: "feature-gates", Values: []string{""}}}},
		{"null", "feature-gates: null", []ExtraArg{{Key: "feature-gates", Values: []string{""}}}},
		{"no value", "feature-gates:", []ExtraArg{{Key: "feature-gates", Values: []string{""}}}},
		{"a quoted ~ is a string", `feature-gates: "~"`, []ExtraArg{{Key: "feature-gates", Values: []string{"~"}}}},
		{"a null item", "feature-gates:\n        - ~\n        - SidecarContainers=false", []ExtraArg{{Key: "feature-gates", List: true, Values: []string{"", "SidecarContainers=false"}}}},
	} {
		data := head + "  apiServer:\n    extraArgs:\n      " + c.apiServer + "\n"
		ea, err := MachineConfigArgs("mc.yaml", []byte(data))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if fmt.Sprint(ea.Args) != fmt.Sprint(c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, ea.Args, c.want)
		}
		fs, err := CheckExtraArgs([]ExtraArgs{ea}, "1.33", "1.34")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Item == "~" && c.name != "a quoted ~ is a string" {
				t.Errorf("%s: null read as the item ~: %+v", c.name, f)
			}
		}
	}
	// A value that is neither a string nor a list: the machine config's
	// hint, not the webhook file's.
	_, err := MachineConfigArgs("mc.yaml", []byte(head+"  apiServer:\n    extraArgs:\n      a:\n        b: c\n"))
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("a mapping value: %v", err)
	}
	if h := strings.Join(failure.Hints(err), "\n"); strings.Contains(h, "webhookconfigurations") || !strings.Contains(h, "extraArgs") {
		t.Errorf("a machine config's error hints %q", h)
	}
}

// A file that is no YAML at all may have been meant as either: its hint
// names both.
func TestParseErrorHintNamesBothInputs(t *testing.T) {
	_, err := ParseNamed("mc.yaml", []byte("version: v1alpha1\ncluster:\n  apiServer: [unclosed\n"))
	if err == nil {
		t.Fatal("broken YAML parsed")
	}
	h := strings.Join(failure.Hints(err), "\n")
	if !strings.Contains(h, "machine config") || !strings.Contains(h, "webhookconfigurations") {
		t.Errorf("hints %q: want both inputs named", h)
	}
}

// An item kube-apiserver refuses on every minor (not NAME=true|false) is
// not "accepted" on the old one.
func TestInvalidGateItemNotAcceptedOnFrom(t *testing.T) {
	ea := ExtraArgs{Source: "mc.yaml", Args: []ExtraArg{{Key: "feature-gates", Values: []string{"invalid,SidecarContainers=true"}}}}
	fs, err := CheckExtraArgs([]ExtraArgs{ea}, "1.33", "1.34")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range fs {
		if f.Item != "invalid" {
			continue
		}
		found = true
		if f.OnFrom == "" || !f.FromRefuses {
			t.Errorf("invalid on the old minor: %+v, want refused there too", f)
		}
	}
	if !found {
		t.Fatalf("no finding for the item invalid: %+v", fs)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, Report{FromVersion: "1.33", ToVersion: "1.34", APIServerArgs: fs, ArgsSources: []string{"mc.yaml"}, Risk: argsRisk(fs)}); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, "invalid") && strings.Contains(l, "accepted") {
			t.Errorf("rendered as accepted: %q", l)
		}
	}
}
