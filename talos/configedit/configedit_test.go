package configedit

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
)

const (
	vaw = "ValidatingAdmissionWebhook"
	maw = "MutatingAdmissionWebhook"
)

func readTestdata(tb testing.TB, name string) []byte {
	tb.Helper()

	if name == "generated" {
		return generatedConfig(tb)
	}

	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}

	return b
}

func list(form Form, plugins ...string) PluginList { return PluginList{Form: form, Plugins: plugins} }

var absent = PluginList{Form: FormAbsent}

type disableCase struct {
	name    string
	file    string
	input   func([]byte) []byte // optional change of the file's text
	plugins []string
	// want
	method      string
	after       Args
	removed     []string
	maxChanged  int      // lines that differ (text method)
	contains    []string // lines the output must contain
	notLoadable bool     // the input holds a document kind the machinery loader does not know
}

var disableCases = []disableCase{
	{
		name: "generated 1.13 config, no extraArgs", file: "generated", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormString, vaw), Enable: absent}, maxChanged: 2,
		contains: []string{"        extraArgs:\n            disable-admission-plugins: ValidatingAdmissionWebhook\n        image:"},
	},
	{
		name: "string value with spaces and comments", file: "string.yaml", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormString, "AlwaysPullImages", "PodNodeSelector", vaw), Enable: absent}, maxChanged: 1,
		contains: []string{"      disable-admission-plugins: AlwaysPullImages, PodNodeSelector, ValidatingAdmissionWebhook # set by hand\n"},
	},
	{
		name: "block list", file: "list-block.yaml", plugins: []string{vaw, maw},
		method: MethodText, after: Args{Disable: list(FormList, "AlwaysPullImages", "PodNodeSelector", vaw, maw), Enable: absent}, maxChanged: 2,
		contains: []string{"        - \"PodNodeSelector\"\n        - \"ValidatingAdmissionWebhook\"\n        - \"MutatingAdmissionWebhook\"\n      # a comment after the list\n"},
	},
	{
		name: "flow list", file: "list-flow.yaml", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormList, "AlwaysPullImages", "PodNodeSelector", vaw), Enable: absent}, maxChanged: 1,
		contains: []string{"disable-admission-plugins: [ AlwaysPullImages, 'PodNodeSelector', 'ValidatingAdmissionWebhook' ] # flow list\n"},
	},
	{
		name: "plugin in the enable string", file: "enable-string.yaml", plugins: []string{vaw},
		method: MethodText, removed: []string{vaw}, maxChanged: 2,
		after: Args{Disable: list(FormString, "PodNodeSelector", vaw), Enable: list(FormString, "NodeRestriction", "AlwaysPullImages")},
		contains: []string{
			"      enable-admission-plugins: \"NodeRestriction,AlwaysPullImages\"\n",
			"      disable-admission-plugins: PodNodeSelector,ValidatingAdmissionWebhook\n",
		},
	},
	{
		name: "plugin in the enable list", file: "enable-list.yaml", plugins: []string{vaw},
		method: MethodText, removed: []string{vaw}, maxChanged: 2,
		after:    Args{Disable: list(FormString, vaw), Enable: list(FormList, "AlwaysPullImages")},
		contains: []string{"    extraArgs:\n      disable-admission-plugins: ValidatingAdmissionWebhook\n      enable-admission-plugins:\n        - AlwaysPullImages\n"},
	},
	{
		name: "enable key emptied and dropped", file: "enable-only.yaml", plugins: []string{vaw},
		method: MethodText, removed: []string{vaw}, maxChanged: 5,
		after:    Args{Disable: list(FormString, vaw), Enable: absent},
		contains: []string{"      # webhooks on, whatever happens\n      audit-log-maxage: \"30\"\n"},
	},
	{
		name: "missing extraArgs", file: "no-extraargs.yaml", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormString, vaw), Enable: absent}, maxChanged: 2,
		contains: []string{"  apiServer:\n    extraArgs:\n      disable-admission-plugins: ValidatingAdmissionWebhook\n    # The container image"},
	},
	{
		name: "missing apiServer", file: "no-apiserver.yaml", plugins: []string{vaw, maw},
		method: MethodText, after: Args{Disable: list(FormString, vaw, maw), Enable: absent}, maxChanged: 3,
		contains: []string{"cluster:\n  apiServer:\n    extraArgs:\n      disable-admission-plugins: ValidatingAdmissionWebhook,MutatingAdmissionWebhook\n  # Configures"},
	},
	{
		name: "empty flow extraArgs", file: "flow-empty.yaml", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormString, vaw), Enable: absent}, maxChanged: 1,
		contains: []string{"    extraArgs: {disable-admission-plugins: ValidatingAdmissionWebhook} # nothing yet\n"},
	},
	{
		name: "flow apiServer, plugin in the enable key", file: "flow.yaml", plugins: []string{vaw, maw},
		method: MethodText, removed: []string{vaw}, maxChanged: 1,
		after:    Args{Disable: list(FormString, vaw, maw), Enable: absent},
		contains: []string{`extraArgs: {disable-admission-plugins: "ValidatingAdmissionWebhook,MutatingAdmissionWebhook", feature-gates: ServerSideApply=true}}`},
	},
	{
		name: "quoted keys and values", file: "quoted.yaml", plugins: []string{vaw},
		method: MethodText, removed: []string{vaw}, maxChanged: 2,
		after: Args{Disable: list(FormString, "AlwaysPullImages", vaw), Enable: list(FormString, "NodeRestriction")},
		contains: []string{
			"      \"disable-admission-plugins\": 'AlwaysPullImages,ValidatingAdmissionWebhook'\n",
			"      'enable-admission-plugins': \"NodeRestriction\"\n",
		},
	},
	{
		name: "multi-document, 4-space indentation", file: "multidoc.yaml", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormString, vaw), Enable: absent}, maxChanged: 1,
		contains: []string{"        extraArgs:\n            disable-admission-plugins: ValidatingAdmissionWebhook\n            feature-gates"},
	},
	{
		name: "unknown document kind", file: "unknown-kind.yaml", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormString, "PodNodeSelector", vaw), Enable: absent}, maxChanged: 1,
		notLoadable: true,
	},
	{
		name: "non-ASCII text before the key on its line", file: "unicode.yaml", plugins: []string{vaw},
		method: MethodText, after: Args{Disable: list(FormString, "PodNodeSelector", vaw), Enable: absent}, maxChanged: 1,
		contains: []string{`{oidc-username-prefix: "ö:", disable-admission-plugins: "PodNodeSelector,ValidatingAdmissionWebhook"} # ünïcode`},
	},
	{
		name: "already disabled but also enabled", file: "enable-string.yaml", plugins: []string{"PodNodeSelector", "AlwaysPullImages"},
		input: func(b []byte) []byte {
			return []byte(strings.Replace(string(b), "disable-admission-plugins: PodNodeSelector", "disable-admission-plugins: PodNodeSelector,AlwaysPullImages", 1))
		},
		method: MethodText, removed: []string{"AlwaysPullImages"}, maxChanged: 1,
		after: Args{Disable: list(FormString, "PodNodeSelector", "AlwaysPullImages"), Enable: list(FormString, "NodeRestriction", vaw)},
	},
	{
		name: "anchors fall back to the strategic merge", file: "anchors.yaml", plugins: []string{vaw},
		method: MethodMerge, after: Args{Disable: list(FormString, "AlwaysPullImages", vaw), Enable: absent},
	},
	{
		name: "CRLF line ends", file: "enable-only.yaml", plugins: []string{vaw},
		input:  func(b []byte) []byte { return []byte(strings.ReplaceAll(string(b), "\n", "\r\n")) },
		method: MethodText, removed: []string{vaw}, maxChanged: 5,
		after:    Args{Disable: list(FormString, vaw), Enable: absent},
		contains: []string{"    extraArgs:\r\n      disable-admission-plugins: ValidatingAdmissionWebhook\r\n      feature-gates"},
	},
	{
		name: "mixed line ends fall back to the strategic merge", file: "string.yaml", plugins: []string{vaw},
		input:  func(b []byte) []byte { return []byte(strings.Replace(string(b), "\n", "\r\n", 3)) },
		method: MethodMerge, after: Args{Disable: list(FormString, "AlwaysPullImages", "PodNodeSelector", vaw), Enable: absent},
	},
}

func TestDisable(t *testing.T) {
	for _, tc := range disableCases {
		t.Run(tc.name, func(t *testing.T) {
			in := readTestdata(t, tc.file)
			if tc.input != nil {
				in = tc.input(in)
			}

			orig := slices.Clone(in)

			if tc.notLoadable {
				if _, err := configloader.NewFromBytes(in); err == nil {
					t.Fatal("test input was meant to hold a document kind the loader does not know")
				}
			} else {
				mustLoad(t, in)
			}

			res, err := Disable(in, Options{Plugins: tc.plugins})
			if err != nil {
				t.Fatal(err)
			}

			if string(in) != string(orig) {
				t.Fatal("Disable modified its input slice")
			}

			if !res.Changed || res.Method != tc.method || res.Record.Method != tc.method {
				t.Fatalf("changed %v method %q record method %q, want method %q", res.Changed, res.Method, res.Record.Method, tc.method)
			}

			checkArgs(t, "after", res.After, tc.after)

			got, err := CurrentArgs(res.Config)
			if err != nil {
				t.Fatal(err)
			}

			checkArgs(t, "config", got, tc.after)

			if !slices.Equal(res.RemovedFromEnable, tc.removed) || !slices.Equal(res.Record.RemovedFromEnable, tc.removed) {
				t.Errorf("removed from enable %v (record %v), want %v", res.RemovedFromEnable, res.Record.RemovedFromEnable, tc.removed)
			}

			if !tc.notLoadable {
				mustLoad(t, res.Config)
			} else {
				// The loader cannot read the whole config: check the v1alpha1 document alone.
				doc, err := v1alpha1Text(res.Config)
				if err != nil {
					t.Fatal(err)
				}

				mustLoad(t, doc)
			}

			if tc.method == MethodText {
				if n := changedLines(in, res.Config); n > tc.maxChanged || n == 0 {
					t.Errorf("%d lines changed, want 1..%d:\n%s", n, tc.maxChanged, res.Config)
				}
			}

			for _, c := range tc.contains {
				if !strings.Contains(string(res.Config), c) {
					t.Errorf("output lacks %q:\n%s", c, res.Config)
				}
			}

			// The record survives JSON, as it is stored in the state directory.
			rec := jsonRoundTrip(t, res.Record)

			back, err := Restore(res.Config, rec)
			if err != nil {
				t.Fatal(err)
			}

			if tc.method == MethodText {
				if string(back) != string(in) {
					t.Fatalf("restore is not byte-exact:\n%s", back)
				}
			} else {
				before, err := CurrentArgs(in)
				if err != nil {
					t.Fatal(err)
				}

				after, err := CurrentArgs(back)
				if err != nil {
					t.Fatal(err)
				}

				checkArgs(t, "restored", after, before)
				mustLoad(t, back)
			}

			// Disable twice is a no-op that returns the very same bytes.
			again, err := Disable(res.Config, Options{Plugins: tc.plugins})
			if err != nil {
				t.Fatal(err)
			}

			if again.Changed || string(again.Config) != string(res.Config) || again.Method != "" {
				t.Fatalf("second disable changed the config (method %q)", again.Method)
			}

			if same, err := Restore(res.Config, again.Record); err != nil || string(same) != string(res.Config) {
				t.Fatalf("restore with the no-op record changed the config (err %v)", err)
			}

			disabled, err := Disabled(res.Config)
			if err != nil {
				t.Fatal(err)
			}

			if !slices.Equal(disabled, tc.after.Disable.Plugins) {
				t.Errorf("Disabled = %v, want %v", disabled, tc.after.Disable.Plugins)
			}
		})
	}
}

func checkArgs(t *testing.T, what string, got, want Args) {
	t.Helper()

	if got.Disable.Form != want.Disable.Form || !slices.Equal(got.Disable.Plugins, want.Disable.Plugins) ||
		got.Enable.Form != want.Enable.Form || !slices.Equal(got.Enable.Plugins, want.Enable.Plugins) {
		t.Errorf("%s: got %+v, want %+v", what, got, want)
	}
}

func jsonRoundTrip(t *testing.T, rec Record) Record {
	t.Helper()

	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}

	var out Record
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}

	return out
}

func TestRecordJSONShape(t *testing.T) {
	res, err := Disable(readTestdata(t, "enable-only.yaml"), Options{Plugins: []string{vaw}})
	if err != nil {
		t.Fatal(err)
	}

	b, err := json.MarshalIndent(res.Record, "", "  ")
	if err != nil {
		t.Fatal(err)
	}

	want := `{
  "version": 1,
  "method": "text",
  "added": [
    "ValidatingAdmissionWebhook"
  ],
  "removedFromEnable": [
    "ValidatingAdmissionWebhook"
  ],
  "disable": {
    "changed": true,
    "present": false
  },
  "enable": {
    "changed": true,
    "present": true,
    "form": "string",
    "value": "ValidatingAdmissionWebhook",
    "raw": "      enable-admission-plugins: ValidatingAdmissionWebhook # until the incident\n",
    "layout": "block",
    "position": {
      "after": "feature-gates",
      "skip": 2
    }
  }
}`
	if string(b) != want {
		t.Errorf("record JSON:\n%s\nwant:\n%s", b, want)
	}

	// The record holds the two keys only: no other value (a neighbour's name marks the position).
	for _, other := range []string{"ServerSideApply", "30", "audit-log-maxage", "lab", "controlplane"} {
		if strings.Contains(string(b), other) {
			t.Errorf("record holds %q", other)
		}
	}
}

func TestRestoreKeepsOtherChanges(t *testing.T) {
	for _, file := range []string{"string.yaml", "enable-only.yaml", "no-apiserver.yaml", "flow.yaml", "generated"} {
		t.Run(file, func(t *testing.T) {
			in := readTestdata(t, file)

			res := disableVAW(t, in)

			// Meanwhile an operator changes something else: the cluster name, and for block
			// extraArgs another argument.
			change := func(b []byte) []byte {
				s := strings.Replace(string(b), "clusterName: lab", "clusterName: lab2", 1)
				s = strings.Replace(s, "      feature-gates: ServerSideApply=true # keep me\n", "      feature-gates: ServerSideApply=false # keep me\n", 1)

				return []byte(s)
			}

			edited := change(res.Config)
			if string(edited) == string(res.Config) {
				t.Fatal("test change did nothing")
			}

			back, err := Restore(edited, res.Record)
			if err != nil {
				t.Fatal(err)
			}

			if want := change(in); string(back) != string(want) {
				t.Fatalf("restore lost the other change:\n%s\nwant:\n%s", back, want)
			}
		})
	}
}

func TestRestoreAfterDisableKeyChanged(t *testing.T) {
	in := readTestdata(t, "string.yaml")

	res := disableVAW(t, in)

	// Someone disabled one more plugin by hand during the incident (issue 21, case 6): restore takes
	// out only the plugin breakglass added, keeps theirs, and says how the key changed.
	edited := strings.Replace(string(res.Config), "ValidatingAdmissionWebhook # set", "ValidatingAdmissionWebhook, MutatingAdmissionWebhook # set", 1)

	u, err := Undo([]byte(edited), res.Record)
	if err != nil {
		t.Fatal(err)
	}

	want := strings.Replace(string(in), "PodNodeSelector # set", "PodNodeSelector, MutatingAdmissionWebhook # set", 1)
	if want == string(in) {
		t.Fatal("unexpected testdata")
	}

	if string(u.Config) != want {
		t.Fatalf("restore:\n%s", u.Config)
	}

	if len(u.Drift) != 1 || u.Drift[0].Key != KeyDisable || !slices.Equal(u.Drift[0].Now, []string{"AlwaysPullImages", "PodNodeSelector", vaw, "MutatingAdmissionWebhook"}) ||
		!slices.Equal(u.Drift[0].After, []string{"AlwaysPullImages", "PodNodeSelector", "MutatingAdmissionWebhook"}) {
		t.Errorf("drift %+v", u.Drift)
	}

	// Nothing changed since: byte-exact, no drift.
	u, err = Undo(res.Config, res.Record)
	if err != nil || string(u.Config) != string(in) || len(u.Drift) > 0 {
		t.Fatalf("undo of the untouched config: drift %+v, err %v, exact %v", u.Drift, err, string(u.Config) == string(in))
	}
}

func TestRestoreWhenKeyGone(t *testing.T) {
	in := readTestdata(t, "enable-string.yaml")

	res := disableVAW(t, in)

	// Someone removed both keys by hand: restore puts back what breakglass took out of the enable list
	// and leaves the rest as they left it (it added nothing they kept), saying so.
	edited := strings.Replace(string(res.Config), "      enable-admission-plugins: \"NodeRestriction,AlwaysPullImages\"\n", "", 1)
	edited = strings.Replace(edited, "      disable-admission-plugins: PodNodeSelector,ValidatingAdmissionWebhook\n", "      audit-log-maxage: \"30\"\n", 1)

	back, err := Restore([]byte(edited), res.Record)
	if err != nil {
		t.Fatal(err)
	}

	mustLoad(t, back)

	got, err := CurrentArgs(back)
	if err != nil {
		t.Fatal(err)
	}

	checkArgs(t, "restored", got, Args{
		Disable: list(FormAbsent),
		Enable:  list(FormString, vaw),
	})

	if u, err := Undo([]byte(edited), res.Record); err != nil || len(u.Drift) != 2 {
		t.Errorf("drift %+v, %v: want both keys", u.Drift, err)
	}

	if !strings.Contains(string(back), "audit-log-maxage") {
		t.Errorf("restore lost the operator's key:\n%s", back)
	}
}

func TestRemovePlugins(t *testing.T) {
	for _, tc := range []struct {
		file    string
		plugins []string
		exact   bool // RemovePlugins(Disable(x)) == x: nothing was taken out of the enable list
	}{
		{"generated", []string{vaw}, true},
		{"string.yaml", []string{vaw}, true},
		{"list-block.yaml", []string{vaw, maw}, true},
		{"list-flow.yaml", []string{vaw}, true},
		{"no-extraargs.yaml", []string{vaw}, true},
		{"no-apiserver.yaml", []string{vaw, maw}, true},
		{"flow-empty.yaml", []string{vaw}, true},
		{"multidoc.yaml", []string{vaw}, true},
		{"unknown-kind.yaml", []string{vaw}, true},
		{"enable-string.yaml", []string{vaw}, false},
		{"flow.yaml", []string{vaw}, false},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := readTestdata(t, tc.file)

			res, err := Disable(in, Options{Plugins: tc.plugins})
			if err != nil {
				t.Fatal(err)
			}

			out, err := RemovePlugins(res.Config, tc.plugins)
			if err != nil {
				t.Fatal(err)
			}

			if tc.exact && string(out) != string(in) {
				t.Fatalf("RemovePlugins did not give the original back:\n%s", out)
			}

			disabled, err := Disabled(out)
			if err != nil {
				t.Fatal(err)
			}

			for _, p := range tc.plugins {
				if slices.Contains(disabled, p) {
					t.Errorf("%s still disabled: %v", p, disabled)
				}
			}

			before, _ := CurrentArgs(in)
			after, _ := CurrentArgs(out)

			if !slices.Equal(before.Disable.Plugins, after.Disable.Plugins) {
				t.Errorf("disable list %v, want %v", after.Disable.Plugins, before.Disable.Plugins)
			}

			// Nothing to remove: the same bytes.
			again, err := RemovePlugins(out, tc.plugins)
			if err != nil {
				t.Fatal(err)
			}

			if string(again) != string(out) {
				t.Error("second RemovePlugins changed the config")
			}
		})
	}
}

func TestRemovePluginsKeepsOthers(t *testing.T) {
	in := []byte("cluster:\n  apiServer:\n    extraArgs:\n      disable-admission-plugins: ValidatingAdmissionWebhook,PodNodeSelector\n")

	out, err := RemovePlugins(in, []string{vaw, maw})
	if err != nil {
		t.Fatal(err)
	}

	if want := "cluster:\n  apiServer:\n    extraArgs:\n      disable-admission-plugins: PodNodeSelector\n"; string(out) != want {
		t.Fatalf("got:\n%s", out)
	}
}

func TestStringOnly(t *testing.T) {
	for _, file := range []string{"list-block.yaml", "list-flow.yaml", "enable-list.yaml"} {
		_, err := Disable(readTestdata(t, file), Options{Plugins: []string{vaw}, StringOnly: true})
		if !errors.Is(err, ErrListOnStringOnly) {
			t.Errorf("%s: err = %v, want ErrListOnStringOnly", file, err)
		}

		var h interface{ Hints() []string }
		if !errors.As(err, &h) || len(h.Hints()) == 0 {
			t.Errorf("%s: no hints", file)
		}
	}

	res, err := Disable(readTestdata(t, "no-extraargs.yaml"), Options{Plugins: []string{vaw, maw}, StringOnly: true})
	if err != nil {
		t.Fatal(err)
	}

	if res.After.Disable.Form != FormString {
		t.Errorf("form %q, want string", res.After.Disable.Form)
	}
}

func TestInvalidPlugins(t *testing.T) {
	if _, err := validatePlugins([]string{vaw, maw, "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"}); err != nil {
		t.Errorf("validatePlugins: %v", err)
	}

	if _, err := validatePlugins([]string{vaw, "no"}); !errors.Is(err, ErrInvalidPlugin) {
		t.Errorf("validatePlugins: err = %v, want ErrInvalidPlugin", err)
	}

	for _, plugins := range [][]string{
		nil,
		{""},
		{"ValidatingAdmissionWebhook,MutatingAdmissionWebhook"},
		{"validatingAdmissionWebhook"},
		{"Validating AdmissionWebhook"},
		{"V"},
		{"Validating-Admission"},
		{vaw, "Ünicode"},
	} {
		if _, err := Disable(readTestdata(t, "string.yaml"), Options{Plugins: plugins}); !errors.Is(err, ErrInvalidPlugin) {
			t.Errorf("Disable(%q): err = %v, want ErrInvalidPlugin", plugins, err)
		}

		if _, err := RemovePlugins(readTestdata(t, "string.yaml"), plugins); !errors.Is(err, ErrInvalidPlugin) {
			t.Errorf("RemovePlugins(%q): err = %v, want ErrInvalidPlugin", plugins, err)
		}
	}

	// Unknown plugins that look like plugins are fine, duplicates count once.
	res, err := Disable(readTestdata(t, "flow-empty.yaml"), Options{Plugins: []string{"FuturePlugin2", "FuturePlugin2"}})
	if err != nil {
		t.Fatal(err)
	}

	if !slices.Equal(res.Added, []string{"FuturePlugin2"}) {
		t.Errorf("added %v", res.Added)
	}
}

func TestErrors(t *testing.T) {
	// Text edit refuses the anchor, the merge cannot read the unknown kind: a typed error with both causes.
	in := strings.Replace(string(readTestdata(t, "unknown-kind.yaml")), "clusterName: lab", "clusterName: &n lab", 1)

	_, err := Disable([]byte(in), Options{Plugins: []string{vaw}})

	var ee *EditError
	if !errors.As(err, &ee) || ee.Text == nil || ee.Merge == nil || len(ee.Hints()) == 0 {
		t.Fatalf("err = %v, want *EditError with both causes", err)
	}

	if _, err := Disable([]byte("apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n"), Options{Plugins: []string{vaw}}); !errors.Is(err, ErrNoClusterConfig) {
		t.Errorf("no v1alpha1 document: err = %v", err)
	}

	if _, err := Disable([]byte("version: v1alpha1\nmachine:\n  type: worker\n"), Options{Plugins: []string{vaw}}); !errors.Is(err, ErrNoClusterConfig) {
		t.Errorf("no cluster: err = %v", err)
	}

	bad := "cluster:\n  apiServer:\n    extraArgs:\n      disable-admission-plugins: {a: b}\n"
	if _, err := Disable([]byte(bad), Options{Plugins: []string{vaw}}); !errors.Is(err, ErrBadValue) {
		t.Errorf("map value: err = %v", err)
	}

	if _, err := Disable([]byte("cluster: [\n"), Options{Plugins: []string{vaw}}); err == nil {
		t.Error("broken YAML accepted")
	}

	if _, err := Restore(readTestdata(t, "string.yaml"), Record{Version: 7}); !errors.Is(err, ErrBadRecord) {
		t.Errorf("bad record version: err = %v", err)
	}

	rec := Record{Version: RecordVersion, Disable: KeyRecord{Changed: true, Present: true, Form: "map"}}
	if _, err := Restore(readTestdata(t, "string.yaml"), rec); !errors.Is(err, ErrBadRecord) {
		t.Errorf("bad record form: err = %v", err)
	}
}

func TestRestoreNothingChanged(t *testing.T) {
	in := readTestdata(t, "string.yaml")

	out, err := Restore(in, Record{Version: RecordVersion})
	if err != nil || string(out) != string(in) {
		t.Fatalf("restore of an empty record changed the config (err %v)", err)
	}
}

// TestRestoreRenders checks Restore without recorded text (a merge record): values are written anew.
func TestRestoreRenders(t *testing.T) {
	in := readTestdata(t, "enable-list.yaml")

	res := disableVAW(t, in)

	rec := res.Record
	rec.Enable.Raw, rec.Enable.Layout, rec.Enable.Position = "", "", nil

	back, err := Restore(res.Config, rec)
	if err != nil {
		t.Fatal(err)
	}

	if string(back) != string(in) {
		t.Fatalf("restore:\n%s\nwant:\n%s", back, in)
	}
}

func TestMergeRestoreAfterMergeDisable(t *testing.T) {
	in := readTestdata(t, "anchors.yaml")

	res := disableVAW(t, in)

	if strings.Contains(string(res.Config), "#") {
		t.Error("expected the merge to drop comments (the test relies on the merge path)")
	}

	back, err := Restore(res.Config, res.Record)
	if err != nil {
		t.Fatal(err)
	}

	disabled, err := Disabled(back)
	if err != nil {
		t.Fatal(err)
	}

	if !slices.Equal(disabled, []string{"AlwaysPullImages"}) {
		t.Errorf("disabled after restore: %v", disabled)
	}
}

func BenchmarkDisable(b *testing.B) {
	in := generatedConfig(b)

	for b.Loop() {
		if _, err := Disable(in, Options{Plugins: []string{vaw}}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDisableRestore(b *testing.B) {
	in := generatedConfig(b)

	for b.Loop() {
		res := disableVAW(b, in)

		if _, err := Restore(res.Config, res.Record); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRestoreTwice(t *testing.T) {
	for _, file := range []string{"enable-only.yaml", "no-apiserver.yaml", "flow.yaml", "list-block.yaml"} {
		in := readTestdata(t, file)

		res, err := Disable(in, Options{Plugins: []string{vaw, maw}})
		if err != nil {
			t.Fatal(err)
		}

		once, err := Restore(res.Config, res.Record)
		if err != nil {
			t.Fatal(err)
		}

		twice, err := Restore(once, res.Record)
		if err != nil {
			t.Fatal(err)
		}

		if string(once) != string(in) || string(twice) != string(in) {
			t.Errorf("%s: restore is not idempotent:\n%s", file, twice)
		}
	}
}

// TestRestoreAfterReencode: an operator re-encoded the whole config since (talosctl edit, a patch):
// indentation and comments changed, so the recorded text no longer fits; the values still come back.
func TestRestoreAfterReencode(t *testing.T) {
	for _, file := range []string{"string.yaml", "enable-only.yaml", "list-block.yaml", "enable-list.yaml", "quoted.yaml"} {
		t.Run(file, func(t *testing.T) {
			in := readTestdata(t, file)

			res := disableVAW(t, in)

			// Re-encode as the machinery does after an edit.
			cfg, err := configloader.NewFromBytes(res.Config)
			if err != nil {
				t.Fatal(err)
			}

			reencoded, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
			if err != nil {
				t.Fatal(err)
			}

			if strings.Contains(string(reencoded), "#") || string(reencoded) == string(res.Config) {
				t.Fatal("re-encoding kept the text")
			}

			back, err := Restore(reencoded, res.Record)
			if err != nil {
				t.Fatal(err)
			}

			mustLoad(t, back)

			// The text method did it (a merge would give the same here, so ask it directly).
			cur, err := readArgs(reencoded)
			if err != nil {
				t.Fatal(err)
			}

			if viaText, err := restoreText(reencoded, cur, res.Record, undoPlan(cur, res.Record)); err != nil || string(viaText) != string(back) {
				t.Errorf("text restore: err %v", err)
			}

			if n := diffLines(reencoded, back); n > 6 {
				t.Errorf("restore changed %d lines of the re-encoded config", n)
			}

			want, _ := CurrentArgs(in)
			got, _ := CurrentArgs(back)
			checkArgs(t, "restored", got, want)

			// The exact spelling of each value comes back too.
			wantRaw, _ := readArgs(in)
			gotRaw, _ := readArgs(back)

			if !wantRaw.disable.equal(gotRaw.disable) || !wantRaw.enable.equal(gotRaw.enable) {
				t.Errorf("values differ: got %+v, want %+v", gotRaw, wantRaw)
			}
		})
	}
}
