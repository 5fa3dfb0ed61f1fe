package recovery

// Effects are what a run may change, chosen once by the command that starts
// it: the loop and the steps apply through them, never around them.

import (
	"context"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/talos"
)

// Applier sends a machine config to a node (a *talos.Client is one).
type Applier interface {
	Apply(ctx context.Context, node string, req talos.ApplyRequest) (talos.ApplyResult, error)
}

// Effects are what a run may change, chosen once by the command that
// starts it. The zero value changes nothing: a dry run (see the top of
// this file for what it writes).
type Effects struct {
	// Nodes applies machine configs; nil: the nodes only validate them.
	Nodes Applier
	// Etcd writes etcd keys and backup and snapshot files; nil: nothing is
	// written (etcd.DryRunWriter).
	Etcd func(*etcd.Client) etcd.Writer
	// Lock takes the cluster lock before the first change.
	Lock bool
}

// Live is the effects of a real run through tc.
// A nil tc is a run that reaches etcd only.
func Live(tc *talos.Client) Effects {
	fx := Effects{Etcd: etcd.RealWriter, Lock: true}
	if tc != nil {
		fx.Nodes = tc
	}
	return fx
}

// DryRun tells whether these effects change nothing.
func (fx Effects) DryRun() bool { return fx.Nodes == nil && fx.Etcd == nil }

// EtcdWriter is the writer for ec (a nil ec: one that only writes files).
func (fx Effects) EtcdWriter(ec *etcd.Client) etcd.Writer {
	if fx.Etcd == nil {
		return etcd.DryRunWriter(ec)
	}
	return fx.Etcd(ec)
}
