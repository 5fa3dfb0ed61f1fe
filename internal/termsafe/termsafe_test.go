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
