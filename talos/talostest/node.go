package talostest

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/apid"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdsvc"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/kubelet"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/machined"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"
)

// Node is one emulated Talos node: its Talos API (apid + machined) on IP:port. It
// composes the node's parts and owns none of their state: apid, machined, machined's
// etcd service (ClusterOptions.Etcd) and the kubelet (control planes), each handed the
// node's host and meeting the others in its state and on its bus.
type Node struct {
	Name         string // node name (hostname)
	IP           string
	Addr         string // IP:port of the Talos API
	Type         machinetype.Type
	TalosVersion string

	cluster  *Cluster
	host     *host.Host
	apid     *apid.Server
	machined *machined.Machined
	etcd     *etcdsvc.Service // nil unless ClusterOptions.Etcd, on a control plane
	kubelet  *kubelet.Kubelet // nil on a worker
	cancel   context.CancelFunc
}

func newNode(ctx context.Context, c *Cluster, ip string, typ machinetype.Type, o NodeOptions) (*Node, error) {
	n := &Node{Name: o.Name, IP: ip, Type: typ, TalosVersion: o.TalosVersion, cluster: c}

	if n.TalosVersion == "" {
		n.TalosVersion = DefaultTalosVersion
	}

	st, err := machined.NewState(ctx)
	if err != nil {
		return nil, err
	}

	life, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.host = &host.Host{
		Name: n.Name, IP: ip, State: st, Events: host.NewBus(), Logs: host.NewLogs(),
		Dir: filepath.Join(c.dir, "nodes", ip), TimeScale: c.opts.Kubelet.TimeScale, Life: life,
	}

	// The address is held for the node's life, so that Stop and Start (and a
	// reboot) never lose the port to someone else.
	addr, err := ports.Reserve(ip, c.opts.Port)
	if err != nil {
		return nil, err
	}

	n.apid = apid.New(n.Name, addr, c.apidOf)
	n.Addr = n.apid.Addr()

	if typ == machinetype.TypeControlPlane {
		if c.opts.Etcd != nil {
			rt := etcdsvc.Runtime{Ready: func(ctx context.Context) error { return n.machined.WaitBooted(ctx, "cri") }, Peers: c.etcdEndpoints}
			if n.etcd, err = etcdsvc.New(n.host, *c.opts.Etcd, rt); err != nil {
				return nil, err
			}
		}

		runner := o.Runner
		if runner == nil {
			runner = c.opts.Runner
		}

		n.kubelet = kubelet.New(n.host, runner, c.opts.Kubelet)
	}

	if n.machined, err = machined.New(ctx, n.host, n.apid, n.machinedOptions(o)); err != nil {
		return nil, err
	}

	if n.kubelet != nil && n.etcd == nil {
		n.kubelet.Start() // after the first render: the kubelet starts the pod at once
	}

	tlsConf, err := apid.ServerTLS(c.Secrets.Certs.OS, n.Name, n.certIPs())
	if err != nil {
		return nil, err
	}

	if err := n.apid.Serve(tlsConf); err != nil {
		return nil, err
	}

	return n, nil
}

// machinedOptions are what machined is told of the node: its type, version and
// config, its services, the ways to etcd, and the cluster's hooks bound to the node.
func (n *Node) machinedOptions(o NodeOptions) machined.Options {
	c := n.cluster
	opts := machined.Options{
		Type: n.Type, TalosVersion: n.TalosVersion, Config: o.Config, KnownKinds: o.KnownKinds,
		EtcdMembers: c.etcdMembers(n), EtcdModel: c.etcdModel, RebootDuration: c.opts.RebootDuration,
	}

	if n.etcd != nil {
		opts.Etcd = n.etcd
	}

	if n.kubelet != nil {
		opts.Kubelet = n.kubelet
	}

	baseArgs := c.opts.BaseArgs
	if baseArgs == nil {
		baseArgs = TalosBaseArgs
	}

	opts.BaseArgs = func(spec *k8s.APIServerConfigSpec) map[string]string { return baseArgs(n, spec) }

	if hook := c.opts.EtcdSnapshot; hook != nil {
		opts.EtcdSnapshot = func(ctx context.Context, w io.Writer) error { return hook(ctx, n, w) }
	}

	if hook := c.opts.applyHook; hook != nil {
		opts.ApplyHook = func() { hook(n) }
	}

	return opts
}

// certIPs are the addresses apid's certificate names: the node's, and the IPs among
// the config's certSANs.
func (n *Node) certIPs() []net.IP {
	ips := []net.IP{net.ParseIP(n.IP)}

	for _, san := range n.machined.CertSANs() {
		if ip := net.ParseIP(san); ip != nil && !ip.Equal(ips[0]) {
			ips = append(ips, ip)
		}
	}

	return ips
}

// Stop takes the node's Talos API off the network (connections are refused, and other nodes
// answer Unavailable when asked to forward to it), like an unreachable node. Its
// kube-apiserver keeps running. Start brings the API back.
func (n *Node) Stop() { n.apid.Stop() }

// Start serves the Talos API again on the same address after Stop.
func (n *Node) Start() error { return n.apid.Start() }

// shutdown ends the node's life: its parts stop (cluster close).
func (n *Node) shutdown() {
	n.cancel()
	n.machined.Close() // a reset or a boot in progress

	if n.kubelet != nil {
		n.kubelet.Wait()
	}

	if n.etcd != nil {
		n.etcd.Close()
	}

	n.apid.Close()
}

// RunningConfig returns the bytes of the running config (COSI MachineConfig v1alpha1).
func (n *Node) RunningConfig() []byte { return n.machined.RunningConfig() }

// PersistentConfig returns the bytes of the config on disk (COSI MachineConfig persistent).
func (n *Node) PersistentConfig() []byte { return n.machined.PersistentConfig() }

// RollbackPending reports whether a TRY apply is waiting to be rolled back, and when.
// Talos keeps this timer in machined's memory only; there is no resource for it.
func (n *Node) RollbackPending() (bool, time.Time) { return n.machined.RollbackPending() }

// ExpireRollback makes a pending TRY rollback happen now, as if its timeout had
// passed: tests play the node's clock forward instead of sleeping on it, so a slow
// machine cannot make a timeout pass early or late. It reports whether a rollback was
// pending.
func (n *Node) ExpireRollback() bool { return n.machined.ExpireRollback() }

// Rendered returns the kube-apiserver container rendered from the running config
// (nil on a worker), and the error when the last render failed (the pod then stays as it was).
func (n *Node) Rendered() (*ContainerConfig, error) { return n.machined.Rendered() }

// EtcdCerts returns the etcd certificates the node serves as the EtcdSecrets resource
// (server and peer for its addresses, clients "talos" and "kube-apiserver"), nil on a worker.
func (n *Node) EtcdCerts() *secrets.EtcdCertsSpec { return n.machined.EtcdCerts() }

// HostPath is where a path of the node lives on this machine, "" for a path the
// emulator does not hold: /var (EPHEMERAL) and /system.
func (n *Node) HostPath(path string) string { return n.host.Path(path) }

// BootID is the current boot's ID, as the node's boot_id file says it.
func (n *Node) BootID() string { return n.machined.BootID() }

// SetEtcdHealthy marks the node's etcd service healthy or not. On Talos the
// control-plane static pods are rendered only while the node's etcd service is
// healthy: while it is not, a config change is applied (MachineConfig,
// APIServerConfig) but the StaticPod resource and the kubelet keep the old pod; the
// render happens when etcd is healthy again. It models etcd on a node without a real
// member: with ClusterOptions.Etcd the health is the real service's, and calling it
// is a mistake (it panics).
func (n *Node) SetEtcdHealthy(healthy bool) { n.machined.SetEtcdHealthy(healthy) }

// EtcdHealthy reports the node's etcd service health: with ClusterOptions.Etcd, Running
// and its last health check passed; otherwise true unless SetEtcdHealthy(false).
func (n *Node) EtcdHealthy() bool { return n.machined.EtcdHealthy() }

// errNoKubelet answers the kubelet's calls on a worker, which runs no kube-apiserver pod.
var errNoKubelet = errors.New("no kubelet pod on a worker")

// Pod returns the kubelet's live view of the kube-apiserver pod (zero on a worker).
func (n *Node) Pod() PodState {
	if n.kubelet == nil {
		return PodState{}
	}

	return n.kubelet.Pod()
}

// WaitPod waits until cond holds for the kubelet's live view of the pod, and returns it.
func (n *Node) WaitPod(ctx context.Context, cond func(PodState) bool) (PodState, error) {
	if n.kubelet == nil {
		return PodState{}, errNoKubelet
	}

	return n.kubelet.WaitPod(ctx, cond)
}

// PollKubelet makes the kubelet fetch the manifest now, as at its next poll, and
// returns once it acted on it (a replaced pod's old container may still be stopping).
// With a long PollInterval, tests decide when the kubelet notices a change.
func (n *Node) PollKubelet() {
	if n.kubelet != nil {
		n.kubelet.Poll()
	}
}

// RefreshPodStatus makes Talos refresh the StaticPodStatus from the kubelet now,
// as at its next refresh (nothing while the status is frozen).
func (n *Node) RefreshPodStatus() {
	if n.kubelet != nil {
		n.kubelet.RefreshStatus()
	}
}

// FreezePodStatus stops (true) or resumes (false) the StaticPodStatus refreshes:
// the resource keeps its last values, as on a node whose kubelet cannot authorize
// Talos's /pods call through a kube-apiserver that is down.
func (n *Node) FreezePodStatus(frozen bool) {
	if n.kubelet != nil {
		n.kubelet.FreezeStatus(frozen)
	}
}

// CrashContainer makes the running kube-apiserver container exit with an error,
// as if the process died, and returns once the kubelet has recorded the exit (and
// restarted it, when no back-off is due). The restart is in the same pod: same pod
// UID and startTime, a new container ID, the restart count up by one.
func (n *Node) CrashContainer() error {
	if n.kubelet == nil {
		return errNoKubelet
	}

	return n.kubelet.Crash()
}

// errNoEtcdService answers what needs the node's real etcd service.
var errNoEtcdService = status.Error(codes.Unimplemented, "this emulated node runs no etcd service (talostest.ClusterOptions.Etcd)")

// EtcdState returns the node's etcd service as machined reports it.
func (n *Node) EtcdState() EtcdServiceState {
	if n.etcd == nil {
		return EtcdServiceState{}
	}

	return n.etcd.State()
}

// WaitEtcd waits until cond holds for the node's etcd service.
func (n *Node) WaitEtcd(ctx context.Context, cond func(EtcdServiceState) bool) (EtcdServiceState, error) {
	if n.etcd == nil {
		return EtcdServiceState{}, errNoEtcdService
	}

	return n.etcd.Wait(ctx, cond)
}

// EtcdEndpoint is the node's member's client URL ("" without ClusterOptions.Etcd).
func (n *Node) EtcdEndpoint() string {
	if n.etcd == nil {
		return ""
	}

	return n.etcd.ClientURL()
}

// EtcdLog returns the member's own log lines (talosctl logs etcd).
func (n *Node) EtcdLog() []string {
	if n.etcd == nil {
		return nil
	}

	return lines(n.etcd.Log())
}

// Cluster is the cluster the node belongs to.
func (n *Node) Cluster() *Cluster { return n.cluster }

// SystemLog returns machined's own log lines (talosctl dmesg's talos lines): the
// etcd service's states, its joins, promotions and retries.
func (n *Node) SystemLog() []string { return lines(n.host.Logs.Open(host.MachinedLog)) }

func lines(l *host.Log) []string {
	var out []string
	for _, line := range l.Lines() {
		out = append(out, string(line))
	}

	return out
}

// KillEtcd makes the member's process die (SIGKILL): the service restarts it 5 s
// later with the same arguments, as machined's restart runner does.
func (n *Node) KillEtcd() error {
	if n.etcd == nil {
		return errNoEtcdService
	}

	return n.etcd.Kill()
}

// DestroyEtcdData is a member whose disk is lost: its process dies and its data
// directory is emptied. The service restarts it every 5 s with the arguments its
// PreFunc computed when the data was there (no initial cluster): each start fails
// until the node is reset or bootstrapped.
func (n *Node) DestroyEtcdData() error {
	if n.etcd == nil {
		return errNoEtcdService
	}

	return n.etcd.DestroyData()
}
