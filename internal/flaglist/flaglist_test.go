package flaglist

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{nil, nil},
		{[]string{""}, nil},
		{[]string{" , ,"}, nil},
		{[]string{"a"}, []string{"a"}},
		{[]string{"a, b", "c"}, []string{"a", "b", "c"}},
		{[]string{"a,b,,c "}, []string{"a", "b", "c"}},
		{[]string{"b,a", "a"}, []string{"b", "a", "a"}}, // kept as given: the caller decides about repeats
	} {
		if got := Split(tc.in...); !slices.Equal(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("Split(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
