package upgradecheck

import (
	"context"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
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
