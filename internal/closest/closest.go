// Package closest finds the name an operator most likely meant, for "did
// you mean" hints. It imports nothing of the project.
package closest

import "strings"

// Name returns the candidate the operator most likely meant by s, or ""
// when none is near. In order: a candidate containing what was typed (the
// shortest), a candidate containing its characters in order (a shortened
// name such as kyverno-validating for kyverno-resource-validating-webhook-cfg),
// then the smallest edit distance if it is at most half the length. Case is
// ignored. For object names, which operators shorten.
func Name(s string, candidates []string) string {
	if s == "" {
		return ""
	}
	ls := strings.ToLower(s)
	for _, match := range []func(c string) bool{
		func(c string) bool { return strings.Contains(c, ls) },
		func(c string) bool { return isSubsequence(ls, c) },
	} {
		best := ""
		for _, c := range candidates {
			if match(strings.ToLower(c)) && (best == "" || len(c) < len(best)) {
				best = c
			}
		}
		if best != "" {
			return best
		}
	}
	best, bestD := "", -1
	for _, c := range candidates {
		if d := Distance(ls, strings.ToLower(c)); d*2 <= max(len(s), len(c)) && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// maxTypo is the longest word Typo compares: beyond it a distance costs too
// much for a hint, and no typo is that long.
const maxTypo = 200

// Typo returns the candidate nearest to s by edit distance when it is
// plausibly a typo of it (at most 2+len(s)/5 edits, and fewer than len(s)),
// or "". Case is ignored; the first of equally near candidates wins. For
// fixed vocabularies (field names, actions, builtin names), which operators
// misspell but do not shorten.
func Typo(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best, bestD := "", 0
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if len(ls) > maxTypo || len(lc) > maxTypo {
			continue // never near enough: at least len(s) edits away
		}
		d := Distance(ls, lc)
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > 2+len(s)/5 || bestD >= len(s) {
		return ""
	}
	return best
}

func isSubsequence(s, in string) bool {
	i := 0
	for j := 0; j < len(in) && i < len(s); j++ {
		if in[j] == s[i] {
			i++
		}
	}
	return i == len(s)
}

// Distance is the Levenshtein distance over bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
