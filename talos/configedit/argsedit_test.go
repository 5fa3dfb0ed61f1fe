package configedit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const argsHead = "version: v1alpha1\nmachine:\n    type: controlplane\ncluster:\n    clusterName: lab\n    apiServer:\n        image: registry.k8s.io/kube-apiserver:v1.34.4\n"

func TestRemoveArgs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extra    string // the extraArgs entry (after argsHead), or a whole config when it starts with "version:"
		removals []ArgRemoval
		want     string // the extraArgs entry after, "" when it goes
		removed  []string
		notFound int
	}{
		{name: "a gate from a string, the others kept as written",
			extra:    "        extraArgs:\n            feature-gates: ServerSideApply=true, MultiCIDRServiceAllocator=false,NoSuchGate=true # ours\n            audit-log-maxage: \"30\"\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}},
			want:     "        extraArgs:\n            feature-gates: ServerSideApply=true,NoSuchGate=true # ours\n            audit-log-maxage: \"30\"\n",
			removed:  []string{"MultiCIDRServiceAllocator=false"}},
		{name: "two gates, value spelled otherwise, kube: prefix",
			extra:    "        extraArgs:\n            feature-gates: \"kube:MultiCIDRServiceAllocator=False,SidecarContainers=false,A=true\"\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false", "SidecarContainers"}}},
			want:     "        extraArgs:\n            feature-gates: \"A=true\"\n",
			removed:  []string{"kube:MultiCIDRServiceAllocator=False", "SidecarContainers=false"}},
		{name: "a gate set to the value its lock allows stays",
			extra:    "        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=true\n            x: y\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}},
			want:     "        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=true\n            x: y\n", notFound: 1},
		{name: "block list: an item goes, an emptied item goes",
			extra:    "        extraArgs:\n            feature-gates:\n                - MultiCIDRServiceAllocator=false\n                - A=true,ConsistentListFromCache=false\n            x: y\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false", "ConsistentListFromCache=false"}}},
			want:     "        extraArgs:\n            feature-gates:\n                - A=true\n            x: y\n",
			removed:  []string{"MultiCIDRServiceAllocator=false", "ConsistentListFromCache=false"}},
		{name: "flow list",
			extra:    "        extraArgs:\n            runtime-config: [api/all=true, networking.k8s.io/v1alpha1=true]\n",
			removals: []ArgRemoval{{Key: "runtime-config", Items: []string{"networking.k8s.io/v1alpha1"}}},
			want:     "        extraArgs:\n            runtime-config: [api/all=true]\n",
			removed:  []string{"networking.k8s.io/v1alpha1=true"}},
		{name: "a group names its versions and resources",
			extra:    "        extraArgs:\n            runtime-config: foo.example.com/v1=true,foo.example.com/v2/bars=false,apps/v1=true\n",
			removals: []ArgRemoval{{Key: "runtime-config", Items: []string{"foo.example.com"}}},
			want:     "        extraArgs:\n            runtime-config: apps/v1=true\n",
			removed:  []string{"foo.example.com/v1=true", "foo.example.com/v2/bars=false"}},
		{name: "a whole key, its neighbours and comments kept",
			extra:    "        extraArgs:\n            # the old cloud\n            cloud-provider: external\n            feature-gates: A=true\n",
			removals: []ArgRemoval{{Key: "cloud-provider"}},
			want:     "        extraArgs:\n            # the old cloud\n            feature-gates: A=true\n",
			removed:  []string{"external"}},
		{name: "the last key of a block extraArgs: the entry goes",
			extra:    "        extraArgs:\n            cloud-provider: external\n        certSANs: [a]\n",
			removals: []ArgRemoval{{Key: "cloud-provider"}},
			want:     "        certSANs: [a]\n", removed: []string{"external"}},
		{name: "the only gate: the key goes",
			extra:    "        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=false\n            x: y\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}},
			want:     "        extraArgs:\n            x: y\n", removed: []string{"MultiCIDRServiceAllocator=false"}},
		{name: "flow extraArgs emptied stays {}",
			extra:    "        extraArgs: {cloud-provider: external}\n",
			removals: []ArgRemoval{{Key: "cloud-provider"}},
			want:     "        extraArgs: {}\n", removed: []string{"external"}},
		{name: "two keys, the last emptying extraArgs",
			extra:    "        extraArgs:\n            cloud-provider: external\n            feature-gates: NoSuchGate=true\n        certSANs: [a]\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"NoSuchGate"}}, {Key: "cloud-provider"}},
			want:     "        certSANs: [a]\n", removed: []string{"NoSuchGate=true", "external"}},
		{name: "absent key", extra: "        extraArgs:\n            x: y\n",
			removals: []ArgRemoval{{Key: "cloud-provider"}}, want: "        extraArgs:\n            x: y\n", notFound: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := argsHead + tc.extra
			res, err := RemoveArgs([]byte(in), tc.removals)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(res.Config); got != argsHead+tc.want {
				t.Errorf("config:\n%s\nwant:\n%s", got, argsHead+tc.want)
			}
			var removed []string
			for _, c := range res.Changes {
				removed = append(removed, c.Removed...)
			}
			if !slices.Equal(removed, tc.removed) || len(res.NotFound) != tc.notFound || res.Changed != (len(tc.removed) > 0) {
				t.Errorf("removed %v, not found %v, changed %t", removed, res.NotFound, res.Changed)
			}
			if res.Changed && res.Method != MethodText {
				t.Errorf("method %s", res.Method)
			}
			// The record survives JSON (the journal) and restores the very bytes.
			b, _ := json.Marshal(res.Record)
			var rec ArgsRecord
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatal(err)
			}
			back, err := RestoreArgs(res.Config, rec)
			if err != nil {
				t.Fatal(err)
			}
			if string(back) != in {
				t.Errorf("restored:\n%s\nwant:\n%s", back, in)
			}
		})
	}
}

// A realistic generated Talos config, string and list forms, CRLF: only the
// edited lines change, and restore is byte for byte.
func TestRemoveArgsGeneratedConfig(t *testing.T) {
	gen := string(generatedConfig(t))
	marker := "\n    apiServer:\n"
	for _, form := range []string{
		"        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=false,A=true\n            cloud-provider: external\n",
		"        extraArgs:\n            feature-gates:\n                - MultiCIDRServiceAllocator=false\n                - A=true\n            cloud-provider: [external]\n",
	} {
		in := strings.Replace(gen, marker, marker+form, 1)
		for _, crlf := range []bool{false, true} {
			cfg := in
			if crlf {
				cfg = strings.ReplaceAll(in, "\n", "\r\n")
			}
			res, err := RemoveArgs([]byte(cfg), []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}, {Key: "cloud-provider"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Method != MethodText {
				t.Fatalf("method %s", res.Method)
			}
			if d := diffLines([]byte(cfg), res.Config); d > 3 {
				t.Errorf("%d lines differ", d)
			}
			back, err := RestoreArgs(res.Config, res.Record)
			if err != nil || string(back) != cfg {
				t.Errorf("restore (crlf %t): %v", crlf, err)
			}
		}
	}
}

// Changes made since are kept; only the recorded keys come back.
func TestRestoreArgsKeepsOtherChanges(t *testing.T) {
	in := argsHead + "        extraArgs:\n            cloud-provider: external\n            feature-gates: A=true,NoSuchGate=true\n            audit-log-maxage: \"30\"\n"
	res, err := RemoveArgs([]byte(in), []ArgRemoval{{Key: "cloud-provider"}, {Key: "feature-gates", Items: []string{"NoSuchGate"}}})
	if err != nil {
		t.Fatal(err)
	}
	since := strings.Replace(string(res.Config), `audit-log-maxage: "30"`, `audit-log-maxage: "10"`, 1)
	back, err := RestoreArgs([]byte(since), res.Record)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(in, `audit-log-maxage: "30"`, `audit-log-maxage: "10"`, 1)
	if string(back) != want {
		t.Errorf("got:\n%s\nwant:\n%s", back, want)
	}
}

// A shape the text edit refuses (an alias) goes through the strategic merge;
// the values come back, not the comments.
func TestRemoveArgsMerge(t *testing.T) {
	in := "version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  clusterName: &n lab\n  apiServer:\n    extraArgs:\n      feature-gates: MultiCIDRServiceAllocator=false,A=true\n      cloud-provider: external\n"
	res, err := RemoveArgs([]byte(in), []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}, {Key: "cloud-provider"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Method != MethodMerge {
		t.Fatalf("method %s", res.Method)
	}
	if v, _ := CurrentArg(res.Config, "feature-gates"); !slices.Equal(v.Values, []string{"A=true"}) {
		t.Errorf("feature-gates %+v", v)
	}
	if v, _ := CurrentArg(res.Config, "cloud-provider"); v.Form != FormAbsent {
		t.Errorf("cloud-provider %+v", v)
	}
	back, err := RestoreArgs(res.Config, res.Record)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"feature-gates", "cloud-provider"} {
		a, _ := CurrentArg([]byte(in), k)
		b, _ := CurrentArg(back, k)
		if !slices.Equal(a.Values, b.Values) || a.Form != b.Form {
			t.Errorf("%s: %+v, want %+v", k, b, a)
		}
	}
}

func TestRemoveArgsErrors(t *testing.T) {
	in := []byte(argsHead + "        extraArgs:\n            x: y\n")
	for _, rm := range [][]ArgRemoval{nil, {{Key: "--x"}}, {{Key: "X"}}, {{Key: "x"}, {Key: "x"}}} {
		if _, err := RemoveArgs(in, rm); err == nil {
			t.Errorf("%+v accepted", rm)
		}
	}
	if _, err := RestoreArgs(in, ArgsRecord{Version: 9}); err == nil {
		t.Error("record version 9 accepted")
	}
	if _, err := RemoveArgs([]byte("apiVersion: v1\nkind: X\n"), []ArgRemoval{{Key: "x"}}); err == nil {
		t.Error("not a machine config")
	}
}

// FuzzRemoveRestoreArgs: RemoveArgs fails, or gives a config that parses,
// holds none of what it removed, still loads when the input loaded, and
// (text method) restores to the very same bytes.
func FuzzRemoveRestoreArgs(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for i, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(i))
	}
	for i, c := range edgeShapes {
		f.Add([]byte(c.in), uint8(i))
	}
	for i, c := range shapes(100) {
		f.Add([]byte(c), uint8(i))
	}
	f.Add([]byte(argsHead+"        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=false,A=true\n            cloud-provider: external\n"), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, sel uint8) {
		removals := [][]ArgRemoval{
			{{Key: KeyEnable, Items: []string{"NodeRestriction"}}},
			{{Key: KeyDisable}},
			{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}, {Key: "cloud-provider"}},
			{{Key: KeyEnable}, {Key: KeyDisable, Items: []string{vaw}}},
		}[int(sel)%4]
		orig := slices.Clone(in)
		res, err := RemoveArgs(in, removals)
		if err != nil {
			return
		}
		if string(in) != string(orig) {
			t.Fatal("input modified")
		}
		for _, c := range res.Changes {
			v, err := CurrentArg(res.Config, c.Key)
			if err != nil {
				t.Fatalf("edited config does not read: %v", err)
			}
			if !slices.Equal(v.Values, c.After.Values) || v.Form != c.After.Form {
				t.Fatalf("%s: %+v, want %+v", c.Key, v, c.After)
			}
		}
		back, err := RestoreArgs(res.Config, res.Record)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if res.Method == MethodText && string(back) != string(in) {
			t.Fatalf("restore is not byte for byte:\n%q\n%q", back, in)
		}
	})
}
