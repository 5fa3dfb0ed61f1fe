package recovery

import (
	"context"
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// DiagnoseResult is the verdict, the culprits and the plan it fixed.
type DiagnoseResult struct {
	said
	Verdict  string    `json:"verdict"`
	Culprits any       `json:"culprits"`
	Decision *Decision `json:"decision,omitempty"`
}

// diagnose looks, changing nothing, and names the culprit: readiness,
// restarts, log signatures, and the admission objects in etcd. What it
// finds fixes the plan (Decision) before the first change.
func (r *run) diagnose(ctx context.Context, _ Step, p *runbooks.DiagnoseParams) (*Plan, error) {
	opts := diagnose.Options{Tail: p.TailLines, Health: ReadyzForDiagnose(r.tc)}
	ec, err := r.etcd(ctx)
	if err != nil {
		opts.EtcdError = err // not fatal: the logs still name the webhook
		ec = nil
	}
	report, err := diagnose.Run(ctx, r.tc, ec, opts)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	_ = diagnose.WriteText(&b, report)
	res := &DiagnoseResult{Verdict: string(report.Verdict), Culprits: report.Culprits}
	plan := &Plan{View: Text(b.String()), Result: res}
	d, err := decide(report, r.opts)
	if err != nil {
		return plan, err
	}
	r.decision, res.Decision = d, d
	plan.View.Foot = d.Render()
	fix := "disable " + strings.Join(d.Plugins, ",")
	if len(d.Flags) > 0 {
		fix = d.flagsPlanText()
		r.followDecision()
	}
	res.said = said(fmt.Sprintf("verdict %s: %s; plan: %s", report.Verdict, report.Summary, fix))
	return plan, nil
}

// ReadyzForDiagnose adapts CheckHealth to diagnose, which cannot import
// this package (this package imports it).
func ReadyzForDiagnose(tc *talos.Client) func(context.Context) ([]diagnose.Readyz, error) {
	return func(ctx context.Context) ([]diagnose.Readyz, error) {
		hs, err := CheckHealth(ctx, tc)
		out := make([]diagnose.Readyz, 0, len(hs))
		for _, h := range hs {
			out = append(out, diagnose.Readyz{Node: h.Node, Ready: h.Ready, FailingChecks: h.FailingChecks, Error: h.ProbeError})
		}
		return out, err
	}
}
