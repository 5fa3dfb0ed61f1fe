package configedit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// shapes writes n configs that combine the shapes the text edit must handle: indentation, block and
// flow style, quoting, string and list values, missing keys, comments, other documents.
func shapes(n int) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]string, 0, n)

	for range n {
		out = append(out, shape(rng))
	}

	return out
}

// shape writes one config drawn from rng.
func shape(rng *rand.Rand) string {
	pick := func(opts ...string) string { return opts[rng.IntN(len(opts))] }

	{
		ind := pick("  ", "    ")
		i1, i2, i3 := ind, ind+ind, ind+ind+ind
		comment := func() string { return pick("", "", " # note", "  ") }
		head := func(indent string) string {
			return pick("", "", indent+"# about the next key\n", "\n", indent+"\n")
		}

		quoteKey := func(k string) string { return pick(k, k, `"`+k+`"`, "'"+k+"'") }
		quoteVal := func(v string) string { return pick(v, v, `"`+v+`"`, "'"+v+"'") }

		blockValue := func(key string, items []string, indent string) string {
			if len(items) == 0 {
				return head(indent) + indent + quoteKey(key) + ": " + pick("~", "null", `""`, "''", "[]", "[ ]") + comment() + "\n"
			}

			switch rng.IntN(4) {
			case 0, 1:
				return head(indent) + indent + quoteKey(key) + ": " + quoteVal(strings.Join(items, pick(",", ", "))) + comment() + "\n"
			case 2:
				s := head(indent) + indent + quoteKey(key) + ":" + comment() + "\n"
				itemIndent := pick(indent+ind, indent)

				for _, it := range items {
					s += itemIndent + "- " + quoteVal(it) + comment() + "\n"
				}

				return s
			default:
				q := make([]string, len(items))
				for i, it := range items {
					q[i] = quoteVal(it)
				}

				return head(indent) + indent + quoteKey(key) + ": " + pick("[", "[ ") + strings.Join(q, pick(", ", ",")) + pick("]", " ]") + comment() + "\n"
			}
		}

		flowValue := func(key string, items []string) string {
			if len(items) == 0 {
				return quoteKey(key) + ": " + pick("~", "null", `""`, "[]")
			}

			if rng.IntN(2) == 0 {
				q := pick(`"`, "'")

				return quoteKey(key) + ": " + q + strings.Join(items, ",") + q
			}

			return quoteKey(key) + ": [" + strings.Join(items, ", ") + "]"
		}

		disable := [][]string{nil, {"PodNodeSelector"}, {"AlwaysPullImages", "PodNodeSelector"}, {vaw}, {vaw, maw}, {}}[rng.IntN(6)]
		enable := [][]string{nil, nil, {vaw}, {"NodeRestriction", vaw}, {vaw, "AlwaysPullImages", maw}, {"NodeRestriction"}}[rng.IntN(6)]

		var extra string

		switch rng.IntN(6) {
		case 5: // null
			extra = head(i2) + i2 + quoteKey("extraArgs") + ":" + pick("", " ~", " null", "  ~") + comment() + "\n"
		case 0: // missing
		case 1: // flow
			var entries []string
			if rng.IntN(2) == 0 {
				entries = append(entries, "feature-gates: ServerSideApply=true")
			}

			if disable != nil {
				entries = append(entries, flowValue("disable-admission-plugins", disable))
			}

			if enable != nil {
				entries = append(entries, flowValue("enable-admission-plugins", enable))
			}

			rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
			extra = head(i2) + i2 + quoteKey("extraArgs") + ": {" + strings.Join(entries, ", ") + "}" + comment() + "\n"
		default:
			entries := []string{head(i3) + i3 + "feature-gates: ServerSideApply=true" + comment() + "\n"}
			if disable != nil {
				entries = append(entries, blockValue("disable-admission-plugins", disable, i3))
			}

			if enable != nil {
				entries = append(entries, blockValue("enable-admission-plugins", enable, i3))
			}

			if rng.IntN(2) == 0 {
				entries = append(entries, i3+`audit-log-maxage: "30"`+comment()+"\n")
			}

			rng.Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })

			if disable == nil && enable == nil && rng.IntN(3) == 0 {
				extra = head(i2) + i2 + "extraArgs: {}\n"
			} else {
				extra = head(i2) + i2 + quoteKey("extraArgs") + ":" + comment() + "\n" + strings.Join(entries, "")
			}
		}

		var api string

		switch {
		case extra == "" && rng.IntN(3) == 0: // null apiServer
			api = head(i1) + i1 + "apiServer:" + pick("", " ~", " null") + comment() + "\n"
		case extra == "" && rng.IntN(2) == 0: // no apiServer
		case rng.IntN(6) == 0 && extra != "" && !strings.Contains(extra, "\n"+i3) &&
			!strings.HasSuffix(strings.TrimRight(extra, " \n"), ":"): // flow apiServer
			api = i1 + "apiServer: {image: registry.k8s.io/kube-apiserver:v1.34.4, " + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(extra), "# about the next key")) + "}\n"
			if strings.Contains(api, "#") {
				api = ""
			}
		default:
			parts := []string{i2 + "image: registry.k8s.io/kube-apiserver:v1.34.4" + comment() + "\n", extra}
			if rng.IntN(2) == 0 {
				parts = append(parts, i2+"certSANs:\n"+i2+ind+"- 10.5.0.2\n")
			}

			rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
			api = head(i1) + i1 + quoteKey("apiServer") + ":" + comment() + "\n" + strings.Join(parts, "")
		}

		v1 := "version: v1alpha1\nmachine:\n" + i1 + "type: controlplane\n" + head("") + "cluster:\n" +
			i1 + "clusterName: lab" + comment() + "\n" + api + i1 + "controllerManager:\n" + i2 + "image: registry.k8s.io/kube-controller-manager:v1.34.4\n"

		doc := v1

		switch rng.IntN(4) {
		case 1:
			doc = "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n---\n" + v1
		case 2:
			doc = v1 + "---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable # comment\n"
		case 3:
			doc = "---\n" + v1 + "---\napiVersion: v1alpha1\nkind: FutureConfig\nname: x\n"
		}

		if rng.IntN(8) == 0 {
			doc = strings.ReplaceAll(doc, "\n", "\r\n")
		}

		return doc
	}
}

// FuzzShapes draws configs from the shape generator with fuzzed seeds, and plugin sets, and checks
// the FuzzDisableRestore property; every shape it draws must be edited as text.
func FuzzShapes(f *testing.F) {
	for i := range uint64(8) {
		f.Add(i, i*7919, uint8(i))
	}

	f.Fuzz(func(t *testing.T, s1, s2 uint64, sel uint8) {
		c := []byte(shape(rand.New(rand.NewPCG(s1, s2))))
		checkDisableRestore(t, c, sel)

		res, err := Disable(c, Options{Plugins: fuzzPlugins[int(sel)%len(fuzzPlugins)]})
		if err != nil && !errors.Is(err, ErrListOnStringOnly) {
			t.Fatalf("%v\n%s", err, c)
		}

		if err == nil && res.Changed && res.Method != MethodText {
			t.Fatalf("fell back to %s:\n%s", res.Method, c)
		}
	})
}

// TestShapes runs the fuzz property on every generated shape, and checks that the text edit handled
// the shapes it is meant to handle (only unknown document kinds skip the loader).
func TestShapes(t *testing.T) {
	text := 0

	for i, c := range shapes(400) {
		if !strings.Contains(c, "FutureConfig") {
			if _, err := configloader.NewFromBytes([]byte(c)); err != nil {
				t.Fatalf("shape %d does not load: %v\n%s", i, err, c)
			}
		}

		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkDisableRestore(t, []byte(c), uint8(i))
		})

		res, err := Disable([]byte(c), Options{Plugins: []string{vaw}})
		if err != nil {
			t.Fatalf("shape %d: %v\n%s", i, err, c)
		}

		if res.Changed && res.Method != MethodText {
			t.Errorf("shape %d fell back to %s:\n%s", i, res.Method, c)
		}

		if res.Method == MethodText {
			text++
		}
	}

	t.Logf("%d shapes edited as text", text)
}
