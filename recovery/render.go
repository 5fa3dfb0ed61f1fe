package recovery

// The plans a step shows before its question, as the engine's loop shows
// them: built here, beside what plans them. What a command prints of a
// result is the command's (cmd/breakglass/render.go).

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/talos/configedit"
)

// AdmissionView is a plan as the operator reads it, one part per node.
func AdmissionView(p *AdmissionPlan) View {
	verb := map[string]string{"disable": "disable admission plugins", "restore": "restore admission plugins"}[p.Operation]
	v := View{Head: fmt.Sprintf("Plan: %s on %d node(s)\n", verb, len(p.Nodes)+len(p.Failed))}
	if d := p.opts.RevertAfter; p.Operation == "disable" && d > 0 && p.Changes() {
		v.Head += fmt.Sprintf("  try mode (--revert-after %s): each node puts the plugins back by itself %s after it is changed (about %s), unless restored first\n",
			shortDuration(d), shortDuration(d), time.Now().Add(d).Local().Format("15:04 MST"))
	}
	if p.Changes() && p.opts.Wait {
		v.Head += kubeletPlanLine(p.opts.KubeletRestart)
	}
	for _, n := range p.Nodes {
		v.Parts = append(v.Parts, ViewPart{Node: n.Node, About: fmt.Sprintf("cluster %s, Talos %s", orNone(n.Cluster), n.TalosVersion), Body: nodePlan(p, n), Detail: nodeDryRun(n)})
	}
	var foot strings.Builder
	for _, f := range p.Failed {
		fmt.Fprintf(&foot, "  node %s: cannot be planned (see below); it will not be changed\n", f)
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(&foot, "WARNING: %s\n", warn)
	}
	v.Foot = foot.String()
	return v
}

// nodePlan is one node's part of a plan, without the node's name.
func nodePlan(p *AdmissionPlan, n *NodeChange) string {
	var w strings.Builder
	if n.Action == "none" {
		fmt.Fprintf(&w, "    nothing to do: %s\n", n.Reason)
		return w.String()
	}
	fmt.Fprintf(&w, "    disable-admission-plugins: %s -> %s\n", ListOrNone(n.DisabledBefore), ListOrNone(n.DisabledAfter))
	if len(n.RemovedFromEnable) > 0 {
		fmt.Fprintf(&w, "    enable-admission-plugins: %s taken out (kube-apiserver refuses a plugin in both lists)\n", strings.Join(n.RemovedFromEnable, ","))
	}
	if n.Reason != "" {
		fmt.Fprintf(&w, "    note: %s\n", n.Reason)
	}
	for _, d := range n.Drift {
		fmt.Fprintf(&w, "    CHANGED SINCE THE DISABLE: %s held %s after it, holds %s now; the restore takes out only what breakglass added and puts back only what it took out: %s\n",
			d.Key, ListOrNone(d.Left), ListOrNone(d.Now), ListOrNone(d.After))
	}
	if n.PendingChange != "" {
		fmt.Fprintf(&w, "    WARNING: %s\n", n.PendingChange)
	}
	for _, u := range n.Unknowns {
		fmt.Fprintf(&w, "    note: %s\n", u)
	}
	if p.Operation == "restore" && n.ByteExact {
		fmt.Fprintln(&w, "    the config will be byte-identical to what it was before disable")
	}
	writeNodeEdit(&w, n)
	return w.String()
}

// writeNodeEdit ends a node's part of a plan: how its config is edited,
// and what the node's own dry run said of it, in a line (nodeDryRun has it
// whole).
func writeNodeEdit(w io.Writer, n *NodeChange) {
	if n.Method == configedit.MethodMerge {
		fmt.Fprintln(w, "    edit: strategic merge (the config's layout could not be edited in place; comments are lost)")
	}
	if d := strings.TrimSpace(n.NodeDiff); d != "" {
		fmt.Fprintf(w, "    the node's dry run: %s\n", dryRunSummary(d))
	}
}

// dryRunSummary is a node's dry-run answer in a line: its summary and how
// many config lines the change adds and removes.
func dryRunSummary(answer string) string {
	var summary string
	added, removed := 0, 0
	inDiff := false
	for _, l := range strings.Split(answer, "\n") {
		switch {
		case strings.HasPrefix(l, "Config diff:"):
			inDiff = true
		case !inDiff && summary == "" && l != "" && !strings.HasPrefix(l, "Dry run summary:"):
			summary = strings.TrimSuffix(strings.TrimSpace(l), ".")
		case inDiff && strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++"):
			added++
		case inDiff && strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "---"):
			removed++
		}
	}
	if summary == "" {
		summary = "validated"
	}
	summary = strings.TrimSuffix(summary, " (skipped in dry-run)")
	return fmt.Sprintf("%s; +%d -%d config lines (-v shows them)", summary, added, removed)
}

// nodeDryRun is the node's own dry-run answer, whole: the evidence behind
// its part of a plan.
func nodeDryRun(n *NodeChange) string {
	d := strings.TrimSpace(n.NodeDiff)
	if d == "" {
		return ""
	}
	var w strings.Builder
	fmt.Fprintf(&w, "  node %s's dry run:\n", n.Node)
	for _, line := range strings.Split(d, "\n") {
		fmt.Fprintf(&w, "    | %s\n", line)
	}
	return w.String()
}

// ListOrNone renders a plugin list as the operator reads it.
func ListOrNone(l []string) string {
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, ",")
}

func orNone(s string) string {
	if s == "" {
		return "(unnamed)"
	}
	return s
}

// shortDuration is 30m rather than 30m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
