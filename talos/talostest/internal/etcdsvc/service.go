// Package etcdsvc is machined's etcd service on an emulated control plane
// (ClusterOptions.Etcd), around a real etcd member that runs as a process of its own
// (member.go): one per node, stopped, restarted, killed and wiped on its own, its data
// in the node's emulated EPHEMERAL (/var/lib/etcd). A member that panics or exits is a
// service that restarts it 5 s later; nothing else goes down with it. Sources:
// siderolabs/talos v1.13.8, internal/app/machined/pkg/system/services/etcd.go (PreFunc:
// recover from an uploaded snapshot, bootstrap, or join as a learner and be promoted;
// health), service_runner.go (states and events), runner/restart (a member that exits
// restarts every 5 s, forever, with the arguments its PreFunc computed),
// controllers/v1alpha1/service.go (the Service resource exists only while the service
// is Running) and controllers/etcd/member.go (the local Member resource, only while
// Running and healthy).
//
// What the member runs with is what machined gives etcd: its name (the hostname),
// data-dir, client and peer URLs on the node's address with client-certificate auth
// (the node's EtcdSecrets, from cluster.etcd.ca), watch progress notifications every
// 5 s; --initial-cluster and --initial-cluster-state only when the data directory is
// empty (bootstrap: the node alone, "new"; otherwise the members of the cluster it
// joined, "existing"). The first boot of a cluster is the one exception: the members
// are formed together ("new", every control plane), as if bootstrapped and joined
// before the emulator started.
//
// The service is handed its node's host and never the node: it writes the etcd Service
// and local Member resources into the node's state, publishes its state changes on the
// node's bus and logs in machined's log; machined's static pod controller follows the
// Service resource.
package etcdsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdclient"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"
)

// Options make every control plane run machined's etcd service with a real member.
type Options struct {
	// ClientPort and PeerPort are each node's etcd ports (Talos: 2379 and 2380); 0
	// picks a free one per node. Each is held for the node's life (PortReservation).
	ClientPort, PeerPort int
	// QuotaBytes is each member's --quota-backend-bytes; 0: etcd's default, 2 GiB, as on Talos.
	QuotaBytes int64
}

// Runtime is what the service is given of machined beside its host, as Talos hands a
// service its runtime.
type Runtime struct {
	// Ready waits for the service's conditions (cri up, time sync, network): the boot.
	Ready func(context.Context) error
	// Peers are the client URLs of every control plane's member, this node's among
	// them, as machined finds them (NewClientFromControlPlaneIPs).
	Peers func() []string
}

// The service states machined reports (internal/app/machined/pkg/system/events).
const (
	ServiceStarting  = "Starting"
	ServiceWaiting   = "Waiting"
	ServicePreparing = "Preparing"
	ServiceRunning   = "Running"
	ServiceStopping  = "Stopping"
	ServiceFinished  = "Finished"
	ServiceFailed    = "Failed"
)

// Times of machined's etcd service (services/etcd.go, runner/restart, constants).
const (
	etcdHealthDelay   = 5 * time.Second  // HealthSettings.InitialDelay
	etcdHealthPeriod  = 20 * time.Second // HealthSettings.Period
	etcdHealthTimeout = 15 * time.Second // HealthSettings.Timeout, and QuorumCheckTimeout
	etcdRestartDelay  = 5 * time.Second  // restart.DefaultOptions RestartInterval
	etcdJoinRetry     = 3 * time.Second  // buildInitialCluster: retry.WithUnits
	etcdJoinTimeout   = 30 * time.Minute // constants.EtcdJoinTimeout
	etcdJoinNag       = 30 * time.Second // how often it asks for a bootstrap
	etcdPromoteRetry  = 15 * time.Second // promoteMember: retry.WithUnits
	etcdPromoteFor    = 10 * time.Minute // promoteMember: retry.Constant
	etcdLocalMemberID = 3 * time.Minute  // GetLocalMemberID's wait for the Member resource
)

// Mode is machined's services.Etcd: how the next run starts a member whose data
// directory is empty.
type Mode struct {
	Bootstrap, Recover, SkipHashCheck bool
	// Formation is the cluster's first boot (every control plane's member, "new"):
	// --initial-cluster as NAME=PEER_URL,...
	Formation string
}

// State is the node's etcd service as machined reports it.
type State struct {
	State     string // ServiceRunning, ServicePreparing, ...
	LastEvent string // the message of the last event ("Running pre state", ...)
	// Health is known once the first check ran in this run; Healthy is its outcome.
	HealthKnown, Healthy bool
	HealthMessage        string
	// Member is the member's ID once it is healthy (the local Member resource), else 0.
	Member uint64
}

// WaitingForBootstrap tells whether etcd waits to join or to be bootstrapped: service
// Preparing, its pre state running with an empty data directory (talosctl's "wait for
// etcd to be in Preparing state" of the disaster-recovery guide).
func (s State) WaitingForBootstrap() bool {
	return s.State == ServicePreparing && s.LastEvent == "Running pre state"
}

// event is one entry of the service's event history.
type event struct {
	state, msg string
	at         time.Time
}

type serviceHealth struct {
	known, healthy bool
	message        string
	lastChange     time.Time
}

// Service is one node's etcd service and member.
type Service struct {
	host               *host.Host
	rt                 Runtime
	ports              []*ports.Reservation
	clientURL, peerURL string
	quota              int64
	files              etcdFiles
	log                *host.Log // etcd's own log (talosctl logs etcd)

	resMu sync.Mutex // held while the resources are written

	mu       sync.Mutex
	state    string
	events   []event // the last 64, as machined keeps
	health   serviceHealth
	memberID uint64 // set while Running and healthy (the Member resource)
	run      *etcdRun
	memberMu sync.Mutex // held while a member starts, or dies and its disk is changed
	member   *member    // the member's process while it runs
	changed  chan struct{}
}

// etcdRun is one run of the service (machined's runner goroutine): from Starting to
// Finished or Failed.
type etcdRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

type etcdFiles struct{ ca, cert, key, peerCert, peerKey string }

// New makes the node's etcd service, not started, its ports held.
func New(h *host.Host, opts Options, rt Runtime) (*Service, error) {
	s := &Service{host: h, rt: rt, quota: opts.QuotaBytes, log: h.Logs.Open("etcd"), changed: make(chan struct{}), state: "Initialized"}

	for _, port := range []int{opts.ClientPort, opts.PeerPort} {
		r, err := ports.Reserve(h.IP, port)
		if err != nil {
			s.Close()

			return nil, err
		}

		s.ports = append(s.ports, r)
	}

	s.clientURL, s.peerURL = "https://"+s.ports[0].Addr(), "https://"+s.ports[1].Addr()

	return s, nil
}

// client makes machined's client of the members at endpoints.
func (s *Service) client(ctx context.Context, endpoints ...string) (*clientv3.Client, error) {
	tlsConf, err := etcdclient.AdminTLS(ctx, s.host.State)
	if err != nil {
		return nil, err
	}

	return etcdclient.New(ctx, endpoints, tlsConf)
}

func (s *Service) dataDir() string { return s.host.Path(constants.EtcdDataPath) }

// Close stops the service and gives its ports back (cluster close).
func (s *Service) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s.Stop(ctx) //nolint:errcheck

	for _, r := range s.ports {
		r.Close() //nolint:errcheck
	}
}

// State is the service as machined reports it.
func (s *Service) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()

	st := State{State: s.state, HealthKnown: s.health.known, Healthy: s.health.healthy, HealthMessage: s.health.message, Member: s.memberID}
	if len(s.events) > 0 {
		st.LastEvent = s.events[len(s.events)-1].msg
	}

	return st
}

// Info is the service's entry in ServiceList.
func (s *Service) Info() *machine.ServiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()

	info := &machine.ServiceInfo{Id: "etcd", State: s.state, Events: &machine.ServiceEvents{}, Health: s.healthProtoLocked()}

	for _, e := range s.events {
		info.Events.Events = append(info.Events.Events, &machine.ServiceEvent{Msg: e.msg, State: e.state, Ts: timestamppb.New(e.at)})
	}

	return info
}

func (s *Service) healthProtoLocked() *machine.ServiceHealth {
	return &machine.ServiceHealth{
		Unknown: !s.health.known, Healthy: s.health.known && s.health.healthy,
		LastMessage: s.health.message, LastChange: timestamppb.New(s.health.lastChange),
	}
}

// HealthyRunning tells whether the service runs and its last health check passed.
func (s *Service) HealthyRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.state == ServiceRunning && s.health.known && s.health.healthy
}

// setState records a state change as machined's UpdateState does: an event, a log
// line, a ServiceStateEvent, and the Service resource (only while Running).
func (s *Service) setState(state, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)

	s.mu.Lock()
	s.state = state
	s.pushLocked(event{state: state, msg: msg, at: time.Now()})
	ev := s.stateEventLocked(msg)
	s.mu.Unlock()

	s.host.Logf("service[etcd](%s): %s", state, msg)
	s.host.Events.Publish("", ev)
	s.publish()
}

func (s *Service) pushLocked(e event) {
	s.events = append(s.events, e)
	if len(s.events) > 64 {
		s.events = s.events[len(s.events)-64:]
	}

	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Service) stateEventLocked(msg string) *machine.ServiceStateEvent {
	action := map[string]machine.ServiceStateEvent_Action{
		ServicePreparing: machine.ServiceStateEvent_PREPARING, ServiceWaiting: machine.ServiceStateEvent_WAITING,
		ServiceRunning: machine.ServiceStateEvent_RUNNING, ServiceStopping: machine.ServiceStateEvent_STOPPING,
		ServiceFinished: machine.ServiceStateEvent_FINISHED, ServiceFailed: machine.ServiceStateEvent_FAILED,
		ServiceStarting: machine.ServiceStateEvent_STARTING,
	}[s.state]

	return &machine.ServiceStateEvent{Service: "etcd", Action: action, Message: msg, Health: s.healthProtoLocked()}
}

// setHealth records a health check's outcome; a change while Running is an event.
func (s *Service) setHealth(healthy bool, message string, memberID uint64) {
	s.mu.Lock()

	changed := !s.health.known || s.health.healthy != healthy
	if changed {
		s.health.lastChange = time.Now()
	}

	s.health.known, s.health.healthy, s.health.message = true, healthy, message
	s.memberID = 0

	if healthy && s.state == ServiceRunning {
		s.memberID = memberID
	}

	var ev *machine.ServiceStateEvent

	if changed && s.state == ServiceRunning {
		msg := "Health check successful"
		if !healthy {
			msg = "Health check failed: " + message
		}

		s.pushLocked(event{state: s.state, msg: msg, at: time.Now()})
		ev = s.stateEventLocked(msg)
	}
	s.mu.Unlock()

	if ev != nil {
		s.host.Logf("service[etcd](%s): %s", ServiceRunning, ev.Message)
		s.host.Events.Publish("", ev)
	}

	s.publish()
}

// Forget drops the service's history, as a reboot does (a new machined).
func (s *Service) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.events, s.state, s.health, s.memberID = nil, "Initialized", serviceHealth{}, 0
}

// resetHealth forgets the health, as a new run does (health.State.Init).
func (s *Service) resetHealth() {
	s.mu.Lock()
	s.health = serviceHealth{}
	s.memberID = 0
	s.mu.Unlock()
}

// publish writes what follows the service into the node's state: the Service
// resource while it runs (machined's ServiceController) and the local Member while it
// runs healthy (the etcd MemberController). machined's static pod controller watches
// the first: it renders the control plane's pods only while etcd runs healthy, and
// tears them down while it does not run.
func (s *Service) publish() {
	s.resMu.Lock() // one snapshot written at a time, in order
	defer s.resMu.Unlock()

	ctx, st := s.host.Life, s.host.State

	s.mu.Lock()
	spec := v1alpha1.ServiceSpec{Running: true, Healthy: s.health.known && s.health.healthy, Unknown: !s.health.known}
	running, memberID := s.state == ServiceRunning, s.memberID
	s.mu.Unlock()

	svc := v1alpha1.NewService("etcd")

	if running {
		if err := st.Modify(ctx, svc, func(r resource.Resource) error {
			*r.(*v1alpha1.Service).TypedSpec() = spec

			return nil
		}); err != nil && ctx.Err() == nil {
			s.host.Logf("writing Service etcd: %v", err)
		}
	} else if err := st.Destroy(ctx, svc.Metadata()); err != nil && !state.IsNotFoundError(err) && ctx.Err() == nil {
		s.host.Logf("removing Service etcd: %v", err)
	}

	local := etcdres.NewMember(etcdres.NamespaceName, etcdres.LocalMemberID)

	if memberID != 0 {
		if err := st.Modify(ctx, local, func(r resource.Resource) error {
			r.(*etcdres.Member).TypedSpec().MemberID = etcdres.FormatMemberID(memberID)

			return nil
		}); err != nil && ctx.Err() == nil {
			s.host.Logf("writing etcd Member: %v", err)
		}
	} else if err := st.Destroy(ctx, local.Metadata()); err != nil && !state.IsNotFoundError(err) && ctx.Err() == nil {
		s.host.Logf("removing etcd Member: %v", err)
	}
}

// Wait blocks until cond holds for the service, ctx ends or the node shuts down.
func (s *Service) Wait(ctx context.Context, cond func(State) bool) (State, error) {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()

		st := s.State()
		if cond(st) {
			return st, nil
		}

		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-s.host.Life.Done():
			return st, s.host.Life.Err()
		case <-changed:
		}
	}
}

// Start starts a run of the service with what its data directory holds (a boot),
// unless one is in progress, and returns once it is Starting (machined's Start).
func (s *Service) Start() { s.start(Mode{}) }

// Form starts the cluster's first run of the service: the members of initialCluster
// (NAME=PEER_URL,...) formed together, as if bootstrapped and joined before.
func (s *Service) Form(initialCluster string) { s.start(Mode{Formation: initialCluster}) }

func (s *Service) start(mode Mode) {
	s.mu.Lock()
	if s.run != nil {
		s.mu.Unlock()

		return
	}

	ctx, cancel := context.WithCancel(s.host.Life)
	r := &etcdRun{cancel: cancel, done: make(chan struct{})}
	s.run = r
	s.mu.Unlock()

	s.resetHealth()
	s.setState(ServiceStarting, "Starting service")

	go func() {
		defer close(r.done)
		defer cancel()

		err := s.runOnce(ctx, mode)

		s.mu.Lock()
		s.run = nil
		s.mu.Unlock()

		if err != nil {
			msg := err.Error()
			s.setState(ServiceFailed, "%s", strings.ToUpper(msg[:1])+msg[1:])

			return
		}

		s.setState(ServiceFinished, "Service finished successfully")
	}()
}

// Stop ends the run in progress and waits for it (machined's Stop).
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()

	if r == nil {
		return nil
	}

	r.cancel()

	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// InRun tells whether a run is in progress (machined's IsRunning).
func (s *Service) InRun() bool {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.run != nil
}

// runOnce is machined's ServiceRunner.Run for etcd.
func (s *Service) runOnce(ctx context.Context, mode Mode) error {
	s.setState(ServiceWaiting, `Waiting for service "cri" to be "up", time sync, network, etcd spec`)

	if err := s.rt.Ready(ctx); err != nil {
		return nil //nolint:nilerr // stopped before it started: a clean stop
	}

	s.setState(ServicePreparing, "Running pre state")

	cfg, learner, err := s.preFunc(ctx, mode)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}

		return fmt.Errorf("failed to run pre stage: %w", err)
	}

	s.setState(ServicePreparing, "Creating service runner")

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel() // PostFunc: the promotion stops with the run

	if learner != 0 {
		go s.promote(runCtx, learner)
	}

	s.runMember(runCtx, cfg, mode.Formation != "")

	return nil
}

// runMember is the restart runner around the member "container": started with the
// arguments PreFunc computed, restarted 5 s after every exit, until ctx ends. A
// formation's restarts use the arguments of a boot with data (no initial cluster).
func (s *Service) runMember(ctx context.Context, cfg memberConfig, formation bool) {
	for {
		var exit error

		code := 1

		p, err := s.startMember(cfg)
		if err != nil {
			s.host.Logf("starting etcd: %v", err) // containerd could not create the task
		} else {
			if formation {
				cfg, formation = memberConfig{}, false
			}

			if code = s.watchMember(ctx, p); code < 0 {
				return // stopped
			}
		}

		if code == 0 {
			s.setState(ServiceWaiting, "Runner Containerd(etcd) exited without error, going to restart it")
		} else {
			exit = fmt.Errorf("task %q failed: exit code %d (last log %q)", "etcd", code, s.LastLog(1))
			s.setState(ServiceWaiting, "Error running Containerd(etcd), going to restart forever: %v", exit)
		}

		s.setHealth(false, "service not running", 0)

		select {
		case <-ctx.Done():
			s.setState(ServiceStopping, "Aborting restart sequence")

			return
		case <-time.After(s.host.Scaled(etcdRestartDelay)):
		}
	}
}

// startMember starts the member's process with the arguments PreFunc computed; the
// containerd runner reports it running at once, whether etcd then serves or exits.
func (s *Service) startMember(mc memberConfig) (*member, error) {
	s.memberMu.Lock()
	defer s.memberMu.Unlock()

	p, err := startProcess(memberSpec{
		Name: s.host.Name, DataDir: s.dataDir(), ClientURL: s.clientURL, PeerURL: s.peerURL,
		CA: s.files.ca, Cert: s.files.cert, Key: s.files.key, PeerCert: s.files.peerCert, PeerKey: s.files.peerKey,
		QuotaBytes: s.quota, InitialCluster: mc.initialCluster, ClusterState: mc.state,
	}, s.log)
	if err != nil {
		return nil, err
	}

	s.mu.Lock()
	s.member = p
	s.mu.Unlock()

	s.resetHealth()
	s.setState(ServiceRunning, "Started task etcd (PID %d) for container etcd", p.pid())

	return p, nil
}

// memberStopTimeout is how long machined's runner waits for etcd to stop after SIGTERM
// before it kills it.
const memberStopTimeout = 10 * time.Second

// watchMember runs the health checks while the member runs, and returns its exit
// code once it exits (as etcd's main: 0 when the server stopped by itself, as a
// removed member does; 1 when it could not start or a listener failed; 2 when it
// panicked; 137 when killed), -1 when ctx ended and the member was stopped as
// machined stops it (SIGTERM, SIGKILL after memberStopTimeout).
func (s *Service) watchMember(ctx context.Context, p *member) int {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()

	go s.healthLoop(hctx)

	select {
	case <-ctx.Done():
		s.setState(ServiceStopping, "Sending SIGTERM to %s", p)
		p.signal(syscall.SIGTERM)

		select {
		case <-p.done:
		case <-time.After(memberStopTimeout):
			p.signal(syscall.SIGKILL)
			<-p.done
		}

		s.dropMember(p)

		return -1
	case <-p.done:
	}

	cancel()
	s.dropMember(p)

	return p.code
}

func (s *Service) dropMember(p *member) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if s.member == p {
		s.member = nil
	}
}

// LastLog is the last k entries of the member's own log: the lines etcd logs (JSON),
// not a panic's trace after its entry.
func (s *Service) LastLog(k int) string {
	var out []string

	lines := s.log.Lines()
	for i := len(lines) - 1; i >= 0 && len(out) < k; i-- {
		if line := strings.TrimSpace(string(lines[i])); strings.HasPrefix(line, "{") {
			out = append(out, line)
		}
	}

	slices.Reverse(out)

	return strings.Join(out, "\n")
}

// healthLoop is machined's health.Run with the etcd check: after 5 s, then every
// 20 s, a quorum read through the local member (15 s at most).
func (s *Service) healthLoop(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(s.host.Scaled(etcdHealthDelay)):
	}

	t := time.NewTicker(s.host.Scaled(etcdHealthPeriod))
	defer t.Stop()

	for {
		s.CheckHealth(ctx)

		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CheckHealth runs one health check (ValidateQuorum) and records it.
func (s *Service) CheckHealth(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, etcdHealthTimeout)
	defer cancel()

	var memberID uint64

	cli, err := s.client(cctx, s.clientURL)
	if err == nil {
		var resp *clientv3.GetResponse

		resp, err = cli.Get(cctx, "health")
		if errors.Is(err, rpctypes.ErrPermissionDenied) {
			err = nil
		}

		if err == nil {
			memberID = resp.Header.MemberId
		}

		cli.Close() //nolint:errcheck
	}

	if ctx.Err() != nil {
		return // the member stopped meanwhile: no outcome to record
	}

	if err != nil {
		s.setHealth(false, err.Error(), 0)

		return
	}

	s.setHealth(true, "", memberID)
}

// logger writes to etcd's own log, as machined's snapshot restore does (JSON lines).
func (s *Service) logger() *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder

	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(logLines(s.log)), zap.InfoLevel))
}

// killAnd makes the member's process die at once (SIGKILL), then runs then (a change of
// its disk) before the restart runner can start it again, 5 s later.
func (s *Service) killAnd(then func() error) error {
	s.memberMu.Lock()
	defer s.memberMu.Unlock()

	s.mu.Lock()
	p := s.member
	s.mu.Unlock()

	if p == nil {
		return errors.New("etcd is not running on this node")
	}

	p.signal(syscall.SIGKILL)
	<-p.done

	return then()
}

// Kill makes the member's process die (SIGKILL): the service restarts it 5 s later
// with the same arguments, as machined's restart runner does.
func (s *Service) Kill() error { return s.killAnd(func() error { return nil }) }

// DestroyData is a member whose disk is lost: its process dies and its data directory
// is emptied. The service restarts it every 5 s with the arguments its PreFunc
// computed when the data was there: each start fails until the node is reset or
// bootstrapped.
func (s *Service) DestroyData() error {
	return s.killAnd(func() error {
		dir := s.dataDir()

		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}

		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}

		return nil
	})
}

// Bootstrap is machined's BootstrapEtcd: the service stops (a join in progress ends),
// and starts again as a new cluster of this member, restored first from the uploaded
// snapshot with recover. It returns once the new run started.
func (s *Service) Bootstrap(ctx context.Context, recover, skipHashCheck bool) error {
	if err := s.Stop(ctx); err != nil {
		return fmt.Errorf("failed to stop etcd: %w", err)
	}

	s.setState(ServiceFinished, "Bootstrap requested")

	if !dirEmptyOrMissing(s.dataDir()) {
		return errors.New("etcd data directory is not empty")
	}

	s.start(Mode{Bootstrap: true, Recover: recover, SkipHashCheck: skipHashCheck})

	return nil
}

// dirEmptyOrMissing is machined's `os.ReadDir(EtcdDataPath)` check: a missing or
// unreadable directory counts as empty.
func dirEmptyOrMissing(dir string) bool {
	entries, _ := os.ReadDir(dir) //nolint:errcheck

	return len(entries) == 0
}

// ClientURL is the member's client URL (https://IP:port).
func (s *Service) ClientURL() string { return s.clientURL }

// PeerURL is the member's peer URL.
func (s *Service) PeerURL() string { return s.peerURL }

// Log is the member's own log (talosctl logs etcd).
func (s *Service) Log() *host.Log { return s.log }

// MemberRunning tells whether the member's process runs.
func (s *Service) MemberRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()

	return s.member != nil
}
