package upgradecheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// Replayer replays the upgrade on the lab's real binaries: the command
// hands it over to `breakglass-lab replay` (the on-call binary links no
// lab), as `breakglass lab ...` does.
type Replayer func(ctx context.Context, req ReplayRequest) (*ReplayResult, error)

// ReplayRequest is what the lab replays: this cluster's admission
// objects, as read from its etcd, and its control planes' extraArgs, on
// the lab's binaries of the two minors.
type ReplayRequest struct {
	Cluster  string
	From, To string // the lab's binaries, vX.Y.Z
	// Objects are the admission objects as one manifest (nil: none);
	// ExtraArgs a machine-config document holding only the first control
	// plane's cluster.apiServer.extraArgs (nil: none).
	Objects, ExtraArgs []byte
	Timeout            time.Duration
}

// ReplayResult is the part of `breakglass-lab replay -o json` the gate
// reads (lab.ReplayReport's fields, by their JSON names).
type ReplayResult struct {
	From          string          `json:"from"`
	To            string          `json:"to"`
	Outcome       string          `json:"outcome"` // starts or deadlock
	Ready         bool            `json:"ready"`
	FailingChecks []string        `json:"failingChecks"`
	Exited        bool            `json:"exited"`
	ExitReason    string          `json:"exitReason,omitempty"`
	Refusals      []ReplayRefusal `json:"refusals"`
	ArgsLeftOut   []string        `json:"argsLeftOut,omitempty"`
	Agrees        bool            `json:"agrees"`
	Mismatch      string          `json:"mismatch,omitempty"`
	Elapsed       string          `json:"elapsed"`
	Runs          []struct {
		ReadyAfter  string `json:"readyAfter,omitempty"`
		NeverStarts bool   `json:"neverStarts,omitempty"`
	} `json:"runs"`
}

// ReplayRefusal is how often one webhook or policy refused a start-up write.
type ReplayRefusal struct {
	Kind          string `json:"kind"`
	Configuration string `json:"configuration"`
	Webhook       string `json:"webhook,omitempty"`
	Count         int    `json:"count"`
}

type replayFacts struct {
	req ReplayRequest
	res *ReplayResult
	err error
	// notReplayed are objects the replay cannot install (encrypted in etcd).
	notReplayed int
}

// replay builds the request from what was read and runs it.
func replay(ctx context.Context, o *Options, f *facts) *replayFacts {
	rf := &replayFacts{req: ReplayRequest{Cluster: f.cluster, Timeout: o.ReplayTimeout}}
	from, err := apiserverargs.For(f.from.String())
	if err != nil {
		rf.err = err
		return rf
	}
	to, err := apiserverargs.For(f.to.String())
	if err != nil {
		rf.err = err
		return rf
	}
	rf.req.From, rf.req.To = from.Version, to.Version
	if len(f.gathered.Configurations) > 0 {
		for _, src := range f.gathered.Sources {
			if strings.HasPrefix(src.Name, "etcd ") {
				rf.req.Objects = src.Data
			}
		}
	}
	rf.notReplayed = len(f.gathered.Unreadable)
	if cps := controlPlanes(f.nodes); len(cps) > 0 {
		for _, ea := range f.gathered.ExtraArgs {
			if ea.Source != cps[0].Addr || len(ea.Args) == 0 {
				continue
			}
			args := map[string]any{}
			for _, a := range ea.Args {
				if a.List {
					args[a.Key] = a.Values
				} else {
					args[a.Key] = strings.Join(a.Values, ",")
				}
			}
			doc := map[string]any{"cluster": map[string]any{"apiServer": map[string]any{"extraArgs": args}}}
			if rf.req.ExtraArgs, err = yaml.Marshal(doc); err != nil {
				rf.err = err
				return rf
			}
		}
	}
	if rf.req.Objects == nil && rf.req.ExtraArgs == nil {
		return rf // nothing of the cluster's own to replay: judged below
	}
	rf.res, rf.err = o.Replay(ctx, rf.req)
	return rf
}

func judgeReplay(f *facts) Check {
	c := Check{ID: CheckReplay, Title: Title(CheckReplay)}
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
