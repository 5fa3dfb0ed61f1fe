package recovery

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() { register((*run).diagnoseCluster) }

// decided is the plan the diagnosis fixed: the loop follows it.
func (d *DiagnoseResult) decided() *Decision { return d.Decision }

// diagnoseCluster looks, changing nothing, and names the culprit: readiness,
// restarts, log signatures, and the admission objects in etcd. What it
// finds fixes the plan (Decision) before the first change.
func (r *run) diagnoseCluster(ctx context.Context, s Step, p *runbooks.DiagnoseParams) (*Plan, error) {
	opts := diagnose.Options{Tail: p.TailLines, Health: ReadyzForDiagnose(r.tc), Gone: r.gone, LostAfter: lostAfter, Progress: r.progress}
	ec, err := r.etcdClient(ctx)
	if err != nil {
		opts.EtcdError = err // not fatal: the logs still name the webhook
		ec = nil
	}
	report, err := diagnose.Run(ctx, r.tc, ec, opts)
	if err != nil {
		return nil, err
	}
	// The diagnosis's own next commands are left out: this run is the next
	// command, and its decision below says what it will do.
	res := &DiagnoseResult{Verdict: string(report.Verdict), Summary: report.Summary, Culprits: report.Culprits, Cluster: clusterIdentity(ctx, ec)}
	plan := &Plan{View: View{Head: diagnose.Brief(report), Detail: diagnose.EvidenceText(report)}, Result: res}
	d, err := decide(report, r.opts)
	if err != nil {
		return plan, err
	}
	res.Decision = d
	plan.View.Foot = d.Render()
	// The summary is in the view just above and in the result's record.
	msg := fmt.Sprintf("verdict %s; plan: %s", report.Verdict, d.planText())
	if len(d.Steps) > 0 {
		// The loop follows the type's runbook from here, and the step count
		// changes with it: say so where it does.
		total := slices.IndexFunc(r.opts.Steps, func(x Step) bool { return x.Name == s.Name }) + 1 + len(stepNames(d.Steps, runbooks.ActionDiagnose))
		msg = fmt.Sprintf("verdict %s; runbook %s from here, %d steps in all; plan: %s", report.Verdict, d.Runbook, total, d.planText())
	}
	res.said = said(msg)
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

// lostAfter is how long the diagnosis watches an etcd member down before it
// counts as lost (diagnose.LostAfter; tests shorten it).
var lostAfter = diagnose.LostAfter

// clusterIdentity is the cluster etcd holds (its kube-system namespace's
// UID, and the revision), read from the member reached without quorum too;
// nil when it cannot be read.
func clusterIdentity(ctx context.Context, ec *etcd.Client) *etcd.Identity {
	if ec == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := ec.Identity(ctx)
	if err != nil || id.ClusterUID == "" {
		return nil
	}
	return &id
}
