package recovery

import (
	"context"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/configedit"
)

// NodeAdmission is the admission state of one node.
type NodeAdmission struct {
	Node            string     `json:"node"`
	Cluster         string     `json:"cluster,omitempty"`
	ConfigDisabled  []string   `json:"configDisabled"` // in extraArgs; nil when the role cannot read the config
	RunningDisabled []string   `json:"runningDisabled"`
	RunningKnown    bool       `json:"runningKnown"`
	Since           *time.Time `json:"since,omitempty"` // when breakglass disabled them
	By              string     `json:"by,omitempty"`
	RollbackPending bool       `json:"rollbackPending"`
	RollbackAt      *time.Time `json:"rollbackAt,omitempty"`
	Recorded        bool       `json:"recorded"` // breakglass holds a record to restore from
	Error           string     `json:"error,omitempty"`
}

// Disabled tells whether admission plugins are off on the node, as
// configured or as running.
func (n NodeAdmission) Disabled() bool {
	return len(n.ConfigDisabled) > 0 || len(n.RunningDisabled) > 0
}

// AdmissionStatus reads every target node. Reading the static pod works with
// any role; the config and the record need os:admin, and are left out
// (not guessed) without it.
func AdmissionStatus(ctx context.Context, tc *talos.Client, st State, now time.Time) ([]NodeAdmission, error) {
	nodes := tc.Nodes()
	if len(nodes) == 0 {
		return nil, failure.Input("name the control-plane nodes with -n NODE[,NODE...]", "no target nodes: the talosconfig context names none")
	}
	out, errs := talos.EachNode(nodes, func(node string) (NodeAdmission, error) {
		n, err := nodeAdmission(ctx, tc, st, node, now)
		if err != nil {
			n.Error = err.Error()
		}
		return n, err
	})
	failed := talos.Failed(errs)
	return out, failures(failed, len(nodes)-len(failed))
}

func nodeAdmission(ctx context.Context, tc *talos.Client, st State, node string, now time.Time) (NodeAdmission, error) {
	n := NodeAdmission{Node: node}
	pod, err := tc.ReadAPIServerPod(ctx, node)
	if err != nil {
		return n, err
	}
	n.RunningDisabled, n.RunningKnown = pod.DisabledPlugins(), true
	if !tc.CanApply() {
		return n, nil
	}
	cfg, facts, err := tc.ReadConfigFacts(ctx, node)
	if err != nil {
		return n, err
	}
	n.Cluster = facts.ClusterName
	if n.ConfigDisabled, err = configedit.Disabled(cfg.Bytes); err != nil {
		return n, talos.NewNodeError(node, "read extraArgs", err)
	}
	rec, err := st.LoadAdmission(n.Cluster, node)
	if err != nil || rec == nil {
		return n, err
	}
	n.Recorded = true
	n.Since, n.By = &rec.DisabledAt, rec.By
	if rec.RollbackAt != nil {
		n.RollbackAt = rec.RollbackAt
		n.RollbackPending = now.Before(*rec.RollbackAt) && cfg.Hash() == rec.ConfigHashAfter
	}
	return n, nil
}
