package recovery

import (
	"regexp"
	"strings"
)

// The node's dry-run diff of a machine config shows context lines, and the
// config holds CA and service-account keys, tokens, encryption secrets,
// registry passwords and auths: the diff is printed on the terminal, into
// logs and in -o json, so their values are replaced by <redacted>.
//
// entry is one diff or YAML line: the diff's +/-/space, the indentation, an
// optional list dash, the name, the colon, the value. A name may hold dots,
// dashes and slashes (a Secret's tls.key, bootstrap-token) and be quoted
// (".dockerconfigjson" in JSON).
var entry = regexp.MustCompile(`^([-+ ]?)(\s*)(-\s+)?("[^"]+"|'[^']+'|[A-Za-z0-9_./-]+)(\s*:)(\s*)(.*)$`)

var (
	// alwaysSecret names hold a secret whatever their value looks like
	// (a password is often short).
	alwaysSecret = regexp.MustCompile(`(?i)(password|passwd|passphrase|credential|^auth$|auth$|dockerconfigjson|dockercfg)`)
	// longSecret names hold one when the value is long enough to be a key
	// (keySize: 4096 and tokenTTL: 1h are not).
	longSecret = regexp.MustCompile(`(?i)(key|token|secret)`)
	// blockScalar starts a multi-line value (a PEM under key: |).
	blockScalar = regexp.MustCompile(`^[|>][-+0-9]*\s*(#.*)?$`)
	pemBegin    = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`)
	pemEnd      = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY-----`)
	// fileName names a file, not its content (kube-apiserver's
	// tls-private-key-file, token-auth-file).
	fileName = regexp.MustCompile(`(?i)[-_.]?(file|dir|path)$`)
)

const redacted = "<redacted>"

// redactSecrets replaces the values of secret-looking entries in a config
// text or diff by <redacted>: one-line values, multi-line ones (a block
// scalar under a secret name), and the body of any PEM private key.
func redactSecrets(text string) string {
	lines := strings.Split(text, "\n")
	out := make([]string, 0, len(lines))
	blockIndent := -1 // inside a secret block scalar: the indentation of its name
	inPEM := false
	lastRedacted := ""
	for _, l := range lines {
		prefix, body := diffPrefix(l)
		indent := len(body) - len(strings.TrimLeft(body, " \t"))
		switch {
		case blockIndent >= 0 && (strings.TrimSpace(body) == "" || indent > blockIndent):
			out, lastRedacted = appendRedacted(out, lastRedacted, prefix+body[:indent]+redacted)
			continue
		case inPEM:
			if pemEnd.MatchString(l) {
				inPEM = false
				out = append(out, l)
				lastRedacted = ""
			} else {
				out, lastRedacted = appendRedacted(out, lastRedacted, prefix+body[:indent]+redacted)
			}
			continue
		}
		blockIndent = -1
		lastRedacted = ""
		if pemBegin.MatchString(l) && !pemEnd.MatchString(l) {
			inPEM = true
			out = append(out, l)
			continue
		}
		m := entry.FindStringSubmatch(l)
		if m == nil {
			out = append(out, l)
			continue
		}
		name, value := strings.Trim(m[4], `"'`), strings.TrimSpace(m[7])
		always := alwaysSecret.MatchString(name)
		secret := always || longSecret.MatchString(name) && !fileName.MatchString(name) && !isPath(value)
		switch {
		case !secret || revealsNothing(value):
			out = append(out, l)
		case blockScalar.MatchString(value):
			blockIndent = len(m[2]) + len(m[3])
			out = append(out, l)
		case always || len(value) >= 16:
			// A JSON member keeps its comma, so the line still reads as JSON.
			end := redacted
			if strings.HasSuffix(value, ",") {
				end += ","
			}
			out = append(out, strings.TrimSuffix(l, m[7])+end)
		default:
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// diffPrefix splits a diff line's +, - or space from the rest. A config
// that is not a diff is split the same way, which shifts every line's
// indentation by one alike.
func diffPrefix(l string) (prefix, body string) {
	if l != "" && strings.ContainsRune("+- ", rune(l[0])) {
		return l[:1], l[1:]
	}
	return "", l
}

// appendRedacted adds a redacted line, once for a run of them.
func appendRedacted(out []string, last, line string) ([]string, string) {
	if line == last {
		return out, last
	}
	return append(out, line), line
}

// revealsNothing is a value shown as it is under any name: empty, or a
// yes or no (anonymous-auth: "false", enable-bootstrap-token-auth: true).
func revealsNothing(v string) bool {
	switch strings.Trim(strings.TrimSuffix(v, ","), `"'`) {
	case "", "null", "~", "{}", "[]", "true", "false":
		return true
	}
	return false
}

// isPath is a value that names a file (an absolute path): what a key-file
// flag holds, not the key.
func isPath(v string) bool { return strings.HasPrefix(strings.Trim(v, `"'`), "/") }
