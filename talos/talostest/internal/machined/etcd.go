package machined

// The etcd maintenance calls, answered as machined answers them (sources: siderolabs/talos
// v1.13.8, internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go and
// internal/pkg/etcd): control planes only; each handler makes a new etcd client of the
// node's own member (etcd.NewLocalClient: localhost:2379, machined's admin certificate,
// a 5 s dial timeout), makes one clientv3 call and maps its answer, wrapping errors in
// machined's words. With ClusterOptions.EtcdMember the emulator does exactly that against
// the real member the hook names, so NOSPACE alarms, sizes and defragmentation are etcd's
// own. Without it, EtcdStatus and EtcdMemberList answer from the model in services.go and
// the other calls fail as on a node whose etcd client cannot be made.

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdclient"
)

// errNoEtcdHook is the answer of a call that needs the real member when the
// cluster was given none.
var errNoEtcdHook = errors.New("etcd is not running on this emulated node")

// localEtcd is machined's etcd.NewLocalClient: a client of the node's own member only,
// and that member's endpoint (the handlers pass it to Status and Defragment).
func (m *Machined) localEtcd(ctx context.Context) (*clientv3.Client, string, error) {
	if !m.realEtcd() {
		return nil, "", errNoEtcdHook
	}

	acc, err := m.opts.EtcdMembers.Local()
	if err != nil {
		return nil, "", err
	}

	cli, err := etcdclient.New(ctx, []string{acc.Endpoint}, acc.TLS)

	return cli, acc.Endpoint, err
}

// anyEtcd is machined's etcd.NewClientFromControlPlaneIPs: every control plane's member,
// in random order.
func (m *Machined) anyEtcd(ctx context.Context) (*clientv3.Client, error) {
	if !m.realEtcd() {
		return nil, errNoEtcdHook
	}

	all := m.opts.EtcdMembers.All()
	if len(all) == 0 {
		return nil, errNoEtcdHook
	}

	endpoints := make([]string, 0, len(all))
	for _, acc := range all {
		endpoints = append(endpoints, acc.Endpoint)
	}

	return etcdclient.Any(ctx, endpoints, all[0].TLS)
}

// realEtcd tells whether the etcd calls go to a real member.
func (m *Machined) realEtcd() bool { return m.opts.EtcdMembers.Local != nil }

// mapAlarms is machined's mapAlarms.
func mapAlarms(alarms []*etcdserverpb.AlarmMember) []*machine.EtcdMemberAlarm {
	out := make([]*machine.EtcdMemberAlarm, 0, len(alarms))

	for _, a := range alarms {
		t := machine.EtcdMemberAlarm_NONE

		switch a.Alarm { //nolint:exhaustive
		case etcdserverpb.AlarmType_NOSPACE:
			t = machine.EtcdMemberAlarm_NOSPACE
		case etcdserverpb.AlarmType_CORRUPT:
			t = machine.EtcdMemberAlarm_CORRUPT
		}

		out = append(out, &machine.EtcdMemberAlarm{MemberId: a.MemberID, Alarm: t})
	}

	return out
}

// onLocalMember is the frame of machined's etcd maintenance handlers: control planes
// only, a new client of the node's own member, one call, its error in machined's words
// (failed, e.g. "failed to list etcd alarms").
func (m *Machined) onLocalMember(ctx context.Context, api, failed string, call func(cli *clientv3.Client, endpoint string) error) error {
	if err := m.checkControlPlane(api); err != nil {
		return err
	}

	if err := m.waitLocalEtcd(ctx); err != nil { // a stopped member: etcd's client waits
		return fmt.Errorf("%s: %w", failed, err)
	}

	cli, endpoint, err := m.localEtcd(ctx)
	if err != nil {
		return fmt.Errorf("failed to create etcd client: %w", err)
	}
	defer cli.Close() //nolint:errcheck

	if err := call(cli, endpoint); err != nil {
		return fmt.Errorf("%s: %w", failed, err)
	}

	return nil
}

// EtcdAlarmList implements machine.MachineServiceServer: the cluster's alarms as the
// node's member knows them (alarms are replicated: every member lists all of them).
func (s *machineService) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	var resp *clientv3.AlarmResponse

	err := s.m.onLocalMember(ctx, "etcd alarm list", "failed to list etcd alarms", func(cli *clientv3.Client, _ string) (err error) {
		resp, err = cli.AlarmList(ctx)

		return err
	})
	if err != nil {
		return nil, err
	}

	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{{MemberAlarms: mapAlarms(resp.Alarms)}}}, nil
}

// EtcdAlarmDisarm implements machine.MachineServiceServer. machined passes an empty
// AlarmMember, which etcd's client turns into a disarm of every alarm listed, whichever
// member raised it; the answer lists those disarmed.
func (s *machineService) EtcdAlarmDisarm(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmDisarmResponse, error) {
	var resp *clientv3.AlarmResponse

	err := s.m.onLocalMember(ctx, "etcd alarm disarm", "failed to disarm etcd alarm", func(cli *clientv3.Client, _ string) (err error) {
		resp, err = cli.AlarmDisarm(ctx, &clientv3.AlarmMember{})

		return err
	})
	if err != nil {
		return nil, err
	}

	return &machine.EtcdAlarmDisarmResponse{Messages: []*machine.EtcdAlarmDisarm{{MemberAlarms: mapAlarms(resp.Alarms)}}}, nil
}

// EtcdDefragment implements machine.MachineServiceServer: the node's member defragments
// its database, refusing reads and writes until it is done, as etcd does.
func (s *machineService) EtcdDefragment(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdDefragmentResponse, error) {
	err := s.m.onLocalMember(ctx, "etcd defragment", "failed to defragment etcd", func(cli *clientv3.Client, endpoint string) error {
		_, err := cli.Defragment(ctx, endpoint)

		return err
	})
	if err != nil {
		return nil, err
	}

	return &machine.EtcdDefragmentResponse{Messages: []*machine.EtcdDefragment{{}}}, nil
}

// realEtcdStatus is machined's EtcdStatus against the real member.
func (m *Machined) realEtcdStatus(ctx context.Context) (*machine.EtcdStatusResponse, error) {
	cli, endpoint, err := m.localEtcd(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}
	defer cli.Close() //nolint:errcheck

	resp, err := cli.Status(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("failed to query etcd status: %w", err)
	}

	storageVersion := resp.StorageVersion
	if storageVersion == "" { // etcd before 3.6 leaves it empty; machined derives it
		var major, minor int
		if _, err := fmt.Sscanf(resp.Version, "%d.%d", &major, &minor); err == nil {
			storageVersion = fmt.Sprintf("%d.%d.0", major, minor)
		} else {
			storageVersion = "unknown"
		}
	}

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: &machine.EtcdMemberStatus{
		MemberId:         resp.Header.MemberId,
		ProtocolVersion:  resp.Version,
		DbSize:           resp.DbSize,
		DbSizeInUse:      resp.DbSizeInUse,
		Leader:           resp.Leader,
		RaftIndex:        resp.RaftIndex,
		RaftTerm:         resp.RaftTerm,
		RaftAppliedIndex: resp.RaftAppliedIndex,
		StorageVersion:   storageVersion,
		Errors:           resp.Errors,
		IsLearner:        resp.IsLearner,
	}}}}, nil
}

// realEtcdMembers is machined's EtcdMemberList against the real members.
func (m *Machined) realEtcdMembers(ctx context.Context, local bool) (*machine.EtcdMemberListResponse, error) {
	var (
		cli *clientv3.Client
		err error
	)

	if local {
		cli, _, err = m.localEtcd(ctx)
	} else {
		cli, err = m.anyEtcd(ctx)
	}

	if err != nil {
		return nil, err
	}
	defer cli.Close() //nolint:errcheck

	resp, err := cli.MemberList(clientv3.WithRequireLeader(ctx))
	if err != nil {
		return nil, err
	}

	out := &machine.EtcdMembers{}

	for _, m := range resp.Members {
		out.LegacyMembers = append(out.LegacyMembers, m.GetName())
		out.Members = append(out.Members, &machine.EtcdMember{
			Id:         m.GetID(),
			Hostname:   m.GetName(),
			PeerUrls:   m.GetPeerURLs(),
			ClientUrls: m.GetClientURLs(),
			IsLearner:  m.GetIsLearner(),
		})
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{out}}, nil
}

// etcdSnapshotFromMember is machined's EtcdSnapshot body: the member's snapshot, streamed.
func (m *Machined) etcdSnapshotFromMember(ctx context.Context, send func([]byte) error) error {
	cli, _, err := m.localEtcd(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "failed to create etcd client: %v", err)
	}
	defer cli.Close() //nolint:errcheck

	rd, err := cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("failed reading etcd snapshot: %w", err)
	}
	defer rd.Close() //nolint:errcheck

	// machined's chunker sends what each read returns, up to 1 KiB, and ends the
	// stream without an error when a read fails (TALOS.md): so does this
	buf := make([]byte, 1024)

	for {
		k, err := rd.Read(buf)
		if k > 0 {
			if serr := send(append([]byte(nil), buf[:k]...)); serr != nil {
				return serr
			}
		}

		if err != nil {
			return nil
		}
	}
}
