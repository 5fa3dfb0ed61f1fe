package etcd

import "strings"

// closest returns the present name the operator most likely meant, or ""
// when none is near. In order: a name containing what was typed (the
// shortest), a name containing its characters in order (a shortened name such
// as kyverno-validating for kyverno-resource-validating-webhook-cfg), then the
// smallest edit distance if it is at most half the length.
func closest(s string, candidates []string) string {
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
		if d := editDistance(ls, strings.ToLower(c)); d*2 <= max(len(s), len(c)) && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
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

// editDistance is the Levenshtein distance over bytes.
func editDistance(a, b string) int {
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
