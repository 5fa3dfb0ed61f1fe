package recovery

// The steps that give a full etcd room (runbook etcd-nospace): what filled
// it, the compaction of its history, the defragmentation of each member
// through the Talos API, and the disarm of its NOSPACE alarm with a write
// that proves it takes writes again.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() {
	register((*run).usage)
	register((*run).compact)
	register((*run).defragment)
	register((*run).disarm)
}

// UsageResult is what filled etcd, as the journal keeps it for the summary.
type UsageResult struct {
	said
	Top         []string `json:"top"`         // the largest groups (5% or more), as a summary quotes them
	Live        int64    `json:"liveBytes"`   // what only deleting the source frees
	Reclaimable int64    `json:"reclaimable"` // what compaction and defragmentation free on the fullest member (estimated)
	DBSize      int64    `json:"dbSize"`
	AfterDefrag int64    `json:"afterDefragBytes"`
	Quota       int64    `json:"quota,omitempty"`
}

// usage reads what fills etcd, changing nothing: the largest groups of
// keys, and how much compaction and defragmentation will free.
func (r *run) usage(ctx context.Context, _ Step, p *runbooks.EtcdUsageParams) (*Plan, error) {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	u, err := ec.Usage(ctx, etcd.UsageOptions{})
	if err != nil {
		return nil, err
	}
	sp := u.Space
	res := &UsageResult{Live: sp.Live, Reclaimable: sp.Reclaimable, DBSize: sp.DBSize, AfterDefrag: sp.AfterDefrag, Quota: sp.Quota}
	var head strings.Builder
	fmt.Fprintf(&head, "What fills etcd (%s in %s keys, live):\n", etcd.FormatBytes(u.Total.Bytes), fmt.Sprint(u.Total.Keys))
	for i, g := range u.Top(p.Top) {
		if i == 0 || g.Share >= 5 {
			res.Top = append(res.Top, fmt.Sprintf("%s (%.0f%%)", g, g.Share)) // what the summary names
		}
		fmt.Fprintf(&head, "  %s (%.0f%%)\n", g, g.Share)
	}
	fmt.Fprintf(&head, "Compaction and defragmentation free about %s on the fullest member (%s -> %s, estimated); the rest is live data that only deleting its source frees\n",
		etcd.FormatBytes(sp.Reclaimable), etcd.FormatBytes(sp.DBSize), etcd.FormatBytes(sp.AfterDefrag))
	if sp.Quota > 0 && sp.AfterDefrag > sp.Quota*8/10 {
		fmt.Fprintf(&head, "WARNING: even then etcd stays over 80%% of its %s quota: it will fill again soon unless the source is removed or the quota raised\n", etcd.FormatBytes(sp.Quota))
	}
	var detail strings.Builder
	_ = u.WriteText(&detail, p.Top*4)
	res.said = said(fmt.Sprintf("largest: %s; about %s to free", strings.Join(res.Top[:min(2, len(res.Top))], "; "), etcd.FormatBytes(sp.Reclaimable)))
	return &Plan{View: View{Head: head.String(), Detail: detail.String()}, Result: res}, nil
}

// CompactResult is an etcd.compact step's outcome.
type CompactResult struct {
	said
	*etcd.CompactResult
}

// compact drops etcd's history up to the current revision. It cannot be
// undone (the snapshot taken before it stands instead), so it is not asked
// for when it cannot help: when the history is compacted already, or when
// even with the defragmentation after it etcd would stay full (live data:
// only raising the quota or deleting the source helps).
func (r *run) compact(ctx context.Context, _ Step, _ *runbooks.EtcdCompactParams) (*Plan, error) {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	rev, err := currentRevision(ctx, ec)
	if err != nil {
		return nil, err
	}
	if before, err := ec.Compact(ctx, rev-1, etcd.DryRunWriter(ec)); err == nil && before.AlreadyCompacted {
		return nil, skip("etcd's history is compacted up to revision %d already: nothing to compact", rev)
	}
	u, known := earlier[*UsageResult](r, runbooks.ActionEtcdUsage)
	if known && etcd.FullAt(u.AfterDefrag, u.Quota) {
		return nil, &NotDeadlockError{Verdict: diagnose.EtcdNoSpace, Summary: fmt.Sprintf("etcd holds %s of live data against its %s quota", etcd.FormatBytes(u.AfterDefrag), etcd.FormatBytes(u.Quota)),
			Mismatch: fmt.Sprintf("compacting and defragmenting would free about %s, and etcd would stay full: the compaction, which cannot be undone, would not help", etcd.FormatBytes(u.Reclaimable)),
			Next:     append([]string{quotaAdvice, "or delete what fills it: " + r.target.NodesCmd("etcd usage")}, r.target.Cmd("resume "+r.journal.ID)+"   # once the quota is raised")}
	}
	snap := "the verified snapshot taken before it"
	if s, ok := earlier[*SnapshotResult](r, runbooks.ActionEtcdSnapshot); ok {
		snap = "the verified snapshot " + s.Path
	}
	view := fmt.Sprintf("Plan: compact etcd's history up to revision %d: every older version of every key is dropped, no live key changes; it cannot be undone (%s stands instead)\n", rev, snap)
	if known {
		view += fmt.Sprintf("  it frees the history inside the file; with the defragmentation after it, about %s on the fullest member (estimated)\n", etcd.FormatBytes(u.Reclaimable))
	}
	plan := &Plan{View: Text(view), Change: true, Ask: []Question{{Text: fmt.Sprintf("compact etcd to revision %d?", rev)}},
		Undo: irreversible(fmt.Sprintf("compact etcd to revision %d", rev), "the history before revision "+fmt.Sprint(rev), snap)}
	// What stands instead, and the etcd it is of.
	if held, ok := r.incidentCopy(); ok {
		plan.Facts = append(plan.Facts, r.copyFact(held))
	}
	if id := r.incidentEtcdCluster(); id != "" {
		plan.Facts = append(plan.Facts, r.clusterFact(id))
	}
	if r.fx.DryRun() {
		// The dry-run writer reads at the revision instead of compacting:
		// etcd says whether it could.
		out, err := ec.Compact(ctx, rev, r.fx.EtcdWriter(ec))
		if err != nil {
			return plan, err
		}
		plan.DryRun = out.String() + "; nothing was compacted"
	}
	plan.Apply = func(ctx context.Context) (Result, error) {
		out, err := ec.Compact(ctx, rev, r.fx.EtcdWriter(ec))
		if err != nil {
			return nil, err
		}
		return &CompactResult{said: said(out.String()), CompactResult: out}, nil
	}
	return plan, nil
}

// currentRevision is the newest revision any member answers with.
func currentRevision(ctx context.Context, ec *etcd.Client) (int64, error) {
	st, err := ec.Status(ctx)
	if err != nil {
		return 0, err
	}
	var rev int64
	for _, m := range st {
		rev = max(rev, m.Revision)
	}
	if rev == 0 {
		return 0, errors.New("no etcd member told its revision")
	}
	return rev, nil
}

// DefragResult is each member's file before and after its defragmentation.
type DefragResult struct {
	said
	Members []DefraggedMember `json:"members"`
}

// DefraggedMember is one member's defragmentation.
type DefraggedMember struct {
	Node     string `json:"node"`
	MemberID string `json:"memberID"`
	Leader   bool   `json:"leader,omitempty"`
	Before   int64  `json:"before"`
	After    int64  `json:"after,omitempty"`
}

// defragment defragments each member through the Talos API of the node it
// runs on, one at a time, the leader last, each answering again before the
// next: a member is blocked while it runs, and the cluster keeps quorum.
func (r *run) defragment(ctx context.Context, _ Step, _ *runbooks.EtcdDefragmentParams) (*Plan, error) {
	var order []DefraggedMember
	for _, node := range r.tc.Nodes() {
		st, err := r.tc.EtcdStatus(ctx, node)
		if err != nil {
			return nil, err
		}
		order = append(order, DefraggedMember{Node: node, MemberID: etcd.ID(st.MemberID).String(), Leader: st.IsLeader(), Before: st.DBSize})
	}
	// The leader last: defragmenting it blocks it, and a blocked leader
	// stalls every write (and may cost an election).
	slices.SortStableFunc(order, func(a, b DefraggedMember) int {
		switch {
		case a.Leader == b.Leader:
			return 0
		case a.Leader:
			return 1
		}
		return -1
	})
	var view strings.Builder
	fmt.Fprintf(&view, "Plan: defragment %d etcd member(s) through the Talos API, one at a time, the leader last:\n", len(order))
	for i, m := range order {
		leader := ""
		if m.Leader {
			leader = " (leader)"
		}
		fmt.Fprintf(&view, "  %d. %s, member %s%s: database %s\n", i+1, m.Node, m.MemberID, leader, etcd.FormatBytes(m.Before))
	}
	res := &DefragResult{Members: order}
	plan := &Plan{View: Text(view.String()), Change: true, Result: res,
		Undo:   nothingToUndo(fmt.Sprintf("defragment %d etcd member(s)", len(order)), "a defragmentation changes no key, only the file's size"),
		Ask:    []Question{{Text: fmt.Sprintf("defragment %d etcd member(s), one at a time?", len(order))}},
		DryRun: fmt.Sprintf("would defragment %d member(s) in this order; nothing was defragmented", len(order))}
	plan.Apply = func(ctx context.Context) (Result, error) {
		var freed int64
		for i := range res.Members {
			m := &res.Members[i]
			if st, err := r.tc.EtcdStatus(ctx, m.Node); err == nil {
				m.Before = st.DBSize // now: the compaction may have run since the plan
			}
			r.progress(m.Node, fmt.Sprintf("defragmenting member %s (%s): it answers nothing meanwhile", m.MemberID, etcd.FormatBytes(m.Before)))
			if err := r.tc.EtcdDefragment(ctx, m.Node); err != nil {
				return res, defragInterrupted(ctx, res.Members, i, err)
			}
			st, err := r.memberAnswers(ctx, m.Node)
			if err != nil {
				return res, defragInterrupted(ctx, res.Members, i+1, err)
			}
			m.After = st.DBSize
			freed += m.Before - m.After
			r.progress(m.Node, fmt.Sprintf("member %s defragmented: %s -> %s", m.MemberID, etcd.FormatBytes(m.Before), etcd.FormatBytes(m.After)))
		}
		res.said = said(fmt.Sprintf("%d member(s) defragmented, %s freed in all", len(res.Members), etcd.FormatBytes(freed)))
		return res, nil
	}
	return plan, nil
}

// defragInterrupted is err, or when the run was interrupted, what was
// defragmented and what not: the members before done.
func defragInterrupted(ctx context.Context, members []DefraggedMember, done int, err error) error {
	if ctx.Err() == nil {
		return err
	}
	e := &NodesInterrupted{Cause: context.Cause(ctx)}
	for i, m := range members {
		if i < done {
			e.Applied = append(e.Applied, m.Node)
		} else {
			e.NotApplied = append(e.NotApplied, m.Node)
		}
	}
	return e
}

// memberAnswers waits until the node's etcd member answers its status
// again after a defragmentation (a minute at most).
func (r *run) memberAnswers(ctx context.Context, node string) (talos.EtcdMemberStatus, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := r.tc.EtcdStatus(ctx, node)
		if err == nil {
			return st, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return st, fmt.Errorf("%w: etcd member on %s does not answer after its defragmentation: %w", ErrTimeout, node, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// DisarmResult is the alarm disarmed and the write that went through.
type DisarmResult struct {
	said
	Disarm *etcd.DisarmResult `json:"disarm,omitempty"`
	Probe  *etcd.ProbeResult  `json:"probe,omitempty"`
}

// disarm disarms the NOSPACE alarm once no member is full (etcd refuses
// otherwise, naming them) and proves a write goes through. The loop then
// takes the cluster lock that preflight could not take on a full etcd.
func (r *run) disarm(ctx context.Context, _ Step, _ *runbooks.EtcdDisarmParams) (*Plan, error) {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	alarms, err := ec.Alarms(ctx)
	if err != nil {
		return nil, err
	}
	var noSpace []string
	for _, a := range alarms {
		if a.Type == etcd.AlarmNoSpace {
			noSpace = append(noSpace, a.MemberID.String())
		}
	}
	res := &DisarmResult{}
	w := r.fx.EtcdWriter(ec)
	writes := func(ctx context.Context) error {
		p, err := ec.ProbeWrite(ctx, w)
		if err != nil {
			return err
		}
		res.Probe = p
		return nil
	}
	if len(noSpace) == 0 {
		// Nothing to disarm (an earlier run did, or it cleared): the write
		// still has to be proved.
		return &Plan{Result: res, DryRun: "would write and remove a probe key", Apply: func(ctx context.Context) (Result, error) {
			if err := writes(ctx); err != nil {
				return res, err
			}
			res.said = said("no NOSPACE alarm raised; a write goes through (" + res.Probe.String() + ")")
			return res, nil
		}}, nil
	}
	view := fmt.Sprintf("Plan: disarm the NOSPACE alarm of member(s) %s, then write and remove a probe key under /breakglass/probe/\n", strings.Join(noSpace, ", "))
	plan := &Plan{View: Text(view), Change: true, Result: res,
		Undo:   nothingToUndo("disarm NOSPACE", "etcd raises it again by itself when it fills"),
		Ask:    []Question{{Text: fmt.Sprintf("disarm NOSPACE on %d member(s)?", len(noSpace))}},
		DryRun: "nothing was disarmed or written (a real run disarms once the steps before it made room)"}
	plan.Apply = func(ctx context.Context) (Result, error) {
		d, err := ec.DisarmNoSpace(ctx, w)
		if err != nil {
			return res, err
		}
		res.Disarm = d
		if err := writes(ctx); err != nil {
			return res, err
		}
		res.said = said(d.String() + "; a write goes through")
		return res, nil
	}
	return plan, nil
}

// quotaAdvice is how to give etcd more room than its quota: breakglass
// never raises it.
const quotaAdvice = "the quota was not raised: to raise it, set cluster.etcd.extraArgs.quota-backend-bytes (e.g. \"4294967296\", 4 GiB; etcd's default is 2 GiB, at most 8 GiB is advised) in every control plane's machine config and where the configs come from; etcd restarts with it"
