package recovery

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() { register((*run).preflight) }

// PreflightResult: the nodes answered, are control planes, and the lock.
type PreflightResult struct {
	said
	Cluster  string   `json:"cluster"`
	Versions []string `json:"versions"`
	Role     string   `json:"role"`
	ToRemove []string `json:"toRemove,omitempty"`
	Lock     string   `json:"lock,omitempty"` // taken, not taken
	// EtcdClusterID binds the incident to its etcd (resume and revert check it).
	EtcdClusterID string `json:"etcdClusterID,omitempty"`
}

// incidentEtcdCluster is the etcd cluster ID the incident is bound to
// (this run's preflight, or the journal's).
func (r *run) incidentEtcdCluster() string {
	if p, ok := earlier[*PreflightResult](r, runbooks.ActionPreflight); ok && p.EtcdClusterID != "" && !r.bootstrapBegun() {
		return p.EtcdClusterID
	}
	return boundEtcdCluster(r.entries)
}

// preflight checks, changing nothing, that every node answers with a role
// that may patch and is a control plane, looks up the objects asked to be
// removed, and takes the cluster lock.
func (r *run) preflight(ctx context.Context, _ Step, _ *runbooks.PreflightParams) (*Plan, error) {
	if err := r.tc.RequireAdmin("a guided recovery"); err != nil {
		return nil, err
	}
	res := &PreflightResult{Role: r.tc.Role()}
	plan := &Plan{Result: res}
	for _, node := range r.tc.Nodes() {
		v, err := r.tc.Version(ctx, node)
		if errors.Is(err, talos.ErrUnreachable) && len(r.tc.Nodes()) > 1 {
			others := Target{Context: r.target.Context, Nodes: without(r.tc.Nodes(), []string{node})}
			err = failure.Hinted(err, fmt.Sprintf("if %s is gone for good (replaced without talosctl etcd leave), leave it out and say so: %s --nodes-gone %s", node, others.NodesCmd("recover"), node))
		}
		if err != nil {
			return nil, err
		}
		_, facts, err := r.tc.ReadConfigFacts(ctx, node)
		if err != nil {
			return nil, err
		}
		if !facts.IsControlPlane() {
			return nil, talos.NewNodeError(node, "check machine type", fmt.Errorf("%w (machine type %s)", talos.ErrNotControlPlane, facts.MachineType),
				"target only the control-plane nodes: -n CP1,CP2,CP3")
		}
		res.Cluster = facts.ClusterName
		res.Versions = append(res.Versions, node+"="+v)
		r.progress(node, fmt.Sprintf("Talos %s, control plane of cluster %s, kube-apiserver image %s", v, facts.ClusterName, facts.APIServerImage))
	}
	msg := fmt.Sprintf("%d control-plane node(s) reachable, role %s", len(r.tc.Nodes()), r.tc.Role())
	found, err := r.checkRequestedDeletes(ctx)
	if err != nil {
		return plan, err
	}
	if len(found) > 0 {
		res.ToRemove = found
		msg += "; found in etcd: " + strings.Join(found, ", ")
	}
	if !r.fx.Lock {
		if r.fx.DryRun() {
			msg += r.dryRunLockNote(ctx)
		}
		res.said = said(msg)
		return plan, nil
	}
	warning, err := r.takeLock(ctx)
	if err != nil {
		return plan, err
	}
	res.EtcdClusterID = r.etcdClusterID(ctx)
	switch {
	case r.lock.deferred:
		res.Lock, res.said = "not taken yet", said(msg+"; cluster lock NOT taken yet (etcd takes no write: it is taken once it does)")
		return plan, nil
	case warning != "":
		res.Lock, res.said = "not taken", said(msg+"; cluster lock NOT taken (etcd unreachable)")
		return plan, nil
	}
	res.Lock, res.said = "taken", said(msg+"; cluster lock taken")
	return plan, nil
}
