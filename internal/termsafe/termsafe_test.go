package termsafe

import "testing"

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"":                      `""`,
		"alice@laptop":          "alice@laptop",
		"café ✓":                "café ✓",
		"\x1b[2J\x1b]0;pwned\a": `\x1b[2J\x1b]0;pwned\x07`,
		"a\nb\tc\rd":            `a\x0ab\x09c\x0dd`,
		"\xff\xfe":              `\xff\xfe`,
		"evil\u202etxt.exe":     `evil\u202etxt.exe`,
		"\u009b31m":             `\u009b31m`,
		`back\slash`:            `back\\slash`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"":                                    "",
		"binding b: no write is rejected":     "binding b: no write is rejected",
		"binding \x1b[31mred\a: rejected":     `binding \x1b[31mred\x07: rejected`,
		`neither protobuf (k8s\x00) nor JSON`: `neither protobuf (k8s\x00) nor JSON`,
		"matches('^kube-\\w+')\n\u202e":       `matches('^kube-\w+')\x0a\u202e`,
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %s, want %s", in, got, want)
		}
	}
}
