package recovery

import (
	"regexp"
	"strings"
)

// secretLine matches a YAML entry whose name says it holds a secret (CA and
// service-account keys, tokens, encryption secrets) — the context lines of
// a config diff would otherwise print them on the terminal and into logs.
var secretLine = regexp.MustCompile(`(?i)^([-+ ]?\s*-?\s*[A-Za-z0-9_]*(key|token|secret)[A-Za-z0-9_]*\s*:\s*)(\S.*)$`)

// redactSecrets replaces the values of secret-looking entries in a config
// text or diff by <redacted>.
func redactSecrets(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if m := secretLine.FindStringSubmatch(l); m != nil && len(m[3]) >= 16 {
			lines[i] = m[1] + "<redacted>"
		}
	}
	return strings.Join(lines, "\n")
}
