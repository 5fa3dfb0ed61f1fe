package recovery

// A full etcd: its NOSPACE alarm refuses every write, so kube-apiserver
// cannot finish starting (runbook etcd-nospace). Every member must be given
// room: one left full raises the alarm again. The cluster lock, itself a
// write, waits until etcd takes writes.

import (
	"strings"

	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	registerType(&IncidentType{
		Name:     "etcd-nospace",
		Verdicts: []diagnose.Verdict{diagnose.EtcdNoSpace},
		Runbook:  "etcd-nospace",
		Does:     "gives a full etcd room",
		Fits:     func(steps []Step) bool { return hasAction(steps, runbooks.ActionEtcdDefragment) },
		Decide: func(d *Decision, report *diagnose.Report, _ RecoverOptions) error {
			d.Reasons = append(d.Reasons, report.Evidence.Space.Figures())
			return nil
		},
		Plan: func(*Decision) string {
			return "give etcd room: verified snapshot, compact, defragment each member, disarm NOSPACE, check a write"
		},
		Scope:     ScopeEveryMember,
		LockLater: true,
		Advice:    adviseRoom,
	})
}

// adviseRoom is what every run that gave etcd room says last, done or
// not: what filled it, and how to keep it from filling again (nothing of
// it done unasked).
func adviseRoom(r *run, _ *Decision, _ error) []string {
	var out []string
	if u, ok := earlier[*UsageResult](r, runbooks.ActionEtcdUsage); ok && len(u.Top) > 0 {
		out = append(out, "what filled etcd: "+strings.Join(u.Top, "; ")+": remove the source (an event flood, a controller writing in a loop) or it fills again; the whole report: "+r.target.NodesCmd("etcd usage"))
	}
	return append(out, quotaAdvice)
}
