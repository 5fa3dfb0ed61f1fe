package runbooks

// The recovery from a full etcd (the NOSPACE alarm: every write refused):
// see what filled it, compact its history, defragment each member, disarm
// the alarm. Nothing is deleted but history older than the current
// revision; the source (an event flood, a status loop) is named, not
// removed, and the quota is not raised unasked.

import (
	"fmt"
	"slices"
)

// The actions of the etcd-nospace runbook.
const (
	ActionEtcdUsage      Action = "etcd.usage"
	ActionEtcdCompact    Action = "etcd.compact"
	ActionEtcdDefragment Action = "etcd.defragment"
	ActionEtcdDisarm     Action = "etcd.disarm"
)

// EtcdUsageParams are etcd.usage's parameters.
type EtcdUsageParams struct {
	// Top is how many of the largest groups (resource and namespace) are shown.
	Top int `yaml:"top" json:"top"`
}

// EtcdCompactParams: etcd.compact takes no parameters (it compacts to the current revision).
type EtcdCompactParams struct{}

// EtcdDefragmentParams: etcd.defragment takes no parameters.
type EtcdDefragmentParams struct{}

// EtcdDisarmParams: etcd.disarm takes no parameters.
type EtcdDisarmParams struct{}

func (*EtcdUsageParams) Action() Action      { return ActionEtcdUsage }
func (*EtcdCompactParams) Action() Action    { return ActionEtcdCompact }
func (*EtcdDefragmentParams) Action() Action { return ActionEtcdDefragment }
func (*EtcdDisarmParams) Action() Action     { return ActionEtcdDisarm }

// MaxUsageTop is the most groups etcd.usage shows.
const MaxUsageTop = 100

func (p *EtcdUsageParams) check() []fieldError {
	if p.Top < 1 || p.Top > MaxUsageTop {
		return []fieldError{{field: "top", index: -1, msg: fmt.Sprintf("%d is out of range (1 to %d)", p.Top, MaxUsageTop)}}
	}
	return nil
}
func (*EtcdCompactParams) check() []fieldError    { return nil }
func (*EtcdDefragmentParams) check() []fieldError { return nil }
func (*EtcdDisarmParams) check() []fieldError     { return nil }

func init() {
	// After etcd.snapshot, in run order.
	i := slices.IndexFunc(actionTable, func(a ActionInfo) bool { return a.Name == ActionEtcdSnapshot })
	actionTable = slices.Insert(actionTable, i+1,
		ActionInfo{
			Name:      ActionEtcdUsage,
			Summary:   "report what fills etcd, by resource and namespace (keys and bytes, largest first), and how much compaction and defragmentation would free; changes nothing",
			newParams: func() Params { return &EtcdUsageParams{Top: 5} },
			params:    []paramDoc{{"top", fmt.Sprintf("integer (1 to %d)", MaxUsageTop), "how many of the largest groups are shown", ""}},
		},
		ActionInfo{
			Name:           ActionEtcdCompact,
			Summary:        "compact etcd's history up to the current revision (every older version of every key is dropped; no live key changes)",
			ChangesCluster: true,
			newParams:      func() Params { return &EtcdCompactParams{} },
		},
		ActionInfo{
			Name:           ActionEtcdDefragment,
			Summary:        "defragment each etcd member through the Talos API, one at a time, the leader last, each answering again before the next (a member is blocked while it runs)",
			ChangesCluster: true,
			newParams:      func() Params { return &EtcdDefragmentParams{} },
		},
		ActionInfo{
			Name:           ActionEtcdDisarm,
			Summary:        "disarm etcd's NOSPACE alarm once no member is full, then prove a write goes through (a probe key written and removed)",
			ChangesCluster: true,
			newParams:      func() Params { return &EtcdDisarmParams{} },
		},
	)
}
