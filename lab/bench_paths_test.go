package lab

import (
	"strings"
	"testing"
	"time"
)

// The bench prints both paths of each poll phase side by side: the passive
// path is the floor of the rehearsal that left the kubelets to their poll,
// breakglass's the step's time in the one that restarted them.
func TestPrintPathsPairsThePhases(t *testing.T) {
	m := func(total, floor time.Duration) Measurement { return Measurement{Total: total, Floor: floor} }
	reps := []*Rehearsal{
		{Nodes: 1, PollSeed: 1, Disable: m(21*time.Second, 20*time.Second), Restore: m(15*time.Second, 14*time.Second)},
		{Nodes: 1, PollSeed: 1, KubeletRestart: true, Disable: m(5*time.Second, 4*time.Second), Restore: m(7*time.Second, 6*time.Second)},
		{Nodes: 1, PollSeed: 2, Disable: m(11*time.Second, 10*time.Second), Restore: m(9*time.Second, 8*time.Second)},
		{Nodes: 1, PollSeed: 2, KubeletRestart: true, Disable: m(5*time.Second, 4*time.Second), Restore: m(4*time.Second, 3*time.Second)},
	}
	var out strings.Builder
	PrintPaths(&out, reps)
	for _, want := range []string{
		"1      1     disable         20s         5s    4.00",
		"1      1     restore         14s         7s    2.00",
		"1      2     disable         10s         5s    2.00",
		"1      mean  disable         15s         5s    3.00",
		"1      mean  restore         11s       5.5s    2.00",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}
