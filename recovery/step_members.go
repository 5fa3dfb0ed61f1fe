package recovery

// The steps that bring etcd's members back, as Talos's disaster-recovery
// guide does through the Talos API: a verified copy of the most advanced
// member's data, the lost member removed, control planes' EPHEMERAL reset
// (a lost member's node alone, each back before the next; without quorum,
// all at once), etcd bootstrapped from the copy with its revision bumped,
// and the wait until every member is healthy and caught up. Each
// plans from what the nodes say now, so that a resumed run does not redo
// what an interrupted one did.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() {
	register((*run).copyEtcd)
	register((*run).removeMembers)
	register((*run).resetNodes)
	register((*run).bootstrapEtcd)
	register((*run).waitEtcd)
}

// caughtUp is how many raft entries a member may be behind the most
// advanced one and count as caught up.
const caughtUp = 100

// members reads every node's etcd member now.
func (r *run) members(ctx context.Context) *diagnose.MembersEvidence {
	ec, err := r.etcdClient(ctx)
	var room diagnose.EtcdRoom
	if err == nil {
		room = ec
	}
	return diagnose.GatherMembers(ctx, r.tc, room, diagnose.MemberReads{Gone: r.gone})
}

// copyEtcd saves a verified copy of the most advanced member's data: its
// snapshot through the Talos API, or, when it serves none, its database
// file; read back as an etcd database of this cluster. Nothing is reset
// before it is on disk.
func (r *run) copyEtcd(ctx context.Context, _ Step, p *runbooks.EtcdCopyParams) (*Plan, error) {
	source := p.From
	if source == "" {
		return nil, fmt.Errorf("no member's data to copy: the diagnosis found no member that answers; copy a node's %s by hand (talosctl cp) and bootstrap from it with talosctl bootstrap --recover-from --recover-skip-hash-check", talos.EtcdDBPath)
	}
	snap, db := filepath.Join(r.journal.Dir, "etcd.snapshot"), filepath.Join(r.journal.Dir, "etcd.db")
	taken := func(ctx context.Context, path, kind, how string) (Result, error) {
		f, err := r.readCopy(ctx, path, kind == "snapshot")
		if err != nil {
			return nil, err
		}
		boots := map[string]string{}
		for _, node := range r.tc.Nodes() {
			if b, err := r.tc.BootID(ctx, node); err == nil {
				boots[node] = b
			}
		}
		return &CopyResult{said: said(fmt.Sprintf("%s: %s (%d bytes, revision %d, kube-system %s: this cluster's)", how, path, f.Size, f.Revision, f.ClusterUID)),
			Path: path, Kind: kind, Node: source, SHA256: f.SHA256, Size: f.Size, Revision: f.Revision, ClusterUID: f.ClusterUID, Boots: boots}, nil
	}
	// A run killed after its copy and before its end record left it there.
	for _, c := range []struct{ path, kind string }{{snap, "snapshot"}, {db, "db"}} {
		if _, err := etcd.ReadCopy(c.path, c.kind == "snapshot", r.etcdPrefix()); err == nil {
			return &Plan{DryRun: "would use the copy an earlier run took: " + c.path, Apply: func(ctx context.Context) (Result, error) {
				return taken(ctx, c.path, c.kind, "copied in an earlier run")
			}}, nil
		}
	}
	return &Plan{DryRun: "would copy the data of the member on " + source + " to " + snap + " (or its database file to " + db + ")", Apply: func(ctx context.Context) (Result, error) {
		w := r.fx.EtcdWriter(nil)
		for _, p := range []string{snap, db} {
			if err := r.removeOwnPartial(p); err != nil {
				return nil, err
			}
		}
		r.progress(source, "streaming an etcd snapshot through the Talos API")
		_, err := snapshotThroughTalos(ctx, r.tc, source, snap, w)
		if err == nil {
			return taken(ctx, snap, "snapshot", "snapshot of the member on "+source)
		}
		r.progress(source, "no snapshot ("+shortErr(err)+"): copying its database file "+talos.EtcdDBPath)
		if _, err = copyDBThroughTalos(ctx, r.tc, source, db, w); err != nil {
			return nil, err
		}
		return taken(ctx, db, "db", "database file of the member on "+source+" (its hash check is skipped at bootstrap)")
	}}, nil
}

// copyDBThroughTalos copies the node's member database file to path.
func copyDBThroughTalos(ctx context.Context, tc *talos.Client, node, path string, w etcd.Writer) (*etcd.SnapshotInfo, error) {
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() {
		_, err := tc.CopyEtcdDB(ctx, node, pw)
		pw.CloseWithError(err)
	}()
	return etcd.WriteDBCopy(pr, path, w)
}

// removeMembers removes the lost members the cluster still lists, through
// a healthy member's node; never a healthy member, never one whose removal
// would leave fewer healthy members than a quorum of those that remain. A
// member the diagnosis found lost that is healthy again is left alone.
func (r *run) removeMembers(ctx context.Context, _ Step, p *runbooks.EtcdMemberRemoveParams) (*Plan, error) {
	if len(p.Lost) == 0 {
		return nil, skip("the diagnosis found no lost member")
	}
	now := r.members(ctx)
	var healthy []diagnose.NodeMember
	for _, n := range now.Nodes {
		if n.Healthy() {
			healthy = append(healthy, n)
		}
	}
	if len(healthy) == 0 {
		return nil, fmt.Errorf("no healthy member answers to remove the lost one through: %s", strings.Join(stateLines(now), "; "))
	}
	type target struct {
		lm  diagnose.ListedMember
		why string
	}
	var targets []target
	var back []string
	for _, lm := range now.Members {
		l, ok := lostMember(p.Lost, lm)
		if !ok {
			continue
		}
		if n, ok := now.NodeOf(lm); ok && n.Healthy() && n.MemberID == lm.ID {
			back = append(back, fmt.Sprintf("member %s on %s is healthy again", lm.ID, n.Node))
			continue
		}
		targets = append(targets, target{lm, l.Why})
	}
	if len(targets) == 0 && len(back) > 0 {
		return nil, skip("%s: nothing to remove", strings.Join(back, "; "))
	}
	if len(targets) == 0 {
		return nil, skip("no lost member is listed any more: removed already")
	}
	if remain := len(now.Members) - len(targets); len(healthy) < remain/2+1 {
		return nil, fmt.Errorf("%w: removing %d member(s) would leave %d healthy of %d: not a quorum; recover the quorum instead (runbook etcd-quorum-lost)", ErrConflict, len(targets), len(healthy), remain)
	}
	via := healthy[0].Node
	facts, err := r.nodeFacts(ctx, now, r.tc.Nodes())
	if err != nil {
		return nil, err
	}
	var view strings.Builder
	fmt.Fprintf(&view, "Plan: remove %d lost etcd member(s) through the member on %s (%d healthy of %d listed):\n", len(targets), via, len(healthy), len(now.Members))
	var ids []string
	for _, t := range targets {
		fmt.Fprintf(&view, "  member %s (%s, %s): lost: %s; it can only come back as a new member, its node reset\n", t.lm.ID, orDefault(t.lm.Hostname, "no name"), orDefault(t.lm.Host, "no address"), orDefault(t.why, "the diagnosis says so"))
		ids = append(ids, t.lm.ID.String())
		facts = append(facts, r.listedFact(t.lm.ID, via))
		if t.lm.Gone {
			facts = append(facts, r.goneFact(orDefault(t.lm.Host, t.lm.Hostname)))
		}
	}
	res := &MembersResult{Via: via}
	return &Plan{View: Text(view.String()), Change: true, Result: res, Facts: facts,
		Ask:    []Question{{Text: fmt.Sprintf("remove etcd member(s) %s?", strings.Join(ids, ", "))}},
		DryRun: "would remove member(s) " + strings.Join(ids, ", ") + "; nothing was removed",
		Undo: irreversible("remove etcd member(s) "+strings.Join(ids, ", "), "their membership (a removed member never comes back with its old data)",
			"their nodes join again as new members once reset"),
		Apply: func(ctx context.Context) (Result, error) {
			for _, t := range targets {
				if err := r.tc.EtcdRemoveMember(ctx, via, uint64(t.lm.ID)); err != nil {
					return res, err
				}
				res.Removed = append(res.Removed, t.lm.ID.String())
				r.progress(via, "removed member "+t.lm.ID.String())
			}
			res.said = said("removed member(s) " + strings.Join(res.Removed, ", "))
			return res, nil
		}}, nil
}

// lostMember is the lost member that the listed one is: by its ID, or by
// its node.
func lostMember(lost []LostMember, lm diagnose.ListedMember) (LostMember, bool) {
	for _, l := range lost {
		if l.MemberID == lm.ID.String() || l.MemberID == "" && l.Node != "" && (l.Node == lm.Host || l.Node == lm.Hostname) {
			return l, true
		}
	}
	return LostMember{}, false
}

// MembersResult is what a member step did.
type MembersResult struct {
	said
	Via     string   `json:"via,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Reset   []string `json:"reset,omitempty"`
	Node    string   `json:"node,omitempty"` // bootstrap: where
	// Revision is the revision a bootstrap restored etcd at (the copy's,
	// bumped).
	Revision int64 `json:"revision,omitempty"`
}

// bumpedCopy is the copy with its revision bumped and marked compacted, at
// path: made now, or found made and checked (a resumed run).
func bumpedCopy(c *CopyResult, path string, w etcd.Writer) (*etcd.BumpInfo, error) {
	if latest, compacted, err := etcd.ReadRevision(path); err == nil && compacted == latest && latest > 0 {
		if info, err := etcd.VerifyDBFile(path); err == nil {
			return &etcd.BumpInfo{SnapshotInfo: *info, From: latest - etcd.RevisionBump, Revision: latest}, nil
		}
	}
	if fileExists(path) {
		if err := os.Remove(path); err != nil { // a bump cut short: made again from the copy
			return nil, err
		}
	}
	return etcd.BumpRevision(c.Path, c.Kind == "snapshot", path, etcd.RevisionBump, w)
}

// resetNodes resets the EPHEMERAL partition of the lost members' nodes (or
// of every control plane), one at a time, each back and its etcd waiting
// before the next. Never before a verified copy of the data is on disk,
// that copy read again (its size, sha256 and owner) before any reset.
func (r *run) resetNodes(ctx context.Context, s Step, p *runbooks.EtcdResetParams) (*Plan, error) {
	held, ok := r.incidentCopy()
	copyPath := held.Path
	switch {
	case !ok && r.fx.DryRun():
		copyPath = "the copy a real run takes in the step before" // a dry run plans the reset as a real run would
	case !ok:
		return nil, fmt.Errorf("%w: no verified copy of etcd's data is on disk in this incident: a reset would risk the only one", ErrConflict)
	}
	if ok {
		if err := r.copyStillSo(held); err != nil {
			return nil, r.copyGone(err)
		}
	}
	// The nodes an earlier run of this incident asked to reset are waited
	// back first: such a node may still answer, in the boot it ran, for
	// seconds after it took the request, and must not be asked again.
	back, err := r.backFromEarlierResets(ctx, s, p.Timeout.Std())
	if err != nil {
		return nil, err
	}
	// A node that does not answer may be rebooting from a reset an earlier
	// run of this incident began: that one gets the reset's whole timeout.
	// Otherwise nothing here made it go away, and the plan says so soon.
	resetBegun := len(back) > 0 || slices.ContainsFunc(r.appliedChanges(), func(e Entry) bool { return e.Action == string(runbooks.ActionEtcdReset) })
	wait := notAnsweringGrace
	if resetBegun {
		wait = p.Timeout.Std()
	}
	now, err := r.membersAnswering(ctx, wait)
	var gone *talos.NodeError
	if !resetBegun && errors.As(err, &gone) {
		return nil, talos.NewNodeError(gone.Node, "answer on the Talos API", gone.Err,
			"this incident has not reset it, so it is not rebooting from a reset: bring it back (power, network); resume then goes on from here, and nothing was reset")
	}
	if err != nil {
		return nil, err
	}
	if p.Nodes == runbooks.ResetAll {
		// Without quorum no lock keeps another operator out: every node
		// must be where this incident left it, and etcd still without its
		// quorum, or another run acted.
		if err := r.whereLeft(ctx, s); err != nil {
			return nil, err
		}
		if healthy := healthyCount(now); healthy > len(now.Nodes)/2 {
			return nil, &MovedError{Step: s.Name, Fact: "etcd without its quorum (the diagnosis)", Now: fmt.Errorf("%d of %d members are healthy now: etcd has its quorum again (another operator recovered it, or its members came back)", healthy, len(now.Nodes)), hints: r.movedHints()}
		}
	}
	var targets []string
	for _, node := range r.tc.Nodes() {
		n, _ := now.Node(node)
		switch {
		case slices.Contains(back, node):
		case p.Nodes == runbooks.ResetAll && n.MemberID == 0 && n.Service == "Preparing":
			// Reset already: its etcd waits for bootstrap.
		case p.Nodes == runbooks.ResetAll:
			targets = append(targets, node)
		case slices.ContainsFunc(p.Lost, func(l LostMember) bool {
			return l.Node == node && (n.MemberID == 0 || n.MemberID.String() == l.MemberID)
		}) && !n.Healthy():
			targets = append(targets, node)
		}
	}
	res := &MembersResult{Reset: back}
	if len(targets) == 0 && len(back) > 0 {
		res.said = said("reset EPHEMERAL of " + strings.Join(back, ", ") + ": asked by an earlier run of this incident, back from it")
		return &Plan{Result: res}, nil
	}
	if len(targets) == 0 {
		return nil, skip("%s", nothingToReset(p.Lost))
	}
	// The facts: every node where the plan saw it (a reset of every
	// control plane) or the lost members' nodes, the copy, and the etcd
	// cluster the incident is bound to.
	factNodes := targets
	if p.Nodes == runbooks.ResetAll {
		factNodes = r.tc.Nodes()
	}
	facts, err := r.nodeFacts(ctx, now, factNodes)
	if err != nil {
		return nil, err
	}
	perNode := map[string]Fact{}
	for i, node := range factNodes {
		perNode[node] = facts[i]
	}
	if ok {
		facts = append(facts, r.copyFact(held))
	}
	if id := r.incidentEtcdCluster(); id != "" {
		facts = append(facts, r.clusterFact(id))
	}
	// Without quorum every member is reset anyway: all at once, as Talos's
	// guide does. A lost member's node is reset alone, each back before the next.
	together, how := p.Nodes == runbooks.ResetAll, "one at a time"
	if together {
		how = "all at once (etcd has no quorum to keep)"
	}
	var view strings.Builder
	fmt.Fprintf(&view, "Plan: reset the EPHEMERAL partition of %d control plane(s) and reboot them, %s (talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL):\n", len(targets), how)
	var ask []Question
	for _, node := range targets {
		n, _ := now.Node(node)
		fmt.Fprintf(&view, "  %s: %s; wiped: its etcd data and everything else on EPHEMERAL (container images, pod logs and data)\n", node, n.State())
		ask = append(ask, Question{Text: fmt.Sprintf("This wipes the EPHEMERAL partition of node %s.", node), Word: node})
	}
	lost := "every revision written after the copy; the verified copy " + copyPath + " stays on this machine"
	if !ok {
		lost = "every revision written after the copy a real run takes in the step before, which stays on this machine"
	}
	if p.Nodes == runbooks.ResetLost {
		lost = "nothing of etcd's data: the healthy members hold it"
	}
	fmt.Fprintf(&view, "  lost: %s\n", lost)
	return &Plan{View: Text(view.String()), Change: true, Result: res, Ask: ask, Facts: facts,
		DryRun: "would reset " + strings.Join(targets, ", ") + "; nothing was reset",
		Undo:   irreversible("reset EPHEMERAL of "+strings.Join(targets, ", "), "their EPHEMERAL partitions", "the verified copy "+copyPath),
		Apply: func(ctx context.Context) (Result, error) {
			boots := map[string]string{}
			for i, node := range targets {
				if i > 0 && !together {
					// Minutes after the loop read them: this node's facts again.
					if err := r.stillSo(ctx, s, []Fact{perNode[node]}); err != nil {
						return res, nodesDone(ctx, targets, i, err)
					}
				}
				if ctx.Err() != nil {
					return res, nodesDone(ctx, targets, i, ctx.Err())
				}
				boot, err := r.tc.BootID(ctx, node)
				if err == nil {
					err = r.noteReset(s, resetAsked{Node: node, Boot: boot})
				}
				if err != nil {
					return res, nodesDone(ctx, targets, i, err)
				}
				boots[node] = boot
				r.progress(node, "resetting EPHEMERAL and rebooting")
				if err := r.tc.ResetEphemeral(ctx, node); err != nil {
					return res, nodesAsked(ctx, targets, i, err)
				}
				if err := r.noteReset(s, resetAsked{Node: node, Boot: boot, Taken: true}); err != nil {
					return res, nodesDone(ctx, targets, i+1, err)
				}
				res.Reset = append(res.Reset, node)
				r.progress(node, "reset: it reboots and comes back without its etcd data")
				if together {
					continue
				}
				if err := r.backFromReset(ctx, s, node, boots[node], p.Timeout.Std()); err != nil {
					return res, nodesDone(ctx, targets, i+1, err)
				}
			}
			if together {
				for _, node := range targets {
					if err := r.backFromReset(ctx, s, node, boots[node], p.Timeout.Std()); err != nil {
						return res, nodesDone(ctx, targets, len(targets), err)
					}
				}
			}
			res.said = said("reset EPHEMERAL of " + strings.Join(res.Reset, ", "))
			return res, nil
		}}, nil
}

// nothingToReset says why no node is left to reset: each is reset already
// or healthy, or the lost member's node is gone for good.
func nothingToReset(lost []LostMember) string {
	var gone []string
	for _, l := range lost {
		if l.Gone {
			gone = append(gone, orDefault(l.Node, l.MemberID))
		}
	}
	if len(gone) > 0 {
		return "the lost member's node " + strings.Join(gone, ", ") + " is gone for good: nothing to reset there (a new control plane joins by itself)"
	}
	return "no node left to reset: each is reset already or healthy"
}

func healthyCount(m *diagnose.MembersEvidence) int {
	n := 0
	for _, nm := range m.Nodes {
		if nm.Healthy() {
			n++
		}
	}
	return n
}

// copyGone is the error of a step that cannot use the incident's copy: it
// changed since it was taken, or is not this cluster's. What to do depends
// on whether the nodes still hold the data.
func (r *run) copyGone(err error) error {
	if slices.ContainsFunc(r.appliedChanges(), func(e Entry) bool { return e.Action == string(runbooks.ActionEtcdReset) }) {
		return failure.Hinted(err, "the control planes were reset by this incident: their etcd data is gone; bootstrap from another copy of this cluster by hand: talosctl -n NODE bootstrap --recover-from FILE")
	}
	return failure.Hinted(err, "nothing was reset: the members still hold the data; take the copy again from a new incident: breakglass journal close "+r.journal.ID+", then "+r.target.NodesCmd("recover"))
}

// resetAsked is journaled (a note) before and after each node's Reset: the
// boot the node ran when it was asked, and whether it took the request. By
// it a resumed run tells a node going down or back from that reset from one
// the reset never reached.
type resetAsked struct {
	Node  string `json:"node"`
	Boot  string `json:"boot"`
	Taken bool   `json:"taken,omitempty"`
}

// resetNote is the journal note's data.
type resetNote struct {
	ResetAsked *resetAsked `json:"resetAsked,omitempty"`
}

func (r *run) noteReset(s Step, a resetAsked) error {
	msg := fmt.Sprintf("asking %s to reset EPHEMERAL (boot %s)", a.Node, a.Boot)
	if a.Taken {
		msg = fmt.Sprintf("%s took the reset (boot %s)", a.Node, a.Boot)
	}
	data, err := json.Marshal(resetNote{ResetAsked: &a})
	if err == nil {
		err = r.journal.Append(Entry{Kind: "note", Step: s.Name, Action: s.Action(), Message: msg, Data: data})
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// earlierResets are the resets earlier runs of this incident asked for,
// the last per node, in the order they were asked.
func (r *run) earlierResets() []resetAsked {
	var out []resetAsked
	for _, e := range r.entries {
		var d resetNote
		if e.Kind != "note" || len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil || d.ResetAsked == nil {
			continue
		}
		out = slices.DeleteFunc(out, func(a resetAsked) bool { return a.Node == d.ResetAsked.Node })
		out = append(out, *d.ResetAsked)
	}
	return out
}

// resetTakesHold is how long a node that took a reset may still answer in
// the boot it ran: it stops its pods and services first.
const resetTakesHold = time.Minute

// backFromEarlierResets waits until each node an earlier run asked to
// reset is back from it, and names them. A node still in the same boot a
// minute after a run stopped between the question and its answer never got
// the request: it is left to be planned again.
func (r *run) backFromEarlierResets(ctx context.Context, s Step, timeout time.Duration) ([]string, error) {
	var back []string
	for _, a := range r.earlierResets() {
		if !slices.Contains(r.tc.Nodes(), a.Node) {
			continue
		}
		if !a.Taken {
			err := r.poll(ctx, a.Node, resetTakesHold, "go down for the reset an earlier run asked for", func(ctx context.Context) (string, bool) {
				if id, err := r.tc.BootID(ctx, a.Node); err == nil && id == a.Boot {
					return "still in the boot it ran when an earlier run asked for its reset (it may never have got the request)", false
				}
				return "going down or back from the reset an earlier run asked for", true
			})
			if errors.Is(err, ErrTimeout) {
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		if err := r.backFromReset(ctx, s, a.Node, a.Boot, timeout); err != nil {
			return nil, err
		}
		back = append(back, a.Node)
	}
	return back, nil
}

// notAnsweringGrace is how long the reset's plan waits for a node that this
// incident did not reset: long enough for a blip of the network.
const notAnsweringGrace = 30 * time.Second

// membersAnswering reads every node's member once each node answers: a
// node that does not may be rebooting from a reset an interrupted run made,
// and must not be taken for one still to reset.
func (r *run) membersAnswering(ctx context.Context, timeout time.Duration) (*diagnose.MembersEvidence, error) {
	now := r.members(ctx)
	waited := false
	for _, n := range now.Nodes {
		if n.Service != "" {
			continue
		}
		waited = true
		if err := r.poll(ctx, n.Node, timeout, "answer again", func(ctx context.Context) (string, bool) {
			_, err := r.tc.EtcdService(ctx, n.Node)
			if err != nil {
				return "not answering, perhaps rebooting (" + shortErr(err) + ")", false
			}
			return "answers", true
		}); err != nil {
			return nil, err
		}
	}
	if waited {
		now = r.members(ctx)
	}
	return now, nil
}

// nodesDone is err, or when the run was interrupted, which of the nodes the
// change was applied to (the first done) and which not.
func nodesDone(ctx context.Context, nodes []string, done int, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return &NodesInterrupted{Cause: context.Cause(ctx), Applied: nodes[:done], NotApplied: nodes[done:]}
}

// nodesAsked is nodesDone for an interruption while node i was asked: it
// may have taken the change.
func nodesAsked(ctx context.Context, nodes []string, i int, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return &NodesInterrupted{Cause: context.Cause(ctx), Applied: nodes[:i], Asked: nodes[i : i+1], NotApplied: nodes[i+1:]}
}

// backFromReset waits until the node answers again in a new boot (its
// boot ID is not boot's) and machined runs its etcd service again (waiting
// to join or to be bootstrapped), and journals the boot it came back in:
// where this incident left it. Until it reboots, a node reset answers with
// its etcd as it was: that is not back.
func (r *run) backFromReset(ctx context.Context, s Step, node, boot string, timeout time.Duration) error {
	var now string
	err := r.poll(ctx, node, timeout, "come back from its reset", func(ctx context.Context) (string, bool) {
		id, err := r.tc.BootID(ctx, node)
		switch {
		case err != nil:
			return "rebooting (" + shortErr(err) + ")", false
		case boot != "" && id == boot:
			return "going down for its reboot", false
		}
		svc, err := r.tc.EtcdService(ctx, node)
		if err != nil {
			return "rebooting (" + shortErr(err) + ")", false
		}
		now = id
		return "etcd " + svc.State + ": " + svc.Message, svc.State != "" && svc.State != "Finished"
	})
	if err == nil {
		r.noteBack(s, node, now)
	}
	return err
}

// poll asks check every half second until it says done, saying each new
// state, for at most timeout.
func (r *run) poll(ctx context.Context, node string, timeout time.Duration, what string, check func(context.Context) (string, bool)) error {
	deadline := time.Now().Add(orDuration(timeout, runbooks.DefaultRebootWait))
	last := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		state, done := check(cctx)
		cancel()
		if state != last {
			r.progress(node, state)
			last = state
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return &talos.NodeError{Node: node, Op: what, Err: fmt.Errorf("%w after %s: %s", ErrTimeout, orDuration(timeout, runbooks.DefaultRebootWait), state)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// bootstrapEtcd bootstraps etcd on one node from the incident's copy once
// every control plane's etcd waits for it; the others join.
func (r *run) bootstrapEtcd(ctx context.Context, s Step, p *runbooks.EtcdBootstrapParams) (*Plan, error) {
	now := r.members(ctx)
	for _, n := range now.Nodes {
		switch {
		case n.Healthy() && r.bootstrapBegun():
			return nil, skip("etcd runs on %s already (member %s): bootstrapped", n.Node, n.MemberID)
		case n.Healthy():
			return nil, &MovedError{Step: s.Name, Fact: "every control plane's etcd reset by this incident, waiting for a bootstrap",
				Now: fmt.Errorf("etcd runs on %s (member %s), and this incident did not bootstrap it: another run did", n.Node, n.MemberID), hints: r.movedHints()}
		}
	}
	c, ok := earlier[*CopyResult](r, runbooks.ActionEtcdCopy)
	switch {
	case !ok && r.fx.DryRun():
		c = &CopyResult{Path: "the copy a real run takes"} // planned as a real run would
	case !ok:
		return nil, fmt.Errorf("no copy of etcd's data in this incident to bootstrap from")
	}
	var facts []Fact
	if ok {
		held, _ := r.incidentCopy()
		if err := r.copyStillSo(held); err != nil {
			return nil, r.copyGone(err)
		}
		// Every node where this incident left it (back from its reset), or
		// another run acted: without quorum, no lock kept it out.
		if err := r.whereLeft(ctx, s); err != nil {
			return nil, err
		}
		nodes, err := r.nodeFacts(ctx, now, r.tc.Nodes())
		if err != nil {
			return nil, err
		}
		facts = append(nodes, r.copyFact(held))
	}
	node := r.tc.Nodes()[0]
	if slices.Contains(r.tc.Nodes(), p.From) {
		node = p.From
	}
	bumped := filepath.Join(r.journal.Dir, "etcd.bumped.db")
	from, upload := fmt.Sprintf("%s (a %s, sha256 %s)", c.Path, c.Kind, c.SHA256), bumped
	if !ok {
		from, upload = c.Path, "a database file a real run makes beside the copy"
	}
	view := fmt.Sprintf("Plan: bootstrap etcd on %s from %s; the other control planes join it. Every revision after the copy's is lost.\n", node, from)
	view += fmt.Sprintf("  uploaded: %s, the copy with its revision moved %d past its own and marked compacted (etcdutl snapshot restore --bump-revision --mark-compacted, which Talos's restore does not do): a client that watched before the loss is told its revision is gone (410) and lists again, instead of waiting in silence for a revision etcd has not reached; that file is a database, without a snapshot's hash trailer, so the bootstrap skips the hash check (--recover-skip-hash-check; the copy's own was checked when it was taken)\n", upload, etcd.RevisionBump)
	res := &MembersResult{Node: node}
	return &Plan{View: Text(view), Change: true, Result: res, Facts: facts,
		Ask:    []Question{{Text: fmt.Sprintf("bootstrap etcd on %s from the copy?", node)}},
		DryRun: "would bootstrap etcd on " + node + " from " + c.Path + ", its revision bumped",
		Undo:   irreversible("bootstrap etcd from "+c.Path, "every revision written after the copy", "the copy "+c.Path),
		Apply: func(ctx context.Context) (Result, error) {
			for _, n := range r.tc.Nodes() {
				err := r.poll(ctx, n, p.Timeout.Std(), "wait for etcd to wait for bootstrap", func(ctx context.Context) (string, bool) {
					svc, err := r.tc.EtcdService(ctx, n)
					if err != nil {
						return "not answering (" + shortErr(err) + ")", false
					}
					return "etcd " + svc.State + ": " + svc.Message, svc.WaitingForBootstrap()
				})
				if err != nil {
					return res, err
				}
			}
			info, err := bumpedCopy(c, bumped, r.fx.EtcdWriter(nil))
			if err != nil {
				return res, err
			}
			r.progress(node, fmt.Sprintf("the copy at revision %d bumped to %d, compacted: %s", info.From, info.Revision, bumped))
			f, err := os.Open(bumped)
			if err != nil {
				return res, err
			}
			defer f.Close()
			r.progress(node, "uploading it and bootstrapping etcd from it")
			if err := r.tc.BootstrapFrom(ctx, node, f, true); err != nil {
				return res, err
			}
			res.Revision = info.Revision
			res.said = said(fmt.Sprintf("etcd bootstrapped on %s from %s at revision %d (the copy's %d bumped, compacted)", node, c.Path, info.Revision, info.From))
			return res, nil
		}}, nil
}

// waitEtcd waits until every control plane's member is healthy, a voting
// member, and caught up with the most advanced.
func (r *run) waitEtcd(_ context.Context, _ Step, p *runbooks.EtcdWaitParams) (*Plan, error) {
	return &Plan{DryRun: fmt.Sprintf("would wait up to %s for every member to be healthy and caught up", p.Timeout), Apply: func(ctx context.Context) (Result, error) {
		var last *diagnose.MembersEvidence
		err := r.poll(ctx, "etcd", p.Timeout.Std(), "wait for every etcd member", func(ctx context.Context) (string, bool) {
			last = r.members(ctx)
			return strings.Join(stateLines(last), "; "), last.Healthy(caughtUp)
		})
		if err != nil {
			return nil, err
		}
		// After a bootstrap from a copy, this is a new etcd cluster: the
		// incident is bound to it from here (boundEtcdCluster).
		return &EtcdWaitResult{said: said(fmt.Sprintf("%d member(s) healthy and caught up: %s", len(last.Nodes), last.Behind())),
			EtcdClusterID: r.etcdClusterID(ctx)}, nil
	}}, nil
}

// EtcdWaitResult is etcd healthy again, and the ID of its cluster.
type EtcdWaitResult struct {
	said
	EtcdClusterID string `json:"etcdClusterID,omitempty"`
}

// stateLines says each node's member in a few words.
func stateLines(m *diagnose.MembersEvidence) []string {
	var out []string
	for _, n := range m.Nodes {
		out = append(out, n.Node+": "+n.State())
	}
	return out
}
