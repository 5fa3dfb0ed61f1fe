package yamlnode

import (
	"testing"

	"gopkg.in/yaml.v3"
)

func TestLookup(t *testing.T) {
	var doc yaml.Node
	src := "a: 1\n\"b\": [x]\n? [c]\n: complex\nc: 3\nb: again\n"
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0]
	for key, want := range map[string]int{"a": 0, "b": 2, "c": 6, "d": -1} {
		if got := Index(m, key); got != want {
			t.Errorf("Index(%q) = %d, want %d", key, got, want)
		}
	}
	if k, v := Get(m, "b"); k == nil || k.Line != 2 || v.Kind != yaml.SequenceNode {
		t.Errorf("Get(b) = %v, %v: want the first b, quoted", k, v)
	}
	if v := Value(m, "c"); v == nil || v.Value != "3" {
		t.Errorf("Value(c) = %v: a non-scalar key is not c", v)
	}
	if k, v := Get(m, "d"); k != nil || v != nil {
		t.Error("Get of a missing key")
	}
	for _, n := range []*yaml.Node{nil, &doc, m.Content[3]} {
		if Index(n, "a") != -1 || Value(n, "a") != nil {
			t.Errorf("lookup in a non-mapping %v", n)
		}
	}
}
