package etcd

import "strings"

// closest returns the candidate nearest to s ("" if none): a candidate that
// contains s (the operator typed part of a long name) wins, the shortest
// such; otherwise the one at the smallest edit distance.
func closest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best := ""
	for _, c := range candidates {
		if s != "" && strings.Contains(strings.ToLower(c), ls) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	if best != "" {
		return best
	}
	bestD := -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
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
