package upgradecheck

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// Options say which cluster to check, for which upgrade, and how.
type Options struct {
	// Talos is the cluster: its talosconfig context, nodes and endpoints
	// (the control planes are found among the nodes by their machine config).
	Talos talos.Options
	// Etcd says how to reach etcd (default: https://NODE:2379 of the
	// control planes, a client certificate minted from the etcd CA).
	Etcd recovery.EtcdOptions
	// To is the Kubernetes minor upgraded to; From the one upgraded from
	// (0: the lowest the control planes run). ParseMinor reads them.
	From, To Minor
	// Snapshot is a new file to take a verified etcd snapshot into, now:
	// the rollback point.
	Snapshot string
	// LastSnapshots are snapshot files, or directories of them, taken
	// before: the newest is the rollback point if it verifies and is
	// younger than MaxSnapshotAge (default DefaultMaxSnapshotAge).
	LastSnapshots  []string
	MaxSnapshotAge time.Duration
	// Replay, when set, replays the upgrade on the lab's real binaries.
	Replay Replayer
	// ReplayTimeout bounds the target's start in the replay (0: the lab's).
	ReplayTimeout time.Duration
	// Candidate is a machine config about to be applied (a regenerated
	// config, a new contract), named CandidateName: encryption also judges
	// what it would render. nil: none.
	Candidate     []byte
	CandidateName string
	// SecretsBundle is the path of this cluster's secrets bundle, kept
	// offline (talos-access: a new talosconfig can be made from it); "":
	// none named.
	SecretsBundle string
	// Strict makes a warning a no-go.
	Strict bool
	// Timeout bounds the whole check of this cluster (0: none beyond the
	// connect timeout and etcd's read deadlines).
	Timeout time.Duration
	// Events hears what is being read, for a live line; nil: nothing.
	Events func(Event)
	// Now is the clock (snapshot ages); nil: time.Now.
	Now func() time.Time
}

// DefaultMaxSnapshotAge is how old the newest snapshot named may be.
const DefaultMaxSnapshotAge = 24 * time.Hour

// Event is one cluster's progress: what it is reading, or its verdict.
type Event struct {
	Cluster string
	Message string
	// Done: the cluster's report is complete (Verdict is its verdict).
	Done    bool
	Verdict Verdict
	Report  *Report
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Run checks one cluster. It always returns a report: what could not be
// read is a check's no-go, never an error of the run.
func Run(ctx context.Context, o Options) *Report {
	start := o.now()
	if o.MaxSnapshotAge <= 0 {
		o.MaxSnapshotAge = DefaultMaxSnapshotAge
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	f, conns := gather(ctx, &o)
	defer conns.close()
	f.readTalosAccess(ctx, &o)
	if o.Snapshot != "" || len(o.LastSnapshots) > 0 {
		o.event(f.cluster, "rollback point")
		f.snapshot = rollbackPoint(ctx, &o, f, conns.etcd)
	}
	if o.Replay != nil && f.gathered != nil && f.from != 0 && f.to == f.from+1 {
		o.event(f.cluster, "replaying the upgrade on the lab's real binaries")
		f.replay = replay(ctx, &o, f)
	}
	f.timedOut = o.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded)
	r := &Report{Cluster: f.cluster, Nodes: sortedNodes(f.nodes), To: f.to.String(), FromEvidence: f.fromEvidence,
		Checks: judge(f, &o), Started: start}
	r.From = f.from.String()
	r.finish(o.Strict)
	r.Elapsed = o.now().Sub(start)
	if o.Events != nil {
		o.Events(Event{Cluster: r.Cluster, Done: true, Verdict: r.Verdict, Report: r})
	}
	return r
}

// RunFleet checks several clusters side by side, each bounded by its own
// options (its connect timeout, Timeout): one that cannot be reached is a
// no-go for it and keeps none of the others waiting.
func RunFleet(ctx context.Context, opts []Options) *Fleet {
	start := time.Now()
	fl := &Fleet{Clusters: make([]*Report, len(opts)), Verdict: Go}
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fl.Clusters[i] = Run(ctx, o)
		}()
	}
	wg.Wait()
	for i, r := range fl.Clusters {
		fl.Verdict = worse(fl.Verdict, r.Verdict)
		fl.Strict = fl.Strict || opts[i].Strict
		fl.To = r.To
	}
	fl.Elapsed = time.Since(start)
	return fl
}
