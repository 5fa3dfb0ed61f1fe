package recovery

// An incident is bound to its cluster and nodes: resume and revert act on
// the nodes it recorded, after checking that they are still the recorded
// cluster's (its name, and etcd's cluster ID), and refuse another -n,
// --context or cluster unless told which recorded nodes are gone. A
// rehearsal's incident (a dry run) is never resumed or reverted for real.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
)

// OpenIncident reopens an incident's journal to append to it (resume,
// revert): refused when it is damaged (saying what can still be done) or
// was a rehearsal. An empty id means the newest incident.
func (s State) OpenIncident(id string) (*Journal, []Entry, error) {
	return s.openFor(id, Effects{Lock: true, Etcd: etcd.RealWriter})
}

// openFor opens an incident for a resume or a revert with these effects: a
// dry run gets a journal that writes nothing, as it reads the incident and
// changes nothing of it.
func (s State) openFor(id string, fx Effects) (*Journal, []Entry, error) {
	dir, entries, err := s.ReadIncident(id)
	var damage *JournalDamageError
	if errors.As(err, &damage) {
		return nil, nil, &damagedIncidentError{id: filepath.Base(dir), dir: dir, damage: damage}
	}
	if err != nil {
		return nil, nil, err
	}
	meta := *entries[0].Meta
	if meta.DryRun {
		return nil, nil, &rehearsalError{id: meta.ID, real: realCommand(meta)}
	}
	if fx.DryRun() {
		return &Journal{ID: meta.ID, Dir: dir, meta: meta}, entries, nil
	}
	j, err := openJournal(dir, meta)
	return j, entries, err
}

// rehearsalError: a dry run's incident, which nothing can continue for real.
type rehearsalError struct{ id, real string }

func (e *rehearsalError) Error() string {
	return fmt.Sprintf("incident %s was a dry run (a rehearsal): nothing of it was applied, and it is never resumed or reverted for real", e.id)
}
func (e *rehearsalError) Unwrap() error   { return failure.BadInput }
func (e *rehearsalError) Hints() []string { return []string{"run it for real: " + e.real} }

// realCommand is the command that does for real what a rehearsal's
// incident rehearsed.
func realCommand(meta IncidentMeta) string {
	var opts RecoverOptions
	_ = json.Unmarshal(meta.Options, &opts)
	if opts.CommandLine != "" {
		return opts.CommandLine
	}
	command := orDefault(opts.Command, "recover")
	if standalone(meta) {
		command = meta.Runbook
	}
	return Target{Context: meta.Context, Nodes: meta.Nodes}.NodesCmd(command) + " (with the flags it had, without --dry-run)"
}

// bind holds a resume or revert to the incident's cluster and nodes: the
// recorded nodes become the targets (less those said to be gone), after
// checking that -n and --context, when given, name the incident's own, and
// that the nodes and etcd belong to the recorded cluster.
func (r *run) bind(ctx context.Context, o IncidentOptions, verb string) error {
	meta := r.journal.Meta()
	recorded := meta.Nodes
	run := Target{Context: meta.Context}
	for _, g := range o.NodesGone {
		if !slices.Contains(recorded, g) {
			return failure.Input("name only the incident's nodes: "+orDefault(strings.Join(recorded, ","), "(it recorded none)"),
				"--nodes-gone %s is not a node of incident %s", g, meta.ID)
		}
	}
	targets := without(recorded, o.NodesGone)
	if len(recorded) > 0 && len(targets) == 0 {
		return failure.Input("leave at least one of its nodes out of --nodes-gone", "--nodes-gone names every node of incident %s: nothing is left to act on", meta.ID)
	}
	if len(recorded) > 0 && len(o.Nodes) > 0 && !sameSet(o.Nodes, targets) {
		hints := []string{"act on the incident's own nodes: " + run.Cmd(verb+" "+meta.ID) + " (no -n: the incident names them)"}
		if others := without(recorded, o.Nodes); len(others) > 0 && len(without(o.Nodes, recorded)) == 0 {
			hints = append(hints, "if "+strings.Join(others, ",")+" are gone for good, say so: "+run.Cmd(verb+" "+meta.ID)+" --nodes-gone "+strings.Join(others, ","))
		}
		return failure.Hinted(failure.Input("", "incident %s ran on nodes %s; -n names %s", meta.ID, strings.Join(targets, ","), strings.Join(o.Nodes, ",")), hints...)
	}
	if meta.Context != "" && r.tc != nil {
		now := orDefault(o.Context, r.tc.ContextName())
		if now != meta.Context {
			return failure.Input("use the incident's context: "+run.Cmd(verb+" "+meta.ID),
				"incident %s was run through talosconfig context %s; this command uses context %s", meta.ID, meta.Context, now)
		}
	}
	if len(targets) > 0 && r.tc != nil {
		r.tc = r.tc.WithNodes(targets)
	}
	if r.tc != nil {
		if err := checkGone(ctx, r.tc, o.NodesGone, verb); err != nil {
			return err
		}
	}
	r.target.Nodes, r.gone = targets, union(r.opts.NodesGone, o.NodesGone)
	if len(targets) == 0 {
		r.target.Nodes = r.tc.Nodes()
	}
	if meta.Cluster != "" && len(targets) > 0 {
		if now := clusterName(ctx, r.tc); now != "" && now != meta.Cluster {
			return failure.Input("run it against the cluster the incident was on (its talosconfig context "+orDefault(meta.Context, "-")+")",
				"incident %s is of cluster %s; node %s belongs to cluster %s", meta.ID, meta.Cluster, targets[0], now)
		}
	}
	if want := boundEtcdCluster(r.entries); want != "" {
		ec, err := r.etcdClient(ctx)
		if err != nil {
			r.progress("etcd", "cannot check etcd's cluster ID against the incident's "+want+": "+shortErr(err))
			return nil
		}
		info, err := ec.Cluster(ctx)
		if err == nil && info.ClusterID.String() != want {
			// The same Kubernetes cluster (its kube-system namespace) in a
			// new etcd: bootstrapped again from a copy, not by this incident.
			if id := r.identity(); id.ClusterUID != "" {
				if now, err := ec.Identity(ctx); err == nil && now.ClusterUID == id.ClusterUID {
					return failure.Hinted(fmt.Errorf("%w: incident %s recorded etcd cluster %s; etcd runs as cluster %s now, of the same Kubernetes cluster (kube-system %s): it was bootstrapped again since, and not by this incident (another operator's recovery?); nothing was done",
						ErrConflict, meta.ID, want, info.ClusterID, id.ClusterUID), r.movedHints()[0], "if another run recovered etcd, close this incident as superseded: breakglass journal close "+meta.ID)
				}
			}
			return failure.Input("reach the incident's etcd: its endpoints, or -n with its nodes",
				"incident %s recorded etcd cluster %s; the etcd reached now is cluster %s", meta.ID, want, info.ClusterID)
		}
	}
	return nil
}

// leftBehind says what a run that left recorded nodes out leaves there.
func (r *run) leftBehind() []string {
	var out []string
	for _, n := range r.gone {
		line := "node " + n + " was left out (--nodes-gone)"
		if rec, err := r.st.LoadAdmission(r.journal.Meta().Cluster, n); err == nil && rec != nil {
			line += fmt.Sprintf("; breakglass's record of its disabled plugins (%s) stays in %s; if it comes back, put them back with: %s",
				strings.Join(rec.Plugins, ","), r.st.admissionPath(rec.Cluster, n), Target{Context: r.target.Context, Nodes: []string{n}}.NodesCmd("admission restore"))
		}
		out = append(out, line)
	}
	return out
}

// clusterName is the cluster's name from the first node's machine config,
// for the incident record (where it happened); "" when it cannot be read
// quickly: preflight then says why.
func clusterName(ctx context.Context, tc *talos.Client) string {
	nodes := tc.Nodes()
	if len(nodes) == 0 || !tc.CanApply() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, facts, err := tc.ReadConfigFacts(ctx, nodes[0])
	if err != nil {
		return ""
	}
	return facts.ClusterName
}

// IncidentOptions say which incident a resume or revert works on, and what
// the command line said of its cluster.
type IncidentOptions struct {
	ID string // "" : resume the newest interrupted incident (revert: the newest)
	// Nodes and Context are -n and --context as given (empty: not given):
	// they must name the incident's own.
	Nodes   []string
	Context string
	// NodesGone are recorded nodes the operator says are gone for good
	// (--nodes-gone): left out, and said so.
	NodesGone []string
	// Objects (revert): also put back what the incident removed from etcd.
	Objects bool
	// Etcd (revert): how to reach etcd; default: as the incident did.
	Etcd        EtcdOptions
	ToolVersion string
}
