package recovery

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/configedit"
)

// DefaultPlugins is what disable turns off when no plugin is named.
var DefaultPlugins = []string{"ValidatingAdmissionWebhook"}

// AdmissionOptions tune disable and restore.
type AdmissionOptions struct {
	Plugins     []string      // plugins to disable (restore: to remove when there is no record)
	RevertAfter time.Duration // disable: > 0 applies in try mode; the node reverts by itself
	Wait        bool          // wait until the static pod runs with the new flags
	WaitTimeout time.Duration
	// KubeletRestart: while waiting, restart each node's kubelet once it has
	// rendered the new pod (recovery/kubelet.go).
	KubeletRestart bool
	DryRun         bool // the nodes validate the change; nothing is applied
	// AllowPendingChange applies even where someone else's TRY or STAGED
	// change is pending (the running config and the one on disk differ in
	// ways breakglass did not make). Off, such a node is refused.
	AllowPendingChange bool
	ToolVersion        string
	Progress           func(node, msg string) // optional: one line per step, per node
	// Target is how the commands the plan names reach these nodes.
	Target Target
}

// NodeChange is the plan, then the outcome, for one node.
type NodeChange struct {
	Node              string   `json:"node"`
	Cluster           string   `json:"cluster"`
	TalosVersion      string   `json:"talosVersion"`
	Action            string   `json:"action"` // disable, restore, none
	Reason            string   `json:"reason,omitempty"`
	DisabledBefore    []string `json:"disabledBefore"`
	DisabledAfter     []string `json:"disabledAfter"`
	RemovedFromEnable []string `json:"removedFromEnable,omitempty"`
	Method            string   `json:"method,omitempty"` // text or merge
	NodeDiff          string   `json:"nodeDiff,omitempty"`
	ConfigHashBefore  string   `json:"configHashBefore"`
	ConfigHashAfter   string   `json:"configHashAfter,omitempty"`
	ByteExact         bool     `json:"byteExact,omitempty"` // restore: the config is again exactly what it was before disable
	Unknowns          []string `json:"unknowns,omitempty"`  // what breakglass cannot know (restore without a record)
	// Drift (restore): the keys someone changed since the disable, and what
	// the restore makes of them: it takes out only what breakglass added.
	Drift         []configedit.Drift `json:"drift,omitempty"`
	RollbackAt    *time.Time         `json:"rollbackAt,omitempty"`    // try mode: when the node reverts by itself
	PendingChange string             `json:"pendingChange,omitempty"` // someone else's TRY or STAGED change on the node
	Warnings      []string           `json:"warnings,omitempty"`      // what the node's validation warned about when it applied
	Outcome       string             `json:"outcome"`                 // planned, applied, running, failed
	Error         string             `json:"error,omitempty"`
	Elapsed       Duration           `json:"elapsed,omitempty"`
	// KubeletRestart: restarted, not needed (the kubelet's poll came
	// first), or failed: why; empty when not tried.
	KubeletRestart string `json:"kubeletRestart,omitempty"`

	newConfig []byte
	record    *AdmissionRecord // disable: to save before applying; restore: the one to drop
	// pendingRollback is when an earlier try-mode change reverts by itself.
	// Any non-try apply, even a dry run, cancels that on the node, so the
	// plan's dry run must then be a try too.
	pendingRollback time.Time
	// tryRecord is the record of breakglass's own try-mode change on the
	// node, if any: the node, not this machine's clock, says whether it is
	// still pending (see ownTryChange).
	tryRecord *AdmissionRecord
	nodeName  string
	// podsBefore are the kube-apiserver pods the node's runtime had when the
	// plan was made: the wait after the apply looks for a pod not among them.
	podsBefore []talos.RuntimePod
}

// AdmissionPlan is a computed change over the target nodes: shown, confirmed,
// then executed once.
type AdmissionPlan struct {
	Operation string        `json:"operation"` // disable or restore
	Nodes     []*NodeChange `json:"nodes"`
	Failed    []string      `json:"failed,omitempty"` // nodes that could not be planned
	Warnings  []string      `json:"warnings,omitempty"`
	DryRun    bool          `json:"dryRun"`

	planErrs []error
	opts     AdmissionOptions
}

// Changes tells whether executing the plan would change any node.
func (p *AdmissionPlan) Changes() bool {
	for _, n := range p.Nodes {
		if n.Action != "none" {
			return true
		}
	}
	return false
}

// restoredRecords are the restore plan's nodes whose config is already byte
// for byte what it was before the disable, but whose record is still there.
func (p *AdmissionPlan) restoredRecords() []*NodeChange {
	var out []*NodeChange
	for _, n := range p.Nodes {
		if p.Operation == "restore" && n.Action == "none" && n.record != nil && n.ByteExact {
			out = append(out, n)
		}
	}
	return out
}

// DropRestoredRecords removes the records of nodes whose config is already
// what it was before the disable: a restore killed between its apply and the
// record's removal, or a try-mode rollback. A record left behind would say
// the plugins are still disabled (status, verify). It returns the nodes.
func (p *AdmissionPlan) DropRestoredRecords(st State) ([]string, error) {
	var done []string
	for _, n := range p.restoredRecords() {
		if err := st.DeleteAdmission(n.Cluster, n.Node); err != nil {
			return done, talos.NewNodeError(n.Node, "remove state record", err)
		}
		done = append(done, n.Node)
	}
	return done, nil
}

// PlanErr is the planning failure of some nodes, if any.
func (p *AdmissionPlan) PlanErr() error { return failures(p.planErrs, len(p.Nodes)) }

// Target is how printed commands reach the plan's nodes.
func (p *AdmissionPlan) Target() Target { return p.opts.Target }

// bypassed says what a set of disabled plugins lets through unchecked.
func bypassed(plugins []string) string {
	what := map[string]string{
		kinds.PluginValidatingWebhook: "validating webhooks",
		kinds.PluginMutatingWebhook:   "mutating webhooks",
		kinds.PluginValidatingPolicy:  "ValidatingAdmissionPolicies",
		kinds.PluginMutatingPolicy:    "MutatingAdmissionPolicies",
	}
	var out []string
	for _, p := range plugins {
		if w, ok := what[p]; ok {
			out = append(out, w)
		} else {
			out = append(out, "what "+p+" enforces")
		}
	}
	if len(out) > 1 {
		return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1] + " are"
	}
	return out[0] + " are"
}

// refuseOnFullEtcd refuses to restart kube-apiserver (turn plugins off)
// while etcd's NOSPACE alarm is raised: a kube-apiserver that restarts on a
// full etcd cannot finish its start-up writes, so the change would take
// down one that still answers. An alarm list that cannot be read does not
// stop the change.
func refuseOnFullEtcd(ctx context.Context, tc *talos.Client, node string) error {
	alarms, err := tc.EtcdAlarms(ctx, node)
	if err != nil {
		return nil
	}
	for _, a := range alarms {
		if a.Type == "NOSPACE" {
			return talos.NewNodeError(node, "plan disable", fmt.Errorf("%w: etcd is full (NOSPACE alarm on member %s): a kube-apiserver restarted now could not finish its start-up writes", ErrEtcdFull, etcd.ID(a.MemberID).String()),
				"give etcd room first: breakglass recover   # the diagnosis picks runbook etcd-nospace",
				"see what filled it: breakglass etcd usage")
		}
	}
	return nil
}

// JournalData is what the journal keeps of an executed plan: per node, the
// action, the config hashes and the outcome (never the config itself).
func (p *AdmissionPlan) JournalData() any {
	data := map[string]any{}
	for _, n := range p.Nodes {
		data[n.Node] = map[string]any{"action": n.Action, "outcome": n.Outcome, "configHashBefore": n.ConfigHashBefore, "configHashAfter": n.ConfigHashAfter, "disabledAfter": n.DisabledAfter, "error": n.Error, "kubeletRestart": n.KubeletRestart}
	}
	return data
}
