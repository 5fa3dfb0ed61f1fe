package recovery

// What the etcd runbooks act on, as facts the loop reads again before each
// destructive change (facts.go): a node where the plan saw it (its boot,
// its etcd member), a node gone for good, the etcd cluster, the incident's
// copy of etcd's data (its size, sha256 and owner), and the nodes where
// this incident left them (without quorum no lock keeps another operator
// out: a node in another boot than this incident left it in means someone
// or something else acted).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// shortBoot is a boot ID as the plans say it.
func shortBoot(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// nodeFact is a node as a plan read it: its boot, and its etcd member
// (healthy or not, and which). It holds while both are so.
func (r *run) nodeFact(n diagnose.NodeMember, boot string) Fact {
	return Fact{
		Says: fmt.Sprintf("node %s in boot %s, its etcd %s", n.Node, shortBoot(boot), briefState(n)),
		Holds: func(ctx context.Context) error {
			now, err := r.tc.BootID(ctx, n.Node)
			if err != nil {
				return fmt.Errorf("node %s: its boot cannot be read again: %w", n.Node, err)
			}
			if now != boot {
				return fmt.Errorf("node %s is in boot %s now, not %s: it rebooted or was reset since (someone or something else acted)", n.Node, shortBoot(now), shortBoot(boot))
			}
			m, err := diagnose.MemberOn(ctx, r.tc, n.Node)
			switch {
			case err != nil:
				return fmt.Errorf("node %s: its etcd cannot be read again: %w", n.Node, err)
			case m.Healthy() && !n.Healthy():
				return fmt.Errorf("node %s: its etcd member is healthy now (%s)", n.Node, m.State())
			case !m.Healthy() && n.Healthy():
				return fmt.Errorf("node %s: its etcd member is no longer healthy (%s)", n.Node, m.State())
			case n.MemberID != 0 && m.MemberID != 0 && m.MemberID != n.MemberID:
				return fmt.Errorf("node %s runs etcd member %s now, not %s", n.Node, m.MemberID, n.MemberID)
			}
			return nil
		},
	}
}

// briefState is a node's etcd as a fact says it: healthy or not, which
// member (the service's own words are in the plan above it).
func briefState(n diagnose.NodeMember) string {
	switch {
	case n.Healthy():
		return fmt.Sprintf("member %s healthy", n.MemberID)
	case n.MemberID != 0:
		return fmt.Sprintf("member %s not healthy", n.MemberID)
	case n.Service == "Running":
		return "service Running, its member not answering"
	case n.Service != "":
		return "service " + n.Service + ", no member running"
	}
	return "not read"
}

// nodeFacts are the nodes' facts, each with its boot read now.
func (r *run) nodeFacts(ctx context.Context, now *diagnose.MembersEvidence, nodes []string) ([]Fact, error) {
	var out []Fact
	for _, node := range nodes {
		boot, err := r.tc.BootID(ctx, node)
		if err != nil {
			return nil, err
		}
		n, _ := now.Node(node)
		out = append(out, r.nodeFact(n, boot))
	}
	return out, nil
}

// goneTimeout bounds the call that tells a node gone: a node that is there
// answers its version in milliseconds.
const goneTimeout = 5 * time.Second

// answers tells whether the node answers on the Talos API (it is not gone
// for good, whatever was said), with its version; a node that refuses the
// client's certificate is there too.
func (r *run) answers(ctx context.Context, node string) (string, bool) {
	return answers(ctx, r.tc, node)
}

func answers(ctx context.Context, tc *talos.Client, node string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, goneTimeout)
	defer cancel()
	v, err := tc.Version(ctx, node)
	return v, !errors.Is(err, talos.ErrUnreachable)
}

// checkGone refuses nodes said gone for good (--nodes-gone) that answer on
// the Talos API: a node said gone is left out, and its etcd member removed
// or bootstrapped without, so the operator's word is checked. Nothing has
// changed yet.
func checkGone(ctx context.Context, tc *talos.Client, gone []string, verb string) error {
	for _, g := range gone {
		if v, ok := answers(ctx, tc, g); ok {
			return failure.Input("leave it out of --nodes-gone: a node that answers is not gone; breakglass "+verb+" acts on it",
				"--nodes-gone %s: node %s answers on the Talos API (Talos %s); nothing was changed", g, g, orDefault(v, "?"))
		}
	}
	return nil
}

// goneFact is a node said gone for good, as the plan found it: not
// answering.
func (r *run) goneFact(node string) Fact {
	return Fact{
		Says: fmt.Sprintf("node %s does not answer on the Talos API (gone for good, --nodes-gone)", node),
		Holds: func(ctx context.Context) error {
			if v, ok := r.answers(ctx, node); ok {
				return fmt.Errorf("node %s answers on the Talos API now (Talos %s): it is not gone", node, orDefault(v, "?"))
			}
			return nil
		},
	}
}

// listedFact is a member the cluster lists, as the healthy member on via
// lists it.
func (r *run) listedFact(id etcd.ID, via string) Fact {
	return Fact{
		Says: fmt.Sprintf("member %s is listed (as the member on %s lists them)", id, via),
		Holds: func(ctx context.Context) error {
			ms, err := r.tc.EtcdMembers(ctx, via)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(ms, func(m talos.EtcdMember) bool { return etcd.ID(m.ID) == id }) {
				return fmt.Errorf("member %s is no longer listed: someone removed it", id)
			}
			return nil
		},
	}
}

// etcdCluster is the data that binds an incident to its etcd: preflight's
// result, or a note of a run without a preflight.
type etcdCluster struct {
	EtcdClusterID string `json:"etcdClusterID,omitempty"`
}

// boundEtcdCluster is the etcd cluster ID the incident recorded, "" if none.
// A bootstrap from a copy makes a new etcd cluster: once one began, the
// ID recorded before it no longer binds, and the next one recorded does
// (etcd.wait's, or a resumed run's once it reaches etcd).
func boundEtcdCluster(entries []Entry) string {
	id := ""
	for _, e := range entries {
		if e.Kind == "apply" && e.Action == string(runbooks.ActionEtcdBootstrap) {
			id = ""
			continue
		}
		var d etcdCluster
		if len(e.Data) > 0 && json.Unmarshal(e.Data, &d) == nil && d.EtcdClusterID != "" {
			id = d.EtcdClusterID
		}
	}
	return id
}

// etcdClusterID is the ID of the etcd this run reaches, "" when it cannot
// be reached.
func (r *run) etcdClusterID(ctx context.Context) string {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return ""
	}
	info, err := ec.Cluster(ctx)
	if err != nil {
		return ""
	}
	return info.ClusterID.String()
}

// bootstrapBegun tells whether this incident began a bootstrap of etcd (a
// new etcd cluster).
func (r *run) bootstrapBegun() bool {
	return slices.ContainsFunc(r.appliedChanges(), func(e Entry) bool { return e.Action == string(runbooks.ActionEtcdBootstrap) })
}

// clusterFact is the etcd cluster the incident is bound to, as any member
// that answers says: none answering holds (the nodes' facts say the rest);
// one answering as another cluster was bootstrapped again since.
func (r *run) clusterFact(want string) Fact {
	return Fact{
		Says: "etcd cluster " + want + " (the incident's), where any member answers",
		Holds: func(ctx context.Context) error {
			if now := r.etcdClusterID(ctx); now != "" && now != want {
				return fmt.Errorf("etcd answers as cluster %s now: it was bootstrapped again since (another run's recovery?)", now)
			}
			return nil
		},
	}
}

// The copy steps' results (etcd.copy's in step_members.go, etcd.snapshot's
// in step_etcd.go) stand here, beside heldCopy: later steps rely on them.

// CopyResult is a verified copy of a member's data, and what it is: its
// size, sha256, revision and owner (the cluster's kube-system namespace),
// read from the file as etcd reads it when it was taken.
type CopyResult struct {
	said
	Path       string `json:"path"`
	Kind       string `json:"kind"` // snapshot, or db (a database file: its hash check is skipped at bootstrap)
	Node       string `json:"node"` // where it was copied from
	SHA256     string `json:"sha256"`
	Size       int64  `json:"size"`
	Revision   int64  `json:"revision,omitempty"`
	ClusterUID string `json:"clusterUID,omitempty"`
	// Boots are each control plane's boot when the copy was taken: where
	// this incident found them, before it reset any.
	Boots map[string]string `json:"boots,omitempty"`
}

// SnapshotResult is a verified full etcd snapshot, and what it is (read
// back as etcd reads it): its size, sha256, revision and owner.
type SnapshotResult struct {
	said
	Path       string `json:"snapshot"`
	SHA256     string `json:"sha256,omitempty"`
	Size       int64  `json:"size,omitempty"`
	Revision   int64  `json:"revision,omitempty"`
	ClusterUID string `json:"clusterUID,omitempty"`
}

// heldCopy is the copy of etcd's data this incident took, as its step
// journaled it: what a reset and a bootstrap rely on.
type heldCopy struct {
	Path       string
	Snapshot   bool
	Size       int64
	SHA256     string
	Revision   int64
	ClusterUID string
}

// incidentCopy is the incident's copy: the copy step's, or the snapshot
// step's.
func (r *run) incidentCopy() (heldCopy, bool) {
	if c, ok := earlier[*CopyResult](r, runbooks.ActionEtcdCopy); ok {
		return heldCopy{Path: c.Path, Snapshot: c.Kind == "snapshot", Size: c.Size, SHA256: c.SHA256, Revision: c.Revision, ClusterUID: c.ClusterUID}, true
	}
	if s, ok := earlier[*SnapshotResult](r, runbooks.ActionEtcdSnapshot); ok {
		return heldCopy{Path: s.Path, Snapshot: true, Size: s.Size, SHA256: s.SHA256, Revision: s.Revision, ClusterUID: s.ClusterUID}, true
	}
	return heldCopy{}, false
}

func (c heldCopy) facts() *etcd.CopyFacts {
	return &etcd.CopyFacts{SnapshotInfo: etcd.SnapshotInfo{Path: c.Path, Size: c.Size, SHA256: c.SHA256}, Snapshot: c.Snapshot, Revision: c.Revision, ClusterUID: c.ClusterUID}
}

// copyFact is the incident's copy as it was taken: its size, sha256 and
// owner. It holds while the file is that copy, of this cluster.
func (r *run) copyFact(c heldCopy) Fact {
	return Fact{
		Says:  fmt.Sprintf("the copy %s as taken: %d bytes, sha256 %s, kube-system %s (this cluster's)", c.Path, c.Size, c.SHA256, orDefault(c.ClusterUID, "unknown")),
		Holds: func(context.Context) error { return r.copyStillSo(c) },
	}
}

// copyStillSo says whether the copy on disk is the one taken (size and
// sha256, read again), and of this cluster (its kube-system namespace's UID
// against the one the diagnosis read); what it holds now when it is not.
func (r *run) copyStillSo(c heldCopy) error {
	f := c.facts()
	if err := f.Same(); err != nil {
		if now, rerr := etcd.ReadCopy(c.Path, c.Snapshot, r.etcdPrefix()); rerr == nil {
			if ferr := now.CheckOf(r.identity()); ferr != nil {
				return fmt.Errorf("%w; %v", err, ferr)
			}
		}
		return err
	}
	return f.CheckOf(r.identity())
}

// identity is the cluster the incident's diagnosis read: its kube-system
// namespace's UID (revisions move on: not compared here).
func (r *run) identity() etcd.Identity {
	if res, ok := earlier[*DiagnoseResult](r, runbooks.ActionDiagnose); ok && res.Cluster != nil {
		return etcd.Identity{ClusterUID: res.Cluster.ClusterUID}
	}
	return etcd.Identity{}
}

// identityNow is the incident's cluster with the revision etcd answers at
// now, when the member reached is of that cluster: a copy taken now is no
// further than it.
func (r *run) identityNow(ctx context.Context) etcd.Identity {
	want := r.identity()
	ec, err := r.etcdClient(ctx)
	if err != nil || want.ClusterUID == "" {
		return want
	}
	if now, err := ec.Identity(ctx); err == nil && now.ClusterUID == want.ClusterUID {
		want.Revision = now.Revision
	}
	return want
}

func (r *run) etcdPrefix() string { return orDefault(r.opts.Etcd.Prefix, "/registry") }

// readCopy reads the copy just written for its facts and checks that it is
// this cluster's data: a copy that is not is never used.
func (r *run) readCopy(ctx context.Context, path string, snapshot bool) (*etcd.CopyFacts, error) {
	f, err := etcd.ReadCopy(path, snapshot, r.etcdPrefix())
	if err != nil {
		return nil, err
	}
	if want := r.identityNow(ctx); want.ClusterUID == "" {
		return f, fmt.Errorf("%w: the diagnosis could not read the cluster's kube-system namespace (etcd not reached?), so nothing tells that %s is this cluster's data; nothing was reset", ErrConflict, path)
	} else if err := f.CheckOf(want); err != nil {
		return f, err
	}
	return f, nil
}

// resetBack is journaled (a note) when a node is back from this incident's
// reset, in the boot it came back in: where this incident left it.
type resetBack struct {
	Node string `json:"node"`
	Boot string `json:"boot"`
}

func (r *run) noteBack(s Step, node, boot string) {
	data, _ := json.Marshal(struct {
		ResetBack resetBack `json:"resetBack"`
	}{resetBack{node, boot}})
	e := Entry{Kind: "note", Step: s.Name, Action: s.Action(), Message: fmt.Sprintf("%s is back from its reset (boot %s)", node, boot), Data: data}
	if r.journal.Append(e) == nil {
		r.notes = append(r.notes, e)
	}
}

// leftAt is the boot each node ran where this incident last left it: when
// its copy was taken, or, for a node it reset, the boot it came back in.
func (r *run) leftAt() map[string]string {
	out := map[string]string{}
	if c, ok := earlier[*CopyResult](r, runbooks.ActionEtcdCopy); ok {
		maps.Copy(out, c.Boots)
	}
	for _, e := range append(slices.Clone(r.entries), r.notes...) {
		var d struct {
			ResetBack *resetBack `json:"resetBack"`
		}
		if e.Kind == "note" && len(e.Data) > 0 && json.Unmarshal(e.Data, &d) == nil && d.ResetBack != nil {
			out[d.ResetBack.Node] = d.ResetBack.Boot
		}
	}
	return out
}

// whereLeft refuses a plan when a node is not in the boot this incident
// left it in: it rebooted, or someone or something else reset it (without
// quorum no lock keeps another operator's recovery out).
func (r *run) whereLeft(ctx context.Context, s Step) error {
	left := r.leftAt()
	for _, node := range r.tc.Nodes() {
		want, ok := left[node]
		if !ok {
			continue
		}
		boot, err := r.tc.BootID(ctx, node)
		if err != nil || boot == want {
			continue // not answering: the step's own reads say so
		}
		return &MovedError{Step: s.Name, Fact: fmt.Sprintf("node %s in boot %s, where this incident left it", node, shortBoot(want)),
			Now:   fmt.Errorf("node %s is in boot %s now: it rebooted or was reset since, and not by this incident (another operator's recovery?)", node, shortBoot(boot)),
			hints: r.movedHints()}
	}
	return nil
}
