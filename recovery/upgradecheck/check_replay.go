package upgradecheck

// replay: the upgrade replayed on the lab's real binaries settles what the
// audit could not decide offline.

import (
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

var replayCheck = &checkDef{
	ID:    CheckReplay,
	Title: "the upgrade replayed on the real binary",
	Help: "with --replay: the real target kube-apiserver started by the lab (breakglass-lab, beside breakglass or on " +
		"PATH) with this cluster's admission objects and flags, every webhook backend down; it settles what the audit " +
		"cannot decide offline",
	NoGo:  "with `--replay`: the real target did not become ready on the lab with this cluster's objects and flags, every webhook backend down",
	Fix:   "fix what the other no-gos name, then replay again",
	Needs: []need{needTalosAPI, needControlPlane, needEtcdKeys, needAuditablePath},
	Asked: func(o *Options) bool { return o.Replay != nil },
	Judge: factsOnly(judgeReplay),
}

func judgeReplay(f *facts) Check {
	var c Check
	r := f.replay
	switch {
	case r == nil:
		return notChecked(c, "the replay needs the cluster's objects and flags, and an upgrade of one minor (see upgrade-path)")
	case r.err != nil:
		c.Verdict, c.NotChecked = NoGo, true
		c.Summary = "the replay could not run: " + errLine(r.err)
		c.Fix = hintsOf(r.err)
		return c
	case r.res == nil:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("nothing of this cluster's to replay: no admission object in etcd and no extraArgs (%s -> %s starts as it does anywhere)", r.req.From, r.req.To)
		return c
	}
	res := r.res
	c.Evidence = append(c.Evidence, fmt.Sprintf("breakglass-lab replay --from %s --to %s: every webhook backend down, the cluster's objects and flags installed on a scratch lab node (%s)", r.req.From, r.req.To, res.Elapsed))
	if r.notReplayed > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d object(s) not replayed: encrypted in etcd", r.notReplayed))
	}
	for _, a := range res.ArgsLeftOut {
		c.Evidence = append(c.Evidence, "left out (the lab owns it): "+termsafe.Text(a))
	}
	if !res.Agrees && res.Mismatch != "" {
		c.Evidence = append(c.Evidence, "the replay disagrees with the audit's prediction (trust the replay): "+termsafe.Text(res.Mismatch))
	}
	if res.Outcome == "starts" {
		c.Verdict = Go
		after := ""
		if len(res.Runs) > 0 && res.Runs[len(res.Runs)-1].ReadyAfter != "" {
			after = " in " + res.Runs[len(res.Runs)-1].ReadyAfter
		}
		c.Summary = fmt.Sprintf("kube-apiserver %s was ready%s with every webhook backend down", res.To, after)
		return c
	}
	c.Verdict = NoGo
	var why []string
	if res.ExitReason != "" {
		why = append(why, "exited: "+termsafe.Text(res.ExitReason))
	}
	if len(res.FailingChecks) > 0 {
		why = append(why, "readyz failing on "+strings.Join(firstN(res.FailingChecks, 3), ", "))
	}
	for _, rf := range res.Refusals {
		who := termsafe.String(rf.Configuration)
		if rf.Webhook != "" {
			who += "/" + termsafe.String(rf.Webhook)
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s %s refused %d start-up write(s)", rf.Kind, who, rf.Count))
	}
	c.Summary = fmt.Sprintf("kube-apiserver %s never became ready on the replay: %s", res.To, strings.Join(why, "; "))
	c.Fix = []string{"fix what the other no-gos name, then replay again"}
	return c
}

// settleByReplay: an admission verdict the audit could not decide offline
// is a warning when the real binary started with every backend down.
func settleByReplay(cs []Check) {
	var admission *Check
	replayGo := false
	for i := range cs {
		switch cs[i].ID {
		case CheckAdmission:
			admission = &cs[i]
		case CheckReplay:
			replayGo = cs[i].Verdict == Go && !cs[i].NotChecked
		}
	}
	if admission != nil && admission.undecided && replayGo {
		admission.Verdict = Warn
		admission.Summary += "; the replay settles it: the real binary started with every backend down"
	}
}
