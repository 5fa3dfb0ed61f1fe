package machined

// What a node answers for its services, etcd and kernel log (sources: siderolabs/talos
// v1.13.8, internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go and
// internal/app/machined/pkg/system):
//
//   - ServiceList (talosctl services, talosctl service ID): machined's services sorted
//     by ID, all Running: apid, auditd, containerd, cri, dashboard, etcd, kubelet,
//     machined, syslogd, trustd, udevd; etcd and trustd on control planes only. Each
//     carries the event history a booted node shows (Starting, Waiting for its
//     conditions, Preparing, the runner's start message with a PID, "Health check
//     successful") and its health: OK, "?" for the dashboard (no health check), and for
//     etcd the node's etcd health (Node.SetEtcdHealthy): unhealthy is "Fail" with
//     "context deadline exceeded", machined's quorum check failing against a local etcd
//     that does not answer. A health change is recorded (event, machined log line) when
//     the emulator next looks, not when it happened.
//   - EtcdMemberList and EtcdStatus (talosctl etcd members / status): control planes
//     only (Unimplemented elsewhere). An unhealthy etcd acts as a stopped one: etcd's
//     client waits for the connection (gRPC WaitForReady), so the call blocks until the
//     caller's context ends, as on a node. Members are the cluster's control planes
//     (IDs stable per node, https URLs on the node IPs, ports 2380 and 2379); talosctl
//     asks the local member (QueryLocal). With too few healthy members for a quorum the
//     member list fails with "etcdserver: no leader" (Unknown) and the status reports
//     no leader and that error. A node rebooting after an apply counts as down.
//   - Dmesg (talosctl dmesg): kernel boot lines, machined's service lines, then
//     machined's log (the lines Logs serves for "machined") as Talos writes them to the
//     kernel log ("user: warning: [time]: [talos] ..."); Follow streams new machined
//     lines until the caller's context ends, Tail skips what was logged before.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
)

// serviceDef describes one of machined's services on a booted node.
type serviceDef struct {
	id           string
	controlPlane bool          // etcd and trustd run on control planes only
	waiting      string        // the service's start conditions, "" when it has none
	running      string        // what its runner reports once started
	healthCheck  bool          // false: health "?" (unknown)
	ago          time.Duration // when it started, before the node's API came up
}

// nodeServices is the list machined reports, sorted by ID as it sorts them.
var nodeServices = []serviceDef{
	{id: "apid", waiting: `service "containerd" to be "up", api certificates`, running: containerTask("apid", 1388), healthCheck: true, ago: 24 * time.Second},
	{id: "auditd", running: "Service started as goroutine", healthCheck: true, ago: 28 * time.Second},
	{id: "containerd", running: process(1021, "/bin/containerd", "--address", constants.SystemContainerdAddress, "--state", constants.SystemRunPath+"/containerd", "--root", constants.SystemVarPath+"/lib/containerd"), healthCheck: true, ago: 27 * time.Second},
	{id: "cri", waiting: "network", running: process(1490, "/bin/containerd", "--address", constants.CRIContainerdAddress, "--config", constants.CRIContainerdConfig), healthCheck: true, ago: 21 * time.Second},
	{id: "dashboard", waiting: `service "machined" to be "up", file "` + constants.MachineSocketPath + `" to exist`, running: process(1030, "/sbin/dashboard"), ago: 27 * time.Second},
	{id: "etcd", controlPlane: true, waiting: `service "cri" to be "up", time sync, network, etcd spec`, running: containerTask("etcd", 1563), healthCheck: true, ago: 18 * time.Second},
	{id: "kubelet", waiting: `service "cri" to be "up", time sync, network`, running: containerTask("kubelet", 1612), healthCheck: true, ago: 15 * time.Second},
	{id: "machined", running: "Service started as goroutine", healthCheck: true, ago: 29 * time.Second},
	{id: "syslogd", waiting: `service "machined" to be "up"`, running: "Service started as goroutine", healthCheck: true, ago: 28 * time.Second},
	{id: "trustd", controlPlane: true, waiting: `service "containerd" to be "up", time sync, network`, running: containerTask("trustd", 1405), healthCheck: true, ago: 22 * time.Second},
	{id: "udevd", running: process(1012, "/sbin/systemd-udevd", "--resolve-names=never"), healthCheck: true, ago: 28 * time.Second},
}

// containerTask is the containerd runner's start message.
func containerTask(id string, pid int) string {
	return fmt.Sprintf("Started task %s (PID %d) for container %s", id, pid, id)
}

// process is the process runner's start message.
func process(pid int, args ...string) string {
	return fmt.Sprintf("Process Process(%q) started with PID %d", args, pid)
}

// etcdDownMessage is what machined's etcd health check (a quorum read through a local
// client, 15 s timeout) fails with when the local etcd does not answer.
const etcdDownMessage = "context deadline exceeded"

// serviceEvent is one entry of a service's event history.
type serviceEvent struct {
	state, msg string
	at         time.Time
}

// etcdHealthLog records the etcd health changes the emulator has seen on a node.
type etcdHealthLog struct {
	mu     sync.Mutex
	down   bool // as last seen; etcd is healthy at boot
	events []serviceEvent
}

// upTime is when the node showed itself up in its current boot (boot.go).
func (m *Machined) upTime() time.Time {
	at, _ := m.boot()

	return at.Add(kernelToUp)
}

// etcdUp reports whether the node's etcd answers: healthy and not rebooting (the
// model), or its real member's process runs (ClusterOptions.Etcd).
func (m *Machined) etcdUp() bool {
	if m.etcd != nil {
		return m.etcd.MemberRunning()
	}

	return m.typ == machinetype.TypeControlPlane && m.EtcdHealthy() && !m.rebooting.Load()
}

// observeEtcdHealth records a change of the node's etcd health since last seen, as
// machined's service runner does when a health check flips (event and log line).
func (m *Machined) observeEtcdHealth() []serviceEvent {
	if m.typ != machinetype.TypeControlPlane || m.etcd != nil {
		return nil
	}

	h := &m.machine.etcdHealth

	h.mu.Lock()
	defer h.mu.Unlock()

	if down := !m.EtcdHealthy(); down != h.down {
		h.down = down

		msg := "Health check successful"
		if down {
			msg = "Health check failed: " + etcdDownMessage
		}

		h.events = append(h.events, serviceEvent{state: "Running", msg: msg, at: time.Now()})
		m.logf("service[etcd](Running): %s", msg)
	}

	return slices.Clone(h.events)
}

// events is the boot history of a service, oldest first.
func (d serviceDef) events(up time.Time) []serviceEvent {
	start := up.Add(-d.ago)

	evs := []serviceEvent{{"Starting", "Starting service", start.Add(-3 * time.Second)}}

	if d.waiting != "" {
		evs = append(evs, serviceEvent{"Waiting", "Waiting for " + d.waiting, start.Add(-3 * time.Second)})
	}

	evs = append(evs,
		serviceEvent{"Preparing", "Running pre state", start.Add(-1500 * time.Millisecond)},
		serviceEvent{"Preparing", "Creating service runner", start.Add(-time.Second)},
		serviceEvent{"Running", d.running, start},
	)

	if d.healthCheck {
		evs = append(evs, serviceEvent{"Running", "Health check successful", start.Add(time.Second)})
	}

	return evs
}

func (m *Machined) services() []serviceDef {
	var out []serviceDef

	for _, d := range nodeServices {
		if !d.controlPlane || m.typ == machinetype.TypeControlPlane {
			out = append(out, d)
		}
	}

	return out
}

// ServiceList implements machine.MachineServiceServer.
func (s *machineService) ServiceList(context.Context, *emptypb.Empty) (*machine.ServiceListResponse, error) {
	m := s.m
	up := m.upTime()
	etcdEvents := m.observeEtcdHealth()

	var list []*machine.ServiceInfo

	for _, d := range m.services() {
		if d.id == "etcd" && m.etcd != nil {
			list = append(list, m.etcd.Info())

			continue
		}

		evs := d.events(up)
		if d.id == "etcd" {
			evs = append(evs, etcdEvents...)
		}

		info := &machine.ServiceInfo{
			Id:     d.id,
			State:  "Running",
			Events: &machine.ServiceEvents{},
			Health: &machine.ServiceHealth{Unknown: true, LastChange: timestamppb.New(time.Time{})},
		}

		for _, e := range evs {
			info.Events.Events = append(info.Events.Events, &machine.ServiceEvent{Msg: e.msg, State: e.state, Ts: timestamppb.New(e.at)})

			if strings.HasPrefix(e.msg, "Health check ") {
				info.Health = &machine.ServiceHealth{Healthy: e.msg == "Health check successful", LastChange: timestamppb.New(e.at)}

				if !info.Health.Healthy {
					info.Health.LastMessage = etcdDownMessage
				}
			}
		}

		list = append(list, info)
	}

	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Services: list}}}, nil
}

// etcdLeader returns the model etcd's members and leader (nil without a quorum of
// members up).
func (m *Machined) etcdLeader() ([]*etcdModelMember, *etcdModelMember) {
	return m.opts.EtcdModel.view()
}

// waitLocalEtcd blocks while the node's etcd is down, as etcd's client does
// (WaitForReady): until it comes back or the caller gives up.
func (m *Machined) waitLocalEtcd(ctx context.Context) error {
	if m.etcd != nil {
		return nil // a real member: etcd's own client waits
	}

	return m.waitUntil(ctx, m.etcdUp)
}

// waitUntil blocks until up holds, the caller gives up or the node shuts down.
func (m *Machined) waitUntil(ctx context.Context, up func() bool) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()

	for !up() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.ctx.Done():
			return m.ctx.Err()
		case <-t.C:
		}
	}

	return nil
}

// EtcdMemberList implements machine.MachineServiceServer.
func (s *machineService) EtcdMemberList(ctx context.Context, in *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	m := s.m

	if err := m.checkControlPlane("member list"); err != nil {
		return nil, err
	}

	m.observeEtcdHealth()

	if in.QueryLocal {
		if err := m.waitLocalEtcd(ctx); err != nil {
			return nil, err
		}
	} else if err := m.waitAnyEtcd(ctx); err != nil {
		return nil, err
	}

	if m.realEtcd() {
		return m.realEtcdMembers(ctx, in.QueryLocal)
	}

	members, leader := m.etcdLeader()
	if leader == nil {
		// etcd's rpctypes.ErrNoLeader reaches the caller as an error without a gRPC status
		return nil, status.Error(codes.Unknown, "etcdserver: no leader")
	}

	slices.SortFunc(members, func(a, b *etcdModelMember) int { return cmp.Compare(a.id, b.id) })

	resp := &machine.EtcdMembers{}

	for _, mm := range members {
		resp.LegacyMembers = append(resp.LegacyMembers, mm.name)
		resp.Members = append(resp.Members, &machine.EtcdMember{
			Id:         mm.id,
			Hostname:   mm.name,
			PeerUrls:   []string{fmt.Sprintf("https://%s:%d", mm.ip, constants.EtcdPeerPort)},
			ClientUrls: []string{fmt.Sprintf("https://%s:%d", mm.ip, constants.EtcdClientPort)},
		})
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{resp}}, nil
}

// waitAnyEtcd blocks while no control plane's etcd answers (the client is given every
// control-plane endpoint and picks one that is up).
func (m *Machined) waitAnyEtcd(ctx context.Context) error {
	if m.etcd != nil {
		return nil // real members: etcd's own client waits
	}

	return m.waitUntil(ctx, m.opts.EtcdModel.anyUp)
}

// EtcdStatus implements machine.MachineServiceServer.
func (s *machineService) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	m := s.m

	if err := m.checkControlPlane("etcd status"); err != nil {
		return nil, err
	}

	m.observeEtcdHealth()

	if err := m.waitLocalEtcd(ctx); err != nil {
		return nil, fmt.Errorf("failed to query etcd status: %w", err)
	}

	if m.realEtcd() {
		return m.realEtcdStatus(ctx)
	}

	id := m.etcdModel.id
	members, leader := m.etcdLeader()

	st := &machine.EtcdMemberStatus{
		MemberId:        id,
		ProtocolVersion: m.etcdVersion(),
		StorageVersion:  "3.6.0",
		// a small cluster's bbolt file, about 60% in use
		DbSize:      int64(20<<20 + (id%1024)*4096), //nolint:gosec
		DbSizeInUse: int64(12<<20 + (id%512)*4096),  //nolint:gosec
	}

	// the raft log grows as kube-apiserver writes (leases, events)
	st.RaftIndex = 4096 + uint64(time.Since(m.upTime())/time.Second)*3 //nolint:gosec
	st.RaftAppliedIndex = st.RaftIndex
	st.RaftTerm = 2

	if leader == nil {
		st.Errors = []string{"etcdserver: no leader"}
	} else {
		st.Leader = leader.id
		st.RaftTerm += uint64(slices.Index(members, leader)) //nolint:gosec // each new leader takes a new term
	}

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: st}}}, nil
}

// etcdVersion is the version of the etcd image in the running config, without the "v".
func (m *Machined) etcdVersion() string {
	img := m.currentConfig().prov.Cluster().Etcd().Image()
	if i := strings.LastIndex(img, ":"); i >= 0 && strings.HasPrefix(img[i+1:], "v") {
		return strings.TrimPrefix(img[i+1:], "v")
	}

	return strings.TrimPrefix(constants.DefaultEtcdVersion, "v")
}

// kmsgLine formats a kernel log record as machined's Dmesg sends it.
func kmsgLine(facility, priority string, at time.Time, msg string) []byte {
	return fmt.Appendf(nil, "%s: %7s: [%s]: %s\n", facility, priority, at.UTC().Format(time.RFC3339Nano), msg)
}

// bootKmsg is the kernel log of the node's boot: kernel lines, then machined's
// service lines (machined logs every service event).
func (m *Machined) bootKmsg() [][]byte {
	up := m.upTime()
	boot := up.Add(-kernelToUp)

	kernel := []struct {
		after         time.Duration
		prio, message string
	}{
		{0, "notice", "Linux version " + constants.DefaultKernelVersion + " (@buildkitsandbox) (gcc (GCC) 14.2.0, GNU ld (GNU Binutils) 2.44) #1 SMP PREEMPT_DYNAMIC"},
		{0, "info", "Command line: talos.platform=metal console=ttyS0 console=tty0 init_on_alloc=1 slab_nomerge pti=on consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on selinux=1 module.sig_enforce=1"},
		{120 * time.Millisecond, "info", "Memory: 7993328K/8388088K available"},
		{900 * time.Millisecond, "info", "NET: Registered PF_INET6 protocol family"},
		{1300 * time.Millisecond, "notice", "Run /init as init process"},
		{2 * time.Second, "info", "XFS (sda5): Mounting V5 Filesystem"},
		{2100 * time.Millisecond, "info", "XFS (sda6): Ending clean mount"},
	}

	var lines [][]byte

	for _, k := range kernel {
		lines = append(lines, kmsgLine("kern", k.prio, boot.Add(k.after), k.message))
	}

	type bootEvent struct {
		id string
		serviceEvent
	}

	var evs []bootEvent

	for _, d := range m.services() {
		for _, e := range d.events(up) {
			evs = append(evs, bootEvent{d.id, e})
		}
	}

	slices.SortStableFunc(evs, func(a, b bootEvent) int { return a.at.Compare(b.at) })

	for _, e := range evs {
		lines = append(lines, kmsgLine("user", "warning", e.at, fmt.Sprintf("[talos] service[%s](%s): %s", e.id, e.state, e.msg)))
	}

	return lines
}

// machinedKmsg turns a line of machined's log ("<RFC3339 time> [talos] ...") into a kernel log record.
func machinedKmsg(line []byte) []byte {
	text := strings.TrimRight(string(line), "\n")

	ts, msg, ok := strings.Cut(text, " ")
	at, err := time.Parse(time.RFC3339Nano, ts)

	if !ok || err != nil {
		at, msg = time.Now(), text
	}

	return kmsgLine("user", "warning", at, msg)
}

// Dmesg implements machine.MachineServiceServer.
func (s *machineService) Dmesg(req *machine.DmesgRequest, srv machine.MachineService_DmesgServer) error {
	m := s.m
	ctx := srv.Context()

	m.observeEtcdHealth()

	send := func(b []byte) error { return srv.Send(&common.Data{Bytes: b}) }

	tail := -1 // every line logged so far

	if req.Tail {
		tail = 0 // only what comes next
	} else {
		for _, l := range m.bootKmsg() {
			if err := send(l); err != nil {
				return err
			}
		}
	}

	// machined sends one record per message
	return m.host.Logs.Open(host.MachinedLog).Stream(ctx, tail, req.Follow, func(chunk []byte) error {
		for line := range strings.Lines(string(chunk)) {
			if err := send(machinedKmsg([]byte(line))); err != nil {
				return err
			}
		}

		return nil
	})
}

// publishServices writes machined's COSI Service resources (namespace
// runtime, Services.v1alpha1.talos.dev), which any role may read and which
// the static pod controller watches for etcd: Running, Healthy, or Unknown
// for a service without a health check. etcd follows the node's etcd health.
func (m *Machined) publishServices() {
	up := m.etcdUp()
	for _, d := range m.services() {
		if d.id == "etcd" && m.etcd != nil {
			continue // the real service writes its own (etcdservice.go)
		}

		spec := v1alpha1.ServiceSpec{Running: true, Healthy: d.healthCheck, Unknown: !d.healthCheck}
		if d.id == "etcd" {
			spec.Healthy = up
		}
		if err := m.st.Modify(m.ctx, v1alpha1.NewService(d.id), func(r resource.Resource) error {
			*r.(*v1alpha1.Service).TypedSpec() = spec

			return nil
		}); err != nil && m.ctx.Err() == nil {
			m.logf("writing Service %s: %v", d.id, err)
		}
	}

	m.publishMachineStatus()
}
