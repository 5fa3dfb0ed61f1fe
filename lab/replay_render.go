package lab

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/breakglass-dev/breakglass/internal/errwriter"
)

// WriteReplay renders a replay report for a person.
func WriteReplay(w io.Writer, r *ReplayReport) error {
	ew := &errwriter.Writer{W: w}
	for _, l := range r.ArgsLeftOut {
		fmt.Fprintf(ew, "not replayed: cluster.apiServer.extraArgs %s\n", l)
	}
	for _, run := range r.Runs {
		fmt.Fprintf(ew, "Upgrade %s -> %s, objects %s, every webhook backend down:\n", r.From, r.To, run.Name)
		switch {
		case run.Ready:
			fmt.Fprintf(ew, "  STARTS: kube-apiserver %s ready %s after it started\n", r.To, run.ReadyAfter)
		case run.NeverStarts:
			fmt.Fprintf(ew, "  NEVER STARTS: kube-apiserver %s refuses its own flags and exits at once: %s\n", r.To, run.ExitReason)
		case run.Exited:
			fmt.Fprintf(ew, "  DEADLOCK: kube-apiserver %s exited: %s\n", r.To, run.ExitReason)
		default:
			fmt.Fprintf(ew, "  DEADLOCK: kube-apiserver %s not ready after the timeout\n", r.To)
		}
		if len(run.FailingChecks) > 0 {
			fmt.Fprintf(ew, "  failing readyz checks: %s\n", strings.Join(run.FailingChecks, ", "))
		}
		if len(run.Refusals) > 0 {
			fmt.Fprintln(ew, "  refused start-up writes (from its log):")
			tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
			for _, ref := range run.Refusals {
				fmt.Fprintf(tw, "    %s\t%s\t%s\t%d\n", ref.Kind, ref.Configuration, ref.Webhook, ref.Count)
			}
			tw.Flush()
		}
		fmt.Fprintf(ew, "  audit predicted: %s (risk %s)", run.Prediction.Outcome, run.Prediction.Risk)
		if len(run.Prediction.Culprits) > 0 {
			fmt.Fprintf(ew, ", blaming %s", strings.Join(run.Prediction.Culprits, ", "))
		}
		fmt.Fprintln(ew)
		if run.Agrees {
			fmt.Fprintln(ew, "  the replay agrees with the audit")
		} else {
			fmt.Fprintf(ew, "  DISAGREEMENT: %s\n", run.Mismatch)
		}
		fmt.Fprintf(ew, "  (replay took %s)\n", run.Elapsed)
	}
	last := r.Runs[len(r.Runs)-1]
	switch {
	case r.Outcome == OutcomeDeadlock && last.NeverStarts:
		fmt.Fprintln(ew, "Do not upgrade as is: take what kube-apiserver refuses out of cluster.apiServer.extraArgs first (breakglass audit -f MACHINECONFIG --to "+r.To+" says what and how), in the machine config's source, then replay again.")
	case r.Outcome == OutcomeDeadlock:
		fmt.Fprintln(ew, "Do not upgrade as is: fix the objects first (breakglass audit -f FILE --fix), then replay with --fix to prove the fix.")
	}
	return ew.Err
}
