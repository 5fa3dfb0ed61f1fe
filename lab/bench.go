package lab

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Bench runs one rehearsal per node count, one after the other in the same
// process, and prints breakglass's time against kube-apiserver's own
// apply-to-ready time (the floor) for disable and restore.
func Bench(ctx context.Context, nodeCounts []int, opts RehearseOptions, w io.Writer) ([]*Rehearsal, error) {
	var reps []*Rehearsal
	for _, n := range nodeCounts {
		o := opts
		o.Nodes = n
		if o.Out == nil {
			o.Out = w
		}
		fmt.Fprintf(w, "rehearsal on %d node(s)...\n", n)
		rep, err := Rehearse(ctx, o)
		if err != nil {
			return reps, fmt.Errorf("%d node(s): %w", n, err)
		}
		reps = append(reps, rep)
	}
	PrintBench(w, reps)
	return reps, nil
}

// PrintBench writes the measurements of several rehearsals as one table.
func PrintBench(w io.Writer, reps []*Rehearsal) {
	fmt.Fprintf(w, "\n%-6s %-8s %10s %10s %10s %10s %10s %10s %7s %10s %10s\n", "nodes", "step", "breakglass", "floor", "(poll", "stop", "start)", "overhead", "ratio", "plan", "notice")
	for _, r := range reps {
		for _, s := range []struct {
			name string
			m    Measurement
		}{{"disable", r.Disable}, {"restore", r.Restore}} {
			fmt.Fprintf(w, "%-6d %-8s %10s %10s %10s %10s %10s %10s %7.2f %10s %10s\n", r.Nodes, s.name,
				round(s.m.Total), round(s.m.Floor), round(s.m.Poll), round(s.m.Shutdown), round(s.m.Startup), round(s.m.Overhead), s.m.Ratio, round(s.m.Plan), round(s.m.Notice))
		}
	}
	for _, r := range reps {
		fmt.Fprintf(w, "rehearsal wall time, %d node(s): %s\n", r.Nodes, r.Wall.Round(10*time.Millisecond))
	}
	fmt.Fprintln(w, "floor: the node's own time from the apply to the new kube-apiserver's first /readyz 200 on the slowest")
	fmt.Fprintln(w, "node (seen every 25ms), of which poll: waiting for the kubelet's next manifest poll (every 20s), stop: the")
	fmt.Fprintln(w, "old one shutting down after SIGTERM, start: the new process to its first /readyz 200; breakglass: plan +")
	fmt.Fprintln(w, "apply + wait until ready (it sees the new pod in the node's container list through the Talos API, live,")
	fmt.Fprintln(w, "then polls /readyz every 100ms); notice: from the last node's readiness to breakglass's wait returning.")
}
