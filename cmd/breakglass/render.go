package main

// What a command prints of a result, for a person (-o json prints the
// result itself). Plans, shown before a question, are built beside what
// plans them, in recovery, and shown by the engine's loop.

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery"
)

// renderRecoverResult writes how a run ended: every step in a table, or,
// when the steps were just told on the same terminal (brief), those that
// ended well in a line and the others in full.
func renderRecoverResult(w io.Writer, res *recovery.RecoverResult, brief bool) {
	fmt.Fprintf(w, "\nIncident %s: %s in %s", res.Incident, res.Outcome, time.Duration(res.Elapsed).Round(time.Millisecond))
	switch {
	case res.DryRun && res.Journal == "":
		fmt.Fprint(w, " (dry run: nothing was changed, nothing written)")
	case res.DryRun:
		fmt.Fprint(w, " (dry run: nothing was changed)")
	}
	fmt.Fprintln(w)
	var fine []string
	for _, st := range res.Steps {
		if brief && (st.Outcome == recovery.OutcomeOK || st.Outcome == recovery.OutcomeSkipped) {
			fine = append(fine, st.Name+" "+st.Outcome)
			continue
		}
		fmt.Fprintf(w, "  %-8s %-18s %8s  %s\n", st.Outcome, st.Name, time.Duration(st.Elapsed).Round(time.Millisecond), st.Message)
	}
	if len(fine) > 0 {
		fmt.Fprintf(w, "  %s\n", strings.Join(fine, ", "))
	}
	for _, u := range res.Undone {
		fmt.Fprintf(w, "NOT DONE: %s\n", u)
	}
	for _, l := range res.LeftBehind {
		fmt.Fprintf(w, "LEFT BEHIND: %s\n", l)
	}
	if res.Journal != "" {
		fmt.Fprintf(w, "Journal: %s\n", res.Journal)
	}
	for _, n := range res.Next {
		fmt.Fprintf(w, "Next: %s\n", n)
	}
}

func renderAdmissionStatus(w io.Writer, nodes []recovery.NodeAdmission, admin bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCONFIGURED\tRUNNING\tSINCE\tAUTO-REVERT")
	for _, n := range nodes {
		if n.Error != "" {
			// The error itself follows the table, with its hints: a
			// long line here would push every column out of sight.
			fmt.Fprintf(tw, "%s\tnot read (see below)\t\t\t\n", n.Node)
			continue
		}
		configured := recovery.ListOrNone(n.ConfigDisabled)
		if !admin {
			configured = "? (needs os:admin)"
		}
		since, revert := "-", "-"
		if n.Since != nil {
			since = n.Since.Local().Format(time.RFC3339) + " by " + n.By
		}
		if n.RollbackPending {
			revert = "at " + n.RollbackAt.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, configured, recovery.ListOrNone(n.RunningDisabled), since, revert)
	}
	tw.Flush()
	for _, n := range nodes {
		if n.Disabled() {
			fmt.Fprintln(w, "WARNING: admission plugins are disabled: webhooks and policies are bypassed while this lasts.")
			fmt.Fprintln(w, "Put them back with: breakglass admission restore")
			return
		}
	}
}

func renderDeleteResult(w io.Writer, res *etcd.DeleteResult, err error) {
	if res.Snapshot != nil {
		if res.DryRun {
			fmt.Fprintf(w, "would save snapshot %s\n", res.Snapshot.Path)
		} else {
			fmt.Fprintf(w, "snapshot %s (%d bytes, sha256 %s) verified\n", res.Snapshot.Path, res.Snapshot.Size, res.Snapshot.SHA256)
		}
	}
	if res.Backup != nil {
		if res.DryRun {
			fmt.Fprintf(w, "would write backup %s\n", res.BackupPath)
		} else {
			fmt.Fprintf(w, "backup %s written and verified\n", res.BackupPath)
		}
	}
	for _, k := range res.Deleted {
		if res.DryRun {
			fmt.Fprintf(w, "would delete %s (guard holds now)\n", safeName(k))
		} else {
			fmt.Fprintf(w, "deleted %s\n", safeName(k))
		}
	}
	switch {
	case err != nil:
	case res.DryRun:
		fmt.Fprintln(w, "Dry run: nothing was written.")
	default:
		if res.RecordPath != "" {
			fmt.Fprintf(w, "recorded in %s\n", res.RecordPath)
		}
		fmt.Fprintf(w, "Undo with: breakglass etcd restore %s\n", res.BackupPath)
	}
}

func renderListing(w io.Writer, l *etcd.Listing) {
	fmt.Fprintf(w, "etcd cluster %s, member %s, revision %d, prefix %s: %d admission object(s)\n", l.Cluster.ClusterID, l.Cluster.MemberID, l.Cluster.Revision, l.Prefix, len(l.Objects))
	for _, o := range l.Objects {
		fmt.Fprintf(w, "\n%s %s\n", o.Kind, safeName(o.Name))
		fmt.Fprintf(w, "  key %s, mod revision %d, version %d, %s\n", safeName(o.Key), o.ModRevision, o.Version, recovery.EncodingNote(o))
		if n := recovery.KeyNote(o); n != "" {
			fmt.Fprintf(w, "  %s\n", n)
		}
		for _, wh := range o.Webhooks {
			fmt.Fprintf(w, "  webhook %s\n", safeName(wh.Name))
			fmt.Fprintf(w, "    failurePolicy %s, timeout %ds, %s\n", wh.FailurePolicy, wh.TimeoutSeconds, safeName(wh.Target()))
			for _, r := range wh.Rules {
				scope := "*"
				if r.Scope != nil {
					scope = string(*r.Scope)
				}
				ops := make([]string, len(r.Operations))
				for i, op := range r.Operations {
					ops[i] = string(op)
				}
				fmt.Fprintf(w, "    rule %s groups=%s versions=%s resources=%s scope=%s\n", strings.Join(ops, ","),
					recovery.ListOrNone(r.APIGroups), recovery.ListOrNone(r.APIVersions), recovery.ListOrNone(r.Resources), scope)
			}
			fmt.Fprintf(w, "    namespaceSelector %s, objectSelector %s\n", selector(wh.NamespaceSelector), selector(wh.ObjectSelector))
			for _, mc := range wh.MatchConditions {
				fmt.Fprintf(w, "    matchCondition %s: %s\n", safeName(mc.Name), safeName(mc.Expression))
			}
			if len(wh.MatchConditions) == 0 {
				fmt.Fprintln(w, "    no matchConditions")
			}
		}
		if p := o.Policy; p != nil {
			if p.PolicyName != "" {
				fmt.Fprintf(w, "  binds policy %s", safeName(p.PolicyName))
				if len(p.ValidationActions) > 0 {
					fmt.Fprintf(w, ", actions %s", strings.Join(p.ValidationActions, ","))
				}
				fmt.Fprintln(w)
			} else {
				fmt.Fprintf(w, "  failurePolicy %s, %d validation(s), %d mutation(s), %d matchCondition(s)\n", p.FailurePolicy, p.Validations, p.Mutations, len(p.MatchConditions))
			}
			if m := p.MatchConstraints; m != nil {
				for _, r := range m.ResourceRules {
					fmt.Fprintf(w, "    matches groups=%s resources=%s\n", recovery.ListOrNone(r.APIGroups), recovery.ListOrNone(r.Resources))
				}
			}
		}
	}
}

// renderAdmissionOutcome writes what happened on each node.
func renderAdmissionOutcome(w io.Writer, p *recovery.AdmissionPlan) {
	for _, n := range p.Nodes {
		if n.Action == "none" {
			continue
		}
		switch n.Outcome {
		case "failed":
			fmt.Fprintf(w, "node %s: %s failed: %s\n", n.Node, n.Action, n.Error)
		case "running":
			fmt.Fprintf(w, "node %s: %s done; kube-apiserver runs with disable-admission-plugins=%s (%s)\n", n.Node, n.Action, recovery.ListOrNone(n.DisabledAfter), time.Duration(n.Elapsed).Round(time.Millisecond))
		default:
			fmt.Fprintf(w, "node %s: %s applied (%s)\n", n.Node, n.Action, time.Duration(n.Elapsed).Round(time.Millisecond))
		}
	}
	if p.Operation == "disable" {
		t := p.Target()
		fmt.Fprintf(w, "Next: wait for the API server (%s), then put the plugins back: %s\n", t.NodesCmd("apiserver wait"), t.NodesCmd("admission restore"))
		for _, n := range p.Nodes {
			if n.RollbackAt != nil {
				fmt.Fprintf(w, "Without a restore, the nodes revert by themselves at %s (try mode).\n", n.RollbackAt.Local().Format(time.RFC3339))
				break
			}
		}
	}
}

// renderTimeline writes the incident's timeline as text, or as Markdown
// ready to paste into a postmortem.
func renderTimeline(w io.Writer, meta recovery.IncidentMeta, rows []recovery.TimelineRow, markdown bool) {
	if markdown {
		fmt.Fprintf(w, "### Incident %s\n\n", meta.ID)
		fmt.Fprintf(w, "- started: %s by %s\n- cluster: %s, nodes: %s\n- runbook: %s\n\n", meta.Started.Format(time.RFC3339), meta.By, orDash(meta.Cluster), strings.Join(meta.Nodes, ", "), meta.Runbook)
		fmt.Fprintln(w, "| time (UTC) | +offset | step | outcome | duration | notes |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, r := range rows {
			fmt.Fprintf(w, "| %s | +%s | %s | %s | %s | %s |\n", r.Start.UTC().Format("15:04:05"), r.Offset.Round(time.Second), r.Step, r.Outcome, r.Elapsed.Round(time.Millisecond), markdownCell(r.Message))
		}
		return
	}
	fmt.Fprintf(w, "Incident %s, started %s by %s (cluster %s, runbook %s)\n", meta.ID, meta.Started.Format(time.RFC3339), meta.By, orDash(meta.Cluster), meta.Runbook)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tOFFSET\tSTEP\tOUTCOME\tDURATION\tNOTES")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t+%s\t%s\t%s\t%s\t%s\n", r.Start.UTC().Format("15:04:05"), r.Offset.Round(time.Second), r.Step, r.Outcome, r.Elapsed.Round(time.Millisecond), r.Message)
	}
	tw.Flush()
}

// markdownCell keeps a message on one table row.
func markdownCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.Join(strings.Fields(s), " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
