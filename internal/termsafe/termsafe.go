// Package termsafe prints text that breakglass did not write (a lock value,
// a journal record, a name read from etcd) so that it cannot drive the
// terminal: control characters, escape sequences, invalid UTF-8 and
// bidirectional overrides are shown escaped, everything else as is.
package termsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String is s with every byte that could move the cursor, recolour or
// rewrite the terminal (or reorder the line) escaped Go-style: \x1b, \n,
// \u202e, \xff for invalid UTF-8. An empty string is shown as "".
func String(s string) string {
	if s == "" {
		return `""`
	}
	return escape(s, `\\`)
}

// Text is String for a line of breakglass's own words that quotes text it
// did not write (a reason naming an object, an error from a decoder): the
// same escapes, but a backslash stays one (a CEL expression's or an
// error's own are meaningful there), and an empty line stays empty.
func Text(s string) string { return escape(s, `\`) }

// escape is s with what could drive the terminal escaped, and each
// backslash written as backslash.
func escape(s, backslash string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(backslash)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// Bytes is String for raw bytes.
func Bytes(b []byte) string { return String(string(b)) }
