package jsonpath

import "testing"

func TestGet(t *testing.T) {
	m := map[string]any{"spec": map[string]any{"names": map[string]any{"kind": "Widget"}, "scope": "Namespaced", "list": []any{"a"}}}
	for _, tc := range []struct {
		path []string
		want any
	}{
		{[]string{"spec", "names", "kind"}, "Widget"},
		{[]string{"spec", "scope"}, "Namespaced"},
		{[]string{"spec", "missing"}, nil},
		{[]string{"spec", "scope", "deeper"}, nil},
		{[]string{"spec", "list", "0"}, nil},
		{[]string{"nothing", "at", "all"}, nil},
	} {
		if got := Get(m, tc.path...); got != tc.want {
			t.Errorf("Get(%v) = %v, want %v", tc.path, got, tc.want)
		}
	}
	if got, ok := Get(m).(map[string]any); !ok || got["spec"] == nil {
		t.Errorf("Get() = %v, want m itself", got)
	}
}
