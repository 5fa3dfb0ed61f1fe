package configedit

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

var fuzzPlugins = [][]string{
	{vaw},
	{vaw, maw},
	{"PodNodeSelector"},
	{"AlwaysPullImages", vaw},
}

// FuzzDisableRestore: Disable either fails or gives a config that parses, disables the plugins, enables
// none of them, still loads when the input loaded, and (text method) restores to the very same bytes.
func FuzzDisableRestore(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}

	for i, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}

		f.Add(b, uint8(i))
	}

	f.Add(generatedConfig(f), uint8(0))

	for i, c := range edgeShapes {
		f.Add([]byte(c.in), uint8(i))
	}

	for i, c := range shapes(200) {
		f.Add([]byte(c), uint8(i))
	}

	f.Fuzz(checkDisableRestore)
}

func checkDisableRestore(t *testing.T, in []byte, sel uint8) {
	{
		plugins := fuzzPlugins[int(sel)%len(fuzzPlugins)]
		opts := Options{Plugins: plugins, StringOnly: sel&0x80 != 0}
		orig := slices.Clone(in)

		res, err := Disable(in, opts)
		if err != nil {
			return
		}

		if string(in) != string(orig) {
			t.Fatal("Disable modified its input")
		}

		if !res.Changed {
			if string(res.Config) != string(in) {
				t.Fatal("unchanged result differs from the input")
			}

			return
		}

		got, err := CurrentArgs(res.Config)
		if err != nil {
			t.Fatalf("result does not parse: %v\n%s", err, res.Config)
		}

		for _, p := range plugins {
			if !slices.Contains(got.Disable.Plugins, p) {
				t.Fatalf("%s not disabled: %+v\n%s", p, got, res.Config)
			}

			if slices.Contains(got.Enable.Plugins, p) {
				t.Fatalf("%s still enabled: %+v\n%s", p, got, res.Config)
			}
		}

		if _, err := configloader.NewFromBytes(in); err == nil {
			if _, err := configloader.NewFromBytes(res.Config); err != nil {
				t.Fatalf("loader rejects the result: %v\ninput:\n%s\nresult:\n%s", err, in, res.Config)
			}
		}

		if opts.StringOnly && res.After.Disable.Form != FormString {
			t.Fatalf("string-only node got a %s value", res.After.Disable.Form)
		}

		if out, err := RemovePlugins(res.Config, res.Added); err == nil {
			left, err := Disabled(out)
			if err != nil {
				t.Fatalf("RemovePlugins result does not parse: %v\n%s", err, out)
			}

			for _, p := range res.Added {
				if slices.Contains(left, p) {
					t.Fatalf("RemovePlugins left %s:\n%s", p, out)
				}
			}
		}

		again, err := Disable(res.Config, opts)
		if err != nil || again.Changed {
			t.Fatalf("second disable: changed %v, err %v", again.Changed, err)
		}

		back, err := Restore(res.Config, res.Record)
		if res.Method != MethodText {
			return
		}

		// A text edit touches a handful of lines: the disable key (up to three lines when it creates
		// apiServer and extraArgs, or one per added list item) and the enable key.
		if n := diffLines(in, res.Config); n > 12 {
			t.Fatalf("text edit changed %d lines\ninput:\n%s\nresult:\n%s", n, in, res.Config)
		}

		if err != nil {
			t.Fatalf("restore after a text edit: %v\ninput:\n%q\nresult:\n%q", err, in, res.Config)
		}

		if string(back) != string(in) {
			t.Fatalf("restore is not byte-exact\ninput:\n%q\nresult:\n%q\nrestored:\n%q", in, res.Config, back)
		}
	}
}
