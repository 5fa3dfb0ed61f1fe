package talos

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// The calls of Talos's etcd disaster recovery (talos.dev, advanced/
// disaster-recovery), as talosctl makes them: etcd remove-member, leave,
// forfeit-leadership; service etcd; reset of the EPHEMERAL partition;
// bootstrap --recover-from (EtcdRecover, then Bootstrap); cp of the member's
// database file. Each acts on the node it is sent to.

// EtcdDBPath is the member's database file on a Talos node: what
// `talosctl cp` copies out when no member serves a snapshot any more.
const EtcdDBPath = "/var/lib/etcd/member/snap/db"

// EtcdService is the node's etcd service as machined runs it.
type EtcdService struct {
	State   string // Running, Preparing, Waiting, Failed, Finished, ...
	Healthy bool
	// HealthUnknown: machined has not checked its health yet.
	HealthUnknown bool
	// Message is the last event's, e.g. "Waiting for bootstrap" or the
	// error that stopped it.
	Message string
}

// WaitingForBootstrap tells whether the node's etcd waits to be
// bootstrapped or to join (after a reset of EPHEMERAL, its pre state
// runs): what `talosctl bootstrap` needs. A member that fails and restarts
// is Waiting, not Preparing.
func (s EtcdService) WaitingForBootstrap() bool { return s.State == "Preparing" }

// EtcdService reads the node's etcd service.
func (c *Client) EtcdService(ctx context.Context, node string) (EtcdService, error) {
	const op = "read the etcd service"
	infos, err := c.api.ServiceInfo(client.WithNode(ctx, node), "etcd")
	if err != nil {
		return EtcdService{}, c.etcdError(ctx, node, op, err, false)
	}
	if len(infos) == 0 || infos[0].Service == nil {
		return EtcdService{}, &NodeError{Node: node, Op: op, Err: fmt.Errorf("%w: no etcd service", ErrNotControlPlane)}
	}
	svc := infos[0].Service
	out := EtcdService{State: svc.GetState(), Healthy: svc.GetHealth().GetHealthy(), HealthUnknown: svc.GetHealth().GetUnknown()}
	if ev := svc.GetEvents().GetEvents(); len(ev) > 0 {
		out.Message = ev[len(ev)-1].GetMsg()
	}
	return out, nil
}

// EtcdRemoveMember removes the member id from the cluster, asked of a
// healthy member's node (etcd needs quorum to change its membership).
func (c *Client) EtcdRemoveMember(ctx context.Context, node string, id uint64) error {
	if err := c.api.EtcdRemoveMemberByID(client.WithNode(ctx, node), &machine.EtcdRemoveMemberByIDRequest{MemberId: id}); err != nil {
		return c.etcdError(ctx, node, "remove etcd member "+MemberIDString(id), err, true)
	}
	return nil
}

// EtcdLeave has the node's own member leave the cluster.
func (c *Client) EtcdLeave(ctx context.Context, node string) error {
	if err := c.api.EtcdLeaveCluster(client.WithNode(ctx, node), &machine.EtcdLeaveClusterRequest{}); err != nil {
		return c.etcdError(ctx, node, "leave the etcd cluster", err, true)
	}
	return nil
}

// EtcdForfeitLeadership has the node's member hand leadership over.
func (c *Client) EtcdForfeitLeadership(ctx context.Context, node string) error {
	if _, err := c.api.EtcdForfeitLeadership(client.WithNode(ctx, node), &machine.EtcdForfeitLeadershipRequest{}); err != nil {
		return c.etcdError(ctx, node, "forfeit etcd leadership", err, true)
	}
	return nil
}

// ResetEphemeral wipes the node's EPHEMERAL partition (the etcd member's
// data with it) and reboots it, as `talosctl reset --graceful=false
// --reboot --system-labels-to-wipe=EPHEMERAL` does. The node comes back
// with its config and its etcd waiting to join, or to be bootstrapped.
func (c *Client) ResetEphemeral(ctx context.Context, node string) error {
	req := &machine.ResetRequest{Graceful: false, Reboot: true,
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}}}
	if err := c.api.ResetGeneric(client.WithNode(ctx, node), req); err != nil {
		return c.nodeError(ctx, node, "reset EPHEMERAL", err)
	}
	return nil
}

// BootID is the node's current boot's ID, as talosctl reads it to tell
// that a node rebooted (reboot and reset --wait).
func (c *Client) BootID(ctx context.Context, node string) (string, error) {
	rc, err := c.api.Read(client.WithNode(ctx, node), "/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", c.nodeError(ctx, node, "read the boot ID", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 256))
	if err != nil {
		return "", c.nodeError(ctx, node, "read the boot ID", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// BootstrapFrom uploads an etcd snapshot to the node (EtcdRecover) and
// bootstraps etcd from it, as `talosctl bootstrap --recover-from` does;
// skipHashCheck for a database file copied out, which has no hash
// trailer. The node's etcd must be waiting for bootstrap.
func (c *Client) BootstrapFrom(ctx context.Context, node string, snapshot io.Reader, skipHashCheck bool) error {
	ctx = client.WithNode(ctx, node)
	if _, err := c.api.EtcdRecover(ctx, snapshot); err != nil {
		return c.nodeError(ctx, node, "upload the etcd snapshot", err)
	}
	if err := c.api.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true, RecoverSkipHashCheck: skipHashCheck}); err != nil {
		return c.nodeError(ctx, node, "bootstrap etcd from the snapshot", err)
	}
	return nil
}

// CopyEtcdDB copies the member's database file out of the node into w,
// as `talosctl cp /var/lib/etcd/member/snap/db .` does (the node streams
// a gzipped tar of it). A database copied so is not a snapshot: it has no
// hash trailer, and bootstrapping from it skips the hash check.
func (c *Client) CopyEtcdDB(ctx context.Context, node string, w io.Writer) (int64, error) {
	const op = "copy the etcd database file"
	rc, err := c.api.Copy(client.WithNode(ctx, node), EtcdDBPath)
	if err != nil {
		return 0, c.nodeError(ctx, node, op, err)
	}
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	if err != nil {
		return 0, c.nodeError(ctx, node, op, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return 0, &NodeError{Node: node, Op: op, Err: fmt.Errorf("the archive holds no %s", path.Base(EtcdDBPath))}
		}
		if err != nil {
			return 0, c.nodeError(ctx, node, op, err)
		}
		if h.Typeflag == tar.TypeReg && path.Base(h.Name) == path.Base(EtcdDBPath) {
			n, err := io.Copy(w, tr)
			if err != nil {
				return n, c.nodeError(ctx, node, op, err)
			}
			return n, nil
		}
	}
}
