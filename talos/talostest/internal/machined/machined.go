// Package machined is an emulated Talos node's machined: the machine and cluster API
// services (registered with the node's apid), the COSI state and its access filter, the
// machine config (apply, try and its rollback, reboot), the controllers that follow it
// (APIServerConfig, the kube-apiserver static pod, the Service resources, MachineStatus),
// the boot and the reset sequence, and the services it runs: its etcd service and the
// kubelet, each a part of its own that it drives as Talos's service runner does. It is
// handed its node's host (name, address, state, bus, logs, files, clock) and those
// services, never the node or the cluster: what it does to another part goes through
// the state or the bus, or through the service's own small interface below.
package machined

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdclient"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// API is the node's apid, as machined uses it: it registers its services there, takes
// the API away and brings it back (a reboot, a reset), and calls the nodes through it
// (the health check).
type API interface {
	Register(desc *grpc.ServiceDesc, impl any)
	Up() bool
	Start() error
	Stop()
	StopGracefully()
	Call(ctx context.Context, node, method string, req, resp proto.Message) error
}

// EtcdService is the node's etcd service with a real member (internal/etcdsvc), as
// machined's sequences and API calls drive it.
type EtcdService interface {
	Start()                                                           // a boot: a run with what the data directory holds
	Bootstrap(ctx context.Context, recover, skipHashCheck bool) error // BootstrapEtcd
	Stop(ctx context.Context) error
	Forget() // a reboot: a new machined forgets the service's history
	InRun() bool
	MemberRunning() bool
	Info() *machine.ServiceInfo
}

// Kubelet is the node's kubelet service and the container runtime under it
// (internal/kubelet).
type Kubelet interface {
	Start()
	Stop()
	Restart() error // Talos's APIRestart: stopped (returned), then started in the background
	StopAllPods()   // the CRI stops and removes every pod sandbox
	Containers(namespace string) []*machine.ContainerInfo
	ContainerLog(id string) (*host.Log, error)
}

// EtcdAccess is how machined's etcd client reaches one member.
type EtcdAccess = etcdclient.Access

// EtcdMembers is how machined's etcd client finds the members: the node's own (its
// local client) and every control plane's (NewClientFromControlPlaneIPs). Nil Local:
// no member is reachable from this node.
type EtcdMembers struct {
	Local func() (EtcdAccess, error)
	All   func() []EtcdAccess
}

// Options describe the node machined runs.
type Options struct {
	Type         machinetype.Type
	TalosVersion string
	Config       []byte   // the initial config, running and on disk
	KnownKinds   []string // document kinds a newer Talos knows and this machinery does not

	// Services machined runs besides its own; nil: the node runs none (a worker's
	// kubelet, a node without ClusterOptions.Etcd).
	Etcd    EtcdService
	Kubelet Kubelet

	// EtcdMembers is how the etcd calls reach real members (Etcd's, or the members the
	// cluster was given); EtcdModel the cluster's etcd when none runs on the nodes.
	EtcdMembers EtcdMembers
	EtcdModel   *EtcdModel

	// BaseArgs returns the kube-apiserver flags rendered before the config's extraArgs.
	BaseArgs func(spec *k8s.APIServerConfigSpec) map[string]string
	// EtcdSnapshot streams an etcd snapshot for EtcdSnapshot; nil: the member's.
	EtcdSnapshot func(ctx context.Context, w io.Writer) error
	// RebootDuration is how long the API is away after an apply in REBOOT mode.
	RebootDuration time.Duration
	// ApplyHook runs inside ApplyConfiguration while the apply lock is held (tests).
	ApplyHook func()
}

// Machined is one node's machined.
type Machined struct {
	host         *host.Host
	api          API
	opts         Options
	typ          machinetype.Type
	talosVersion string
	st           state.State
	ctx          context.Context //nolint:containedctx // the node's life (host.Life)

	etcd      EtcdService // nil without a real member
	kubelet   Kubelet     // nil on a worker
	etcdModel *etcdModelMember

	machine    *machineService
	clusterSvc *clusterService

	applyMu sync.Mutex // held for the whole of an ApplyConfiguration

	cfgMu            sync.Mutex
	running          *nodeConfig
	persistent       *nodeConfig
	rollbackTimer    *time.Timer
	rollbackDeadline time.Time
	rendered         *ContainerConfig
	renderedVersion  string // the APIServerConfig version it was rendered from
	renderedSecrets  string // the encryption configuration it was rendered with (secretsVersion)
	renderErr        error
	renderPending    bool // a render waits for etcd to be healthy

	statusMu sync.Mutex // one MachineStatus computation at a time

	rebooting atomic.Bool
	etcdDown  atomic.Bool // SetEtcdHealthy(false)

	background sync.WaitGroup // a reset and the boot after it

	bootMu sync.Mutex
	bootAt time.Time // when the kernel of the current boot started
	bootID string    // /proc/sys/kernel/random/boot_id, new at every boot
}

// New starts the node's machined on its host: the state's static resources, the config
// running and on disk, its controllers, and its API services registered with apid.
func New(ctx context.Context, h *host.Host, api API, opts Options) (*Machined, error) {
	m := &Machined{
		host: h, api: api, opts: opts, typ: opts.Type, talosVersion: opts.TalosVersion,
		st: h.State, ctx: h.Life, etcd: opts.Etcd, kubelet: opts.Kubelet,
		bootAt: time.Now().Add(-kernelToUp), bootID: uuid.NewString(),
	}

	if _, _, err := parseTalosVersion(m.talosVersion); err != nil {
		return nil, err
	}

	cfg, err := m.parseConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("initial config refused: %w", err)
	}

	if cfg.prov.Machine().Type() != m.typ {
		return nil, fmt.Errorf("initial config is for machine type %s, node is %s", cfg.prov.Machine().Type(), m.typ)
	}

	h.Logs.Open("kubelet") // every node runs a kubelet service, a worker too

	m.machine = &machineService{m: m}
	m.clusterSvc = &clusterService{m: m}
	api.Register(&machine.MachineService_ServiceDesc, m.machine)
	api.Register(&clusterapi.ClusterService_ServiceDesc, m.clusterSvc)
	api.Register(&cosiv1alpha1.State_ServiceDesc, server.NewState(state.WrapCore(state.Filter(m.st, accessPolicy(m.st)))))

	if err = m.publishStatic(ctx, cfg); err != nil {
		return nil, err
	}

	if m.etcd != nil {
		if err = os.MkdirAll(h.Path(constants.EtcdDataPath), 0o700); err != nil { // EPHEMERAL mounted
			return nil, err
		}
	} else if opts.EtcdModel != nil && m.typ == machinetype.TypeControlPlane {
		m.etcdModel = opts.EtcdModel.join(h.Name, h.IP, m.etcdUp)
	}

	m.publishServices()

	if err = m.runControllers(); err != nil {
		return nil, err
	}

	m.cfgMu.Lock()
	m.persistent = cfg
	m.setPersistentLocked(cfg)
	m.setRunningLocked(cfg)
	m.cfgMu.Unlock()

	return m, nil
}

// Close stops machined's timers and waits for a reset or a boot in progress; the
// node's life (host.Life) has ended.
func (m *Machined) Close() {
	m.background.Wait()

	m.cfgMu.Lock()
	if m.rollbackTimer != nil {
		m.rollbackTimer.Stop()
		m.rollbackTimer = nil
	}
	m.cfgMu.Unlock()
}

// NewState builds the node's resource store the way machined does (cosi.go).
func NewState(ctx context.Context) (state.State, error) { return newNodeState(ctx) }

type ContainerConfig = staticpod.ContainerConfig
