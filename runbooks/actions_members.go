package runbooks

// The recovery of a lost etcd member and of a lost quorum, as Talos's
// disaster-recovery guide does it through the Talos API: remove the lost
// member, reset its node's EPHEMERAL partition and let it join again; or,
// without quorum, copy the most advanced member's data, reset every control
// plane, and bootstrap etcd from the copy.

import (
	"fmt"
	"slices"
	"time"
)

// The actions of the etcd-member-lost and etcd-quorum-lost runbooks.
const (
	ActionEtcdCopy         Action = "etcd.copy"
	ActionEtcdMemberRemove Action = "etcd.member.remove"
	ActionEtcdReset        Action = "etcd.reset"
	ActionEtcdBootstrap    Action = "etcd.bootstrap"
	ActionEtcdWait         Action = "etcd.wait"
)

// EtcdCopyParams: etcd.copy takes no parameters in a runbook: it copies
// from the member the diagnosis found most advanced (From, which the
// decision fills).
type EtcdCopyParams struct {
	// From is the node whose member's data is copied. The decision fills
	// it; a runbook cannot (yaml "-").
	From string `yaml:"-" json:"from,omitempty"`
}

// EtcdMemberRemoveParams: etcd.member.remove takes no parameters in a
// runbook: it removes the members the diagnosis found lost (Lost, which
// the decision fills).
type EtcdMemberRemoveParams struct {
	Lost []LostMember `yaml:"-" json:"lost,omitempty"`
}

// LostMember is an etcd member the diagnosis found lost, its node, and
// what says it will not come back by itself.
type LostMember struct {
	Node     string `json:"node,omitempty"`     // "" when no node given runs it
	MemberID string `json:"memberID,omitempty"` // hex, as etcd writes it; "" when its status could not be read
	Why      string `json:"why,omitempty"`
	// Gone: its node is gone for good (--nodes-gone, checked not to answer):
	// the member is removed, and nothing is reset.
	Gone bool `json:"gone,omitempty"`
}

// The control planes etcd.reset resets.
const (
	ResetLost = "lost" // the nodes whose member the diagnosis found lost
	ResetAll  = "all"  // every control plane (a lost quorum)
)

// EtcdResetParams are etcd.reset's parameters.
type EtcdResetParams struct {
	// Nodes says which control planes: lost or all.
	Nodes string `yaml:"nodes" json:"nodes"`
	// Timeout is how long a node may take to come back from its reboot.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// Lost are the members the diagnosis found lost (nodes: lost resets
	// their nodes). The decision fills it; a runbook cannot (yaml "-").
	Lost []LostMember `yaml:"-" json:"lost,omitempty"`
}

// EtcdBootstrapParams are etcd.bootstrap's parameters.
type EtcdBootstrapParams struct {
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// From is the node etcd is bootstrapped on: the one whose member's data
	// was copied. The decision fills it; a runbook cannot (yaml "-").
	From string `yaml:"-" json:"from,omitempty"`
}

// EtcdWaitParams are etcd.wait's parameters.
type EtcdWaitParams struct {
	Timeout Duration `yaml:"timeout" json:"timeout"`
}

func (*EtcdCopyParams) Action() Action         { return ActionEtcdCopy }
func (*EtcdMemberRemoveParams) Action() Action { return ActionEtcdMemberRemove }
func (*EtcdResetParams) Action() Action        { return ActionEtcdReset }
func (*EtcdBootstrapParams) Action() Action    { return ActionEtcdBootstrap }
func (*EtcdWaitParams) Action() Action         { return ActionEtcdWait }

func (*EtcdCopyParams) check() []fieldError         { return nil }
func (*EtcdMemberRemoveParams) check() []fieldError { return nil }
func (p *EtcdBootstrapParams) check() []fieldError  { return checkTimeout(p.Timeout) }
func (p *EtcdWaitParams) check() []fieldError       { return checkTimeout(p.Timeout) }

func (p *EtcdResetParams) check() []fieldError {
	errs := checkTimeout(p.Timeout)
	if p.Nodes != ResetLost && p.Nodes != ResetAll {
		errs = append(errs, fieldError{field: "nodes", index: -1, msg: fmt.Sprintf("%q is neither %s nor %s", p.Nodes, ResetLost, ResetAll),
			hint: "lost: the nodes whose member the diagnosis found lost; all: every control plane (a lost quorum)"})
	}
	return errs
}

// DefaultRebootWait is how long a reset node may take to come back: a
// Talos VM reboots in about a minute; a bare-metal one can take several.
const DefaultRebootWait = 10 * time.Minute

func init() {
	// Before etcd.delete, in run order (after the etcd space actions).
	i := slices.IndexFunc(actionTable, func(a ActionInfo) bool { return a.Name == ActionEtcdDelete })
	timeout := paramDoc{"timeout", "duration", "how long to wait before giving up", ""}
	actionTable = slices.Insert(actionTable, i,
		ActionInfo{
			Name:      ActionEtcdCopy,
			Summary:   "save a verified copy of the most advanced member's data into the incident directory: its snapshot through the Talos API, or, when no member serves one, its database file (talosctl cp); changes nothing",
			newParams: func() Params { return &EtcdCopyParams{} },
		},
		ActionInfo{
			Name:           ActionEtcdMemberRemove,
			Summary:        "remove the etcd members the diagnosis found lost from the cluster, through a healthy member's node, never one that would leave the cluster without quorum",
			ChangesCluster: true,
			newParams:      func() Params { return &EtcdMemberRemoveParams{} },
		},
		ActionInfo{
			Name:           ActionEtcdReset,
			Summary:        "reset the EPHEMERAL partition of control planes (talosctl reset --system-labels-to-wipe EPHEMERAL --reboot): their etcd data and everything else there is wiped (lost: one node at a time, each back before the next; all: at once, as without quorum there is nothing to keep), and each comes back waiting to join or to be bootstrapped",
			ChangesCluster: true,
			newParams:      func() Params { return &EtcdResetParams{Nodes: ResetLost, Timeout: Duration(DefaultRebootWait)} },
			params: []paramDoc{
				{"nodes", ResetLost + " or " + ResetAll, "which control planes: those whose member is lost, or every one (a lost quorum)", ""},
				timeout,
			},
		},
		ActionInfo{
			Name:           ActionEtcdBootstrap,
			Summary:        "once every control plane's etcd waits for bootstrap, bootstrap one from the copy (talosctl bootstrap --recover-from), its revision first bumped past any a client saw and marked compacted (etcdutl snapshot restore --bump-revision --mark-compacted); the others join it",
			ChangesCluster: true,
			newParams:      func() Params { return &EtcdBootstrapParams{Timeout: Duration(DefaultRebootWait)} },
			params:         []paramDoc{timeout},
		},
		ActionInfo{
			Name:      ActionEtcdWait,
			Summary:   "wait until every control plane's etcd member is healthy, a voting member and caught up with the leader",
			newParams: func() Params { return &EtcdWaitParams{Timeout: Duration(DefaultRebootWait)} },
			params:    []paramDoc{timeout},
		},
	)
}
