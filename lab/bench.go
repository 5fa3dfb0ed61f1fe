package lab

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Bench runs, for each node count and each poll phase (a seed of the
// kubelets' poll, talostest.KubeletOptions.PollSeed), two rehearsals one
// after the other in the same process: the node's passive path (the
// recovery leaves the kubelets to their next poll, --no-kubelet-restart)
// and breakglass's (it restarts them once the nodes rendered the new pod).
// It prints each rehearsal's measurements, then both paths per step side
// by side with their ratio.
func Bench(ctx context.Context, nodeCounts []int, seeds []uint64, opts RehearseOptions, w io.Writer) ([]*Rehearsal, error) {
	if len(seeds) == 0 {
		seeds = []uint64{1}
	}
	var reps []*Rehearsal
	for _, n := range nodeCounts {
		for _, seed := range seeds {
			for _, passive := range []bool{true, false} {
				o := opts
				o.Nodes = n
				o.Lab.Kubelet.PollSeed, o.Lab.NoKubeletRestart = seed, passive
				if o.Out == nil {
					o.Out = w
				}
				fmt.Fprintf(w, "rehearsal on %d node(s), poll seed %d, %s...\n", n, seed, pathName(passive))
				rep, err := Rehearse(ctx, o)
				if err != nil {
					return reps, fmt.Errorf("%d node(s), poll seed %d, %s: %w", n, seed, pathName(passive), err)
				}
				reps = append(reps, rep)
			}
		}
	}
	PrintBench(w, reps)
	PrintPaths(w, reps)
	return reps, nil
}

func pathName(passive bool) string {
	if passive {
		return "passive (kubelets left to their poll)"
	}
	return "breakglass (kubelets restarted)"
}

// PrintBench writes the measurements of several rehearsals as one table.
func PrintBench(w io.Writer, reps []*Rehearsal) {
	fmt.Fprintf(w, "\n%-6s %-5s %-8s %-8s %10s %10s %10s %10s %10s %10s %7s %10s %10s\n", "nodes", "seed", "kubelet", "step", "breakglass", "floor", "(poll", "stop", "start)", "overhead", "ratio", "plan", "notice")
	for _, r := range reps {
		kubelet := "poll"
		if r.KubeletRestart {
			kubelet = "restart"
		}
		for _, s := range []struct {
			name string
			m    Measurement
		}{{"disable", r.Disable}, {"restore", r.Restore}} {
			fmt.Fprintf(w, "%-6d %-5d %-8s %-8s %10s %10s %10s %10s %10s %10s %7.2f %10s %10s\n", r.Nodes, r.PollSeed, kubelet, s.name,
				round(s.m.Total), round(s.m.Floor), round(s.m.Poll), round(s.m.Shutdown), round(s.m.Startup), round(s.m.Overhead), s.m.Ratio, round(s.m.Plan), round(s.m.Notice))
		}
	}
	for _, r := range reps {
		fmt.Fprintf(w, "rehearsal wall time, %d node(s): %s\n", r.Nodes, r.Wall.Round(10*time.Millisecond))
	}
	fmt.Fprintln(w, "floor: the node's own time from the apply to the new kube-apiserver's first /readyz 200 on the slowest")
	fmt.Fprintln(w, "node (seen every 25ms), of which poll: waiting for the kubelet to fetch the new pod (its next poll, every")
	fmt.Fprintln(w, "20s, or its restart), stop: the old one shutting down after SIGTERM, start: the new process to its first")
	fmt.Fprintln(w, "/readyz 200; breakglass: plan + apply + wait until ready (it sees the new pod in the node's container list")
	fmt.Fprintln(w, "through the Talos API, live, then polls /readyz every 100ms); notice: from the last node's readiness to")
	fmt.Fprintln(w, "breakglass's wait returning.")
}

// PrintPaths writes, per node count, poll seed and step, the node's passive
// path (the floor of the rehearsal that left the kubelets to their poll)
// beside breakglass's (the step's time in the one that restarted them), and
// their ratio, then the means over the seeds.
func PrintPaths(w io.Writer, reps []*Rehearsal) {
	type key struct {
		nodes int
		seed  uint64
	}
	passive, active := map[key]*Rehearsal{}, map[key]*Rehearsal{}
	var keys []key
	for _, r := range reps {
		k := key{r.Nodes, r.PollSeed}
		if r.KubeletRestart {
			active[k] = r
		} else {
			passive[k] = r
		}
		if len(keys) == 0 || keys[len(keys)-1] != k {
			keys = append(keys, k)
		}
	}
	type sum struct {
		p, b time.Duration
		n    int
	}
	means := map[string]*sum{}
	var order []string
	fmt.Fprintf(w, "\n%-6s %-5s %-8s %10s %10s %7s\n", "nodes", "seed", "step", "passive", "breakglass", "ratio")
	for _, k := range keys {
		p, b := passive[k], active[k]
		if p == nil || b == nil {
			continue
		}
		for _, s := range []struct {
			name string
			p, b Measurement
		}{{"disable", p.Disable, b.Disable}, {"restore", p.Restore, b.Restore}} {
			fmt.Fprintf(w, "%-6d %-5d %-8s %10s %10s %7.2f\n", k.nodes, k.seed, s.name, round(s.p.Floor), round(s.b.Total), ratio(s.p.Floor, s.b.Total))
			id := fmt.Sprintf("%-6d %-5s %-8s", k.nodes, "mean", s.name)
			if means[id] == nil {
				means[id], order = &sum{}, append(order, id)
			}
			means[id].p += s.p.Floor
			means[id].b += s.b.Total
			means[id].n++
		}
	}
	for _, id := range order {
		m := means[id]
		p, b := m.p/time.Duration(m.n), m.b/time.Duration(m.n)
		fmt.Fprintf(w, "%s %10s %10s %7.2f\n", id, round(p), round(b), ratio(p, b))
	}
	fmt.Fprintln(w, "passive: the node's own apply-to-ready (floor) when nothing restarts the kubelets; breakglass: plan + apply +")
	fmt.Fprintln(w, "kubelet restart + wait until ready, with the same poll phase (seed); ratio: passive / breakglass.")
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return a.Seconds() / b.Seconds()
}
