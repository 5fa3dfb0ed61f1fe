package machined

// The etcd membership and recovery calls, and the service calls, as machined answers
// them (sources: siderolabs/talos v1.13.8,
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go, internal/pkg/etcd,
// internal/app/machined/pkg/system/system.go APIStart/APIStop/APIRestart,
// services/etcd.go BootstrapEtcd). They need the node's real etcd service
// (ClusterOptions.Etcd); without it they answer Unimplemented, saying so.
//
//   - Bootstrap: control planes only; refused (AlreadyExists "etcd data directory is not
//     empty") when /var/lib/etcd holds anything, and before cri runs in the boot
//     (FailedPrecondition "bootstrap is not available yet"). Otherwise the etcd service
//     is stopped (a join in progress ends), "Bootstrap requested", and started again as
//     a new cluster of this member, first restored from the snapshot EtcdRecover
//     uploaded when RecoverEtcd is set (etcdutl's restore: its hash is checked unless
//     RecoverSkipHashCheck, and the revision is the snapshot's). The reply comes once
//     the service started: a restore that fails afterwards leaves the service Failed,
//     as on a node.
//   - EtcdRecover: the uploaded bytes become /var/lib/etcd.snapshot, for the next
//     Bootstrap with RecoverEtcd; nothing else happens.
//   - EtcdRemoveMemberByID: through any control plane's member (a leader required);
//     NotFound for an unknown ID; etcd refuses what would lose quorum.
//   - EtcdLeaveCluster: waits (3 minutes at most) for the node's member to be healthy,
//     removes it through any member, stops the etcd service (Finished) and deletes
//     /var/lib/etcd; the service stays stopped until the next boot or bootstrap.
//   - EtcdForfeitLeadership: moves the leadership to another member if this one leads,
//     answering the new leader's name ("" when this member did not lead).
//   - ServiceStart, ServiceStop, ServiceRestart: machined lets the API start and
//     restart only the kubelet and extensions, and stop none: for etcd a stop or a
//     restart while its service runs is refused (`service "etcd" doesn't support stop
//     operation via API`), a start while it runs does nothing and says "started", a
//     stop while it does not run does nothing and says "stopped". The kubelet's restart
//     is not emulated (Unimplemented).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
)

// errNoEtcdService answers the calls that need the node's real etcd service.
var errNoEtcdService = status.Error(codes.Unimplemented, "this emulated node runs no etcd service (talostest.ClusterOptions.Etcd)")

// etcdServiceFor returns the node's service, or the reason there is none.
func (m *Machined) etcdServiceFor(api string) (EtcdService, error) {
	if err := m.checkControlPlane(api); err != nil {
		return nil, err
	}

	if m.etcd == nil {
		return nil, errNoEtcdService
	}

	return m.etcd, nil
}

// etcdDataEmpty is machined's `os.ReadDir(EtcdDataPath)` check: a missing or unreadable
// directory counts as empty.
func (m *Machined) etcdDataEmpty() bool {
	entries, _ := os.ReadDir(m.host.Path(constants.EtcdDataPath)) //nolint:errcheck

	return len(entries) == 0
}

// localMemberID is machined's GetLocalMemberID: it waits (3 minutes at most) for the
// local Member resource, which exists while the etcd service runs healthy.
func (m *Machined) localMemberID(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdLocalMemberID)
	defer cancel()

	md := etcdres.NewMember(etcdres.NamespaceName, etcdres.LocalMemberID).Metadata()

	ev, err := m.st.WatchFor(ctx, md, state.WithEventTypes(state.Created, state.Updated))
	if err != nil {
		return 0, fmt.Errorf("failed to get local etcd member ID: %w", err)
	}

	return etcdres.ParseMemberID(ev.(*etcdres.Member).TypedSpec().MemberID)
}

// etcdLocalMemberID is GetLocalMemberID's wait for the Member resource.
const etcdLocalMemberID = 3 * time.Minute

// Bootstrap implements machine.MachineServiceServer.
func (s *machineService) Bootstrap(ctx context.Context, in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	m := s.m

	m.logf("bootstrap request received")

	if !m.booted("cri") {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}

	svc, err := m.etcdServiceFor("bootstrap")
	if err != nil {
		return nil, err
	}

	if !m.etcdDataEmpty() {
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}

	if err := svc.Bootstrap(ctx, in.RecoverEtcd, in.RecoverSkipHashCheck); err != nil {
		return nil, err
	}

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// EtcdRecover implements machine.MachineServiceServer.
func (s *machineService) EtcdRecover(srv machine.MachineService_EtcdRecoverServer) error {
	m := s.m

	if _, err := os.Stat(m.host.Path("/var/lib")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
		}

		return err
	}

	if _, err := m.etcdServiceFor("etcd recover"); err != nil {
		return err
	}

	path := m.host.Path(etcdRecoverySnapshotPath)

	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o700)
	if err != nil {
		return fmt.Errorf("error creating etcd recovery snapshot: %w", err)
	}
	defer f.Close() //nolint:errcheck

	uploaded := false

	defer func() {
		if !uploaded {
			os.Remove(path) //nolint:errcheck
		}
	}()

	for {
		msg, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			return err
		}

		if _, err := f.Write(msg.Bytes); err != nil {
			return fmt.Errorf("error writing snapshot: %w", err)
		}
	}

	if err := f.Sync(); err != nil {
		return fmt.Errorf("error fsyncing snapshot: %w", err)
	}

	if err := f.Close(); err != nil {
		return fmt.Errorf("error closing snapshot: %w", err)
	}

	uploaded = true

	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{}}})
}

// EtcdRemoveMemberByID implements machine.MachineServiceServer.
func (s *machineService) EtcdRemoveMemberByID(ctx context.Context, in *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	m := s.m

	if _, err := m.etcdServiceFor("etcd remove member"); err != nil {
		return nil, err
	}

	cli, err := m.anyEtcd(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}
	defer cli.Close() //nolint:errcheck

	if _, err := cli.MemberRemove(clientv3.WithRequireLeader(ctx), in.MemberId); err != nil {
		err = fmt.Errorf("failed to remove member %d: %w", in.MemberId, err)

		if errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil, status.Error(codes.NotFound, err.Error())
		}

		return nil, fmt.Errorf("failed to remove member: %w", err)
	}

	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{}}}, nil
}

// EtcdLeaveCluster implements machine.MachineServiceServer.
func (s *machineService) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	if _, err := s.m.etcdServiceFor("etcd leave"); err != nil {
		return nil, err
	}

	if err := s.m.leaveEtcd(ctx); err != nil {
		return nil, err
	}

	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{}}}, nil
}

// leaveEtcd is machined's Client.LeaveCluster, with its handler's wrapping.
func (m *Machined) leaveEtcd(ctx context.Context) error {
	if m.etcd == nil {
		return nil
	}

	cli, err := m.anyEtcd(ctx)
	if err != nil {
		return fmt.Errorf("failed to create etcd client: %w", err)
	}
	defer cli.Close() //nolint:errcheck

	id, err := m.localMemberID(ctx)
	if err != nil {
		return fmt.Errorf("failed to leave cluster: %w", err)
	}

	deadline := time.Now().Add(5 * time.Minute)

	for {
		_, err = cli.MemberRemove(clientv3.WithRequireLeader(ctx), id)
		if err == nil || errors.Is(err, rpctypes.ErrMemberNotFound) {
			break
		}

		retry := errors.Is(err, rpctypes.ErrUnhealthy) || errors.Is(err, rpctypes.ErrStopped)
		if !retry || time.Now().After(deadline) {
			return fmt.Errorf("failed to leave cluster: failed to remove member %d: %w", id, err)
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("failed to leave cluster: %w", ctx.Err())
		case <-time.After(10 * time.Second):
		}
	}

	if err := m.etcd.Stop(ctx); err != nil {
		return fmt.Errorf("failed to leave cluster: failed to stop etcd: %w", err)
	}

	if err := os.RemoveAll(m.host.Path(constants.EtcdDataPath)); err != nil {
		return fmt.Errorf("failed to leave cluster: failed to remove %s: %w", constants.EtcdDataPath, err)
	}

	return nil
}

// EtcdForfeitLeadership implements machine.MachineServiceServer.
func (s *machineService) EtcdForfeitLeadership(ctx context.Context, _ *machine.EtcdForfeitLeadershipRequest) (*machine.EtcdForfeitLeadershipResponse, error) {
	m := s.m

	if _, err := m.etcdServiceFor("etcd forfeit leadership"); err != nil {
		return nil, err
	}

	cli, err := m.anyEtcd(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}
	defer cli.Close() //nolint:errcheck

	ctx = clientv3.WithRequireLeader(ctx)

	id, err := m.localMemberID(ctx)
	if err != nil {
		return nil, err
	}

	leader, err := m.forfeitLeadership(ctx, cli, id)
	if err != nil {
		return nil, fmt.Errorf("failed to forfeit leadership: %w", err)
	}

	return &machine.EtcdForfeitLeadershipResponse{Messages: []*machine.EtcdForfeitLeadership{{Member: leader}}}, nil
}

// forfeitLeadership is machined's Client.ForfeitLeadership.
func (m *Machined) forfeitLeadership(ctx context.Context, cli *clientv3.Client, id uint64) (string, error) {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("failed to list etcd members: %w", err)
	}

	if len(resp.Members) == 1 {
		return "", errors.New("cannot forfeit leadership, only one member")
	}

	local, endpoint, err := m.localEtcd(ctx)
	if err != nil {
		return "", err
	}
	defer local.Close() //nolint:errcheck

	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return "", err
	}

	if st.Leader != id {
		return "", nil
	}

	for _, member := range resp.Members {
		if member.ID == id {
			continue
		}

		m.logf("moving leadership from %q to %q", m.host.Name, member.Name)

		if _, err := local.MoveLeader(ctx, member.ID); err != nil {
			if errors.Is(err, rpctypes.ErrNotLeader) {
				return "", nil
			}

			return "", err
		}

		return member.Name, nil
	}

	return "", nil
}

// serviceRunning tells whether the service has a run in progress (machined's IsRunning).
func (m *Machined) serviceRunning(id string) (bool, error) {
	for _, d := range m.services() {
		if d.id != id {
			continue
		}

		if id == "etcd" && m.etcd != nil {
			return m.etcd.InRun(), nil
		}

		return true, nil
	}

	return false, fmt.Errorf("service %q not defined", id)
}

// ServiceStart implements machine.MachineServiceServer (machined's APIStart).
func (s *machineService) ServiceStart(_ context.Context, in *machine.ServiceStartRequest) (*machine.ServiceStartResponse, error) {
	running, err := s.m.serviceRunning(in.Id)
	if err != nil {
		return &machine.ServiceStartResponse{}, err
	}

	if !running {
		return &machine.ServiceStartResponse{}, fmt.Errorf("service %q doesn't support start operation via API", in.Id)
	}

	return &machine.ServiceStartResponse{Messages: []*machine.ServiceStart{{Resp: fmt.Sprintf("Service %q started", in.Id)}}}, nil
}

// ServiceStop implements machine.MachineServiceServer (machined's APIStop).
func (s *machineService) ServiceStop(_ context.Context, in *machine.ServiceStopRequest) (*machine.ServiceStopResponse, error) {
	running, err := s.m.serviceRunning(in.Id)
	if err != nil {
		return &machine.ServiceStopResponse{}, err
	}

	if running {
		return &machine.ServiceStopResponse{}, fmt.Errorf("service %q doesn't support stop operation via API", in.Id)
	}

	return &machine.ServiceStopResponse{Messages: []*machine.ServiceStop{{Resp: fmt.Sprintf("Service %q stopped", in.Id)}}}, nil
}

// ServiceRestart implements machine.MachineServiceServer (machined's APIRestart).
func (s *machineService) ServiceRestart(ctx context.Context, in *machine.ServiceRestartRequest) (*machine.ServiceRestartResponse, error) {
	running, err := s.m.serviceRunning(in.Id)
	if err != nil {
		return &machine.ServiceRestartResponse{}, err
	}

	switch {
	case !running:
		if _, err := s.ServiceStart(ctx, &machine.ServiceStartRequest{Id: in.Id}); err != nil {
			return &machine.ServiceRestartResponse{}, err
		}
	case in.Id == "kubelet" && s.m.kubelet == nil:
		return &machine.ServiceRestartResponse{}, status.Error(codes.Unimplemented, "restarting a worker's kubelet is not emulated")
	case in.Id == "kubelet":
		// kubelet's APIRestartAllowed: Stop (waits for the service to be down),
		// then Start (in the background). A kubelet a reset has stopped is
		// started instead, which during the reset does nothing (the service
		// runner is shutting down, cri is stopped): Talos's reply is the same.
		if err := s.m.kubelet.Restart(); err != nil {
			s.m.logf("service kubelet: restart requested while the service is stopped: %v", err)
		}
	default:
		return &machine.ServiceRestartResponse{}, fmt.Errorf("service %q doesn't support restart operation via API", in.Id)
	}

	return &machine.ServiceRestartResponse{Messages: []*machine.ServiceRestart{{Resp: fmt.Sprintf("Service %q restarted", in.Id)}}}, nil
}
