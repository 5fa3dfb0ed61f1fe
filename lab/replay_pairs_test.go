//go:build testall

package lab

import "testing"

// The other upgrade pairs the lab builds, replayed with the lab's
// Kyverno-like webhooks (`make test-all`; CI replays 1.32 -> 1.34 and the
// newest pair): the replay decides each outcome, the audit must agree, and
// the fix must start.
func TestReplayOtherPairs(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	for _, p := range [][2]string{{"v1.32.13", "v1.33.13"}, {"v1.33.13", "v1.34.4"}, {"v1.34.4", "v1.35.4"}, {"v1.35.4", "v1.36.3"}} {
		t.Run(p[0]+"-to-"+p[1], func(t *testing.T) { t.Parallel(); replayKyvernoLike(t, p[0], p[1], "") })
	}
}
