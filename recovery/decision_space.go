package recovery

// What a diagnosis of a full etcd decides for the run: the runbook that
// gives it room (etcd-nospace) in place of one that would restart
// kube-apiserver into it.

import (
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

// decideNoSpace is decide for the verdict etcd-nospace.
func decideNoSpace(report *diagnose.Report, opts RecoverOptions) (*Decision, error) {
	d, err := followRunbook(report, opts, givesRoom(opts.Steps),
		"restarts kube-apiserver, which cannot finish starting while etcd refuses every write: it would make things worse",
		"restarting kube-apiserver cannot help while etcd refuses every write")
	if err != nil {
		return d, err
	}
	d.Reasons = append(d.Reasons, report.Evidence.Space.Figures())
	return d, nil
}

// givesRoom tells whether the steps give a full etcd room (the etcd-nospace
// runbook's defragmentation).
func givesRoom(steps []Step) bool { return hasAction(steps, runbooks.ActionEtcdDefragment) }

// roomPlanText is the decision's plan in one line.
func roomPlanText() string {
	return "give etcd room: verified snapshot, compact, defragment each member, disarm NOSPACE, check a write"
}
