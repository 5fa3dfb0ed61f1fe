package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/breakglass-dev/breakglass/internal/errwriter"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// safe shows a name from the audited objects (read from etcd, a file or an
// API server) so that it cannot drive the terminal; an empty name is "".
// text is the same for the report's own lines that quote them (reasons,
// notes), backslashes kept.
func safe(s string) string { return termsafe.String(s) }
func text(s string) string { return termsafe.Text(s) }

// safeSubject is Finding.Subject with its names shown safely.
func safeSubject(f Finding) string {
	switch {
	case f.ObjectKind == "":
		return safe(f.Configuration) + "/" + safe(f.Webhook)
	case f.Binding == "":
		return f.ObjectKind + " " + safe(f.Configuration)
	}
	return f.ObjectKind + " " + safe(f.Configuration) + " (binding " + safe(f.Binding) + ")"
}

// WriteTable prints the report for a person: a summary line per webhook, then
// a table of the start-up writes each risky webhook would hold up, and why.
func WriteTable(w io.Writer, r Report) error {
	ew := &errwriter.Writer{W: w}
	if len(r.Findings) == 0 && len(r.ArgsSources) > 0 {
		// Only machine configs were given: their flags are the whole report.
		writeArgsTable(ew, r)
		ew.Printf("\n%s.\n", argsCount(r))
		return ew.Err
	}
	ew.Printf("Kubernetes %s start-up writes (upgraded from %s); webhook backends assumed unreachable; slow-start from %gs.\n\n",
		r.KubernetesVersion, r.FromVersion, r.SlowTimeoutSeconds)
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RISK\tKIND\tCONFIGURATION\tWEBHOOK\tPOLICY\tTIMEOUT\tFATAL WRITES")
	for _, f := range r.Findings {
		fatal := 0
		for _, b := range f.Blocks {
			if b.Fatal && b.Outcome != OutcomeUnknown {
				fatal++
			}
		}
		kind, webhook := string(f.Kind), safe(f.Webhook)
		if f.ObjectKind != "" { // a policy: its kind, and the binding in the webhook's place
			kind, webhook = f.ObjectKind, "binding "+safe(f.Binding)
			if f.Binding == "" {
				webhook = "-"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%ds\t%d\n", f.Risk, kind, safe(f.Configuration), webhook, f.FailurePolicy, f.TimeoutSeconds, fatal)
	}
	tw.Flush()
	for _, f := range r.Findings {
		if f.Risk == RiskNone {
			continue
		}
		if f.ObjectKind != "" {
			ew.Printf("\n%s %s: %s\n", strings.ToUpper(string(f.Risk)), safeSubject(f), text(strings.Join(f.Reasons, "; ")))
		} else {
			ew.Printf("\n%s %q (%s, %s): %s\n", strings.ToUpper(string(f.Risk)), f.Webhook, safe(f.Configuration), f.Kind, text(strings.Join(f.Reasons, "; ")))
		}
		// The fatal (and undecided) writes in full; the others by name.
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  REQUEST\tOUTCOME\tEFFECT\tHOOK\tWHY")
		var minor []string
		for _, b := range f.Blocks {
			if !b.Fatal {
				minor = append(minor, b.ID)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", b.Request, b.Outcome, b.Effect, safe(b.Hook), text(strings.Join(b.Why, "; ")))
		}
		tw.Flush()
		if len(minor) > 0 {
			ew.Printf("  also holds up %d non-fatal write(s): %s\n", len(minor), strings.Join(countedIDs(minor), ", "))
		}
		if f.Fix != "" {
			ew.Printf("  fix: add matchCondition %s: %s\n", ExcludeAPIServerName, f.Fix)
		}
	}
	if len(r.ArgsSources) > 0 {
		ew.Printf("\n")
		writeArgsTable(ew, r)
	}
	ew.Printf("\n%d deadlock, %d unknown, %d slow-start, %d none.\n",
		r.Count(RiskDeadlock), r.Count(RiskUnknown), r.Count(RiskSlowStart), r.Count(RiskNone))
	if len(r.ArgsSources) > 0 {
		ew.Printf("%s.\n", argsCount(r))
	}
	return ew.Err
}

// writeArgsTable prints the verdicts on the cluster's extraArgs: what
// kube-apiserver ToVersion says to each, in its own words, and the fix.
func writeArgsTable(ew *errwriter.Writer, r Report) {
	ew.Printf("kube-apiserver %s flags (cluster.apiServer.extraArgs of %s), as the recorded binaries answer them:\n",
		r.ToVersion, text(strings.Join(r.ArgsSources, ", ")))
	if len(r.APIServerArgs) == 0 {
		ew.Printf("  every flag, feature gate and runtime-config entry is accepted by %s without a warning\n", r.ToVersion)
		return
	}
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  RISK\tSOURCE\tFLAG\tITEM\tKUBE-APISERVER %s SAYS\tON %s\n", r.ToVersion, r.FromVersion)
	for _, f := range r.APIServerArgs {
		onFrom := f.OnFrom
		if onFrom == "" {
			onFrom = "accepted"
		}
		fmt.Fprintf(tw, "  %s\t%s\t--%s\t%s\t%s\t%s\n", f.Risk, text(f.Source), text(f.Flag), orDash(text(f.Item)), text(f.OnTo), text(onFrom))
	}
	tw.Flush()
	stays := map[string]bool{}
	for i, f := range r.APIServerArgs {
		if f.Fix == "" {
			continue
		}
		ew.Printf("  fix %s (%s): %s\n", text(f.Subject()), text(f.Source), text(f.Fix))
		last := i == len(r.APIServerArgs)-1 || r.APIServerArgs[i+1].Flag != f.Flag || r.APIServerArgs[i+1].Source != f.Source
		if f.Risk == RiskDeadlock && f.Item != "" && last && !stays[f.Source+"/"+f.Flag] {
			stays[f.Source+"/"+f.Flag] = true
			if f.RemoveKey {
				ew.Printf("      nothing of %s stays: remove the key\n", text(f.Flag))
			} else {
				ew.Printf("      what stays of %s: %q\n", text(f.Flag), f.FixedValue)
			}
		}
	}
	for _, f := range r.APIServerArgs {
		if f.Risk == RiskDeadlock {
			ew.Printf("  %s exits at once on each of these (\"command failed\" or \"Error: unknown flag\"), and the kubelet restarts it with back-off: fix the machine config's source (Omni template, talhelper, Terraform, patch files) before the upgrade\n", r.ToVersion)
			break
		}
	}
}

func argsCount(r Report) string {
	n := map[Risk]int{}
	for _, f := range r.APIServerArgs {
		n[f.Risk]++
	}
	return fmt.Sprintf("kube-apiserver flags: %d deadlock, %d unknown, %d warning", n[RiskDeadlock], n[RiskUnknown], n[RiskWarning])
}

// countedIDs says each ID once, in order, with how often it came ("clusterrole-update x7").
func countedIDs(ids []string) []string {
	n := map[string]int{}
	var order []string
	for _, id := range ids {
		if n[id] == 0 {
			order = append(order, id)
		}
		n[id]++
	}
	for i, id := range order {
		if n[id] > 1 {
			order[i] = fmt.Sprintf("%s x%d", id, n[id])
		}
	}
	return order
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteJSON prints the report as indented JSON (see doc.go for the fields).
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteFixSummary prints what a fix plan changes and what remains.
func WriteFixSummary(w io.Writer, p *FixPlan) error {
	ew := &errwriter.Writer{W: w}
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONFIGURATION\tWEBHOOK\tADDED\tRISK BEFORE\tRISK AFTER")
	for _, c := range p.Changes {
		names := make([]string, len(c.Added))
		for i, a := range c.Added {
			names[i] = a.Name
		}
		webhook := safe(c.Webhook)
		if c.Index < 0 { // an admission policy
			webhook = "(" + policyKindName[c.Kind] + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safe(c.Configuration), webhook, strings.Join(names, ","), c.RiskBefore, c.RiskAfter)
	}
	tw.Flush()
	for _, n := range p.Notes {
		ew.Printf("note: %s\n", text(n))
	}
	return ew.Err
}
