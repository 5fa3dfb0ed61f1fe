package talostest

import (
	"bytes"
	"context"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/google/uuid"
	"github.com/siderolabs/crypto/x509"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/apid"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdsvc"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/kubelet"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// Node is one emulated Talos node: its Talos API (apid + machined) on IP:port.
type Node struct {
	Name         string // node name (hostname)
	IP           string
	Addr         string // IP:port of the Talos API
	Type         machinetype.Type
	TalosVersion string

	cluster    *Cluster
	knownKinds []string
	st         state.State
	machine    *machineService
	clusterSvc *clusterService
	cosi       cosiv1alpha1.StateServer

	apid *apid.Server

	applyMu sync.Mutex // held for the whole of an ApplyConfiguration

	cfgMu            sync.Mutex
	running          *nodeConfig
	persistent       *nodeConfig
	rollbackTimer    *time.Timer
	rollbackDeadline time.Time
	rendered         *ContainerConfig
	renderedVersion  string // the APIServerConfig version it was rendered from
	renderErr        error
	renderPending    bool // a render waits for etcd to be healthy

	statusMu sync.Mutex // one MachineStatus computation at a time

	kubelet   *kubelet.Kubelet // nil on a worker
	rebooting atomic.Bool
	etcdDown  atomic.Bool // SetEtcdHealthy(false)

	dir         string           // the node's files: its EPHEMERAL under var/ (boot.go)
	etcdMembers EtcdMembers      // how machined's etcd client reaches the members
	etcd        *etcdsvc.Service // machined's etcd service with a real member (ClusterOptions.Etcd), else nil
	events      *host.Bus        // machined's runtime events
	host        *host.Host

	background sync.WaitGroup // a reset and the boot after it

	bootMu sync.Mutex
	bootAt time.Time // when the kernel of the current boot started
	bootID string    // /proc/sys/kernel/random/boot_id, new at every boot

	ctx    context.Context //nolint:containedctx
	cancel context.CancelFunc
}

// nodeConfig is a machine config as the node holds it: the exact bytes, and the
// machinery view of the documents this machinery knows.
type nodeConfig struct {
	raw  []byte
	prov talosconfig.Provider
}

func newNode(ctx context.Context, c *Cluster, ip string, typ machinetype.Type, o NodeOptions) (*Node, error) {
	n := &Node{
		Name:         o.Name,
		IP:           ip,
		Type:         typ,
		TalosVersion: o.TalosVersion,
		cluster:      c,
		knownKinds:   o.KnownKinds,
		dir:          filepath.Join(c.dir, "nodes", ip),
		events:       host.NewBus(),
		bootAt:       time.Now().Add(-kernelToUp),
		bootID:       uuid.NewString(),
	}

	if n.TalosVersion == "" {
		n.TalosVersion = DefaultTalosVersion
	}

	if _, _, err := parseTalosVersion(n.TalosVersion); err != nil {
		return nil, err
	}

	n.ctx, n.cancel = context.WithCancel(context.Background())

	var err error

	if n.st, err = newNodeState(ctx); err != nil {
		return nil, err
	}

	n.host = &host.Host{
		Name: n.Name, IP: ip, State: n.st, Events: n.events, Logs: host.NewLogs(),
		Dir: n.dir, TimeScale: c.opts.Kubelet.TimeScale, Life: n.ctx,
	}
	n.host.Logs.Open("kubelet") // every node runs a kubelet service

	cfg, err := n.parseConfig(o.Config)
	if err != nil {
		return nil, fmt.Errorf("initial config refused: %w", err)
	}

	if cfg.prov.Machine().Type() != typ {
		return nil, fmt.Errorf("initial config is for machine type %s, node is %s", cfg.prov.Machine().Type(), typ)
	}

	n.machine = &machineService{n: n}
	n.clusterSvc = &clusterService{n: n}
	n.cosi = server.NewState(state.WrapCore(state.Filter(n.st, accessPolicy(n.st))))
	// The address is held for the node's life, so that Stop and Start (and a
	// reboot) never lose the port to someone else.
	addr, err := ports.Reserve(ip, c.opts.Port)
	if err != nil {
		return nil, err
	}

	n.apid = apid.New(n.Name, addr, c.apidOf)
	n.Addr = n.apid.Addr()
	n.apid.Register(&machine.MachineService_ServiceDesc, n.machine)
	n.apid.Register(&clusterapi.ClusterService_ServiceDesc, n.clusterSvc)
	n.apid.Register(&cosiv1alpha1.State_ServiceDesc, n.cosi)

	if err = n.publishStatic(ctx, cfg); err != nil {
		return nil, err
	}

	if typ == machinetype.TypeControlPlane && c.opts.Etcd != nil {
		if err = os.MkdirAll(n.hostPath(constants.EtcdDataPath), 0o700); err != nil {
			return nil, err
		}

		rt := etcdsvc.Runtime{Ready: func(ctx context.Context) error { return n.waitBooted(ctx, "cri") }, Peers: c.etcdEndpoints}
		if n.etcd, err = etcdsvc.New(n.host, *c.opts.Etcd, rt); err != nil {
			return nil, err
		}
	}

	if n.etcdMembers, err = c.etcdMembers(ctx, n); err != nil {
		return nil, err
	}

	n.publishServices()

	services := resource.NewMetadata(v1alpha1.NamespaceName, v1alpha1.ServiceType, "", resource.VersionUndefined)

	// MachineStatus follows the services and the static pods' status, as machined's
	// MachineStatusController does
	if err = follow(n.ctx, n.st, n.publishMachineStatus, services,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodStatusType, "", resource.VersionUndefined)); err != nil {
		return nil, err
	}

	// the static pods follow the etcd service, as the ControlPlaneStaticPodController does
	if err = follow(n.ctx, n.st, n.etcdHealthChanged, services); err != nil {
		return nil, err
	}

	if typ == machinetype.TypeControlPlane {
		runner := o.Runner
		if runner == nil {
			runner = c.opts.Runner
		}

		n.kubelet = kubelet.New(n.host, runner, c.opts.Kubelet)
	}

	n.cfgMu.Lock()
	n.persistent = cfg
	n.setPersistentLocked(cfg)
	n.setRunningLocked(cfg)
	n.cfgMu.Unlock()

	if n.kubelet != nil && n.etcd == nil {
		n.startKubelet() // after the first render: the kubelet starts the pod at once
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

// certIPs are the addresses apid's certificate names: the node's, and the IPs among
// the config's certSANs.
func (n *Node) certIPs() []net.IP {
	ips := []net.IP{net.ParseIP(n.IP)}

	for _, san := range n.currentConfig().prov.Machine().Security().CertSANs() {
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

func (n *Node) up() bool { return n.apid.Up() }

// shutdown stops the node's kubelet and timers (cluster close).
func (n *Node) shutdown() {
	n.cancel()
	n.background.Wait() // a reset or a boot in progress

	n.cfgMu.Lock()
	if n.rollbackTimer != nil {
		n.rollbackTimer.Stop()
		n.rollbackTimer = nil
	}
	n.cfgMu.Unlock()

	if n.kubelet != nil {
		n.kubelet.Wait()
	}

	if n.etcd != nil {
		n.etcd.Close()
	}

	n.apid.Close()
}

func (n *Node) logf(format string, args ...any) {
	n.host.Logf(format, args...)
}

// RunningConfig returns the bytes of the running config (COSI MachineConfig v1alpha1).
func (n *Node) RunningConfig() []byte {
	return bytes.Clone(n.currentConfig().raw)
}

// PersistentConfig returns the bytes of the config on disk (COSI MachineConfig persistent).
func (n *Node) PersistentConfig() []byte {
	n.cfgMu.Lock()
	defer n.cfgMu.Unlock()

	return bytes.Clone(n.persistent.raw)
}

// RollbackPending reports whether a TRY apply is waiting to be rolled back, and when.
// Talos keeps this timer in machined's memory only; there is no resource for it.
func (n *Node) RollbackPending() (bool, time.Time) {
	n.cfgMu.Lock()
	defer n.cfgMu.Unlock()

	return n.rollbackTimer != nil, n.rollbackDeadline
}

// ExpireRollback makes a pending TRY rollback happen now, as if its timeout
// had passed: tests play the node's clock forward instead of sleeping on it,
// so a slow machine cannot make a timeout pass early or late. It reports
// whether a rollback was pending.
func (n *Node) ExpireRollback() bool {
	n.cfgMu.Lock()
	t := n.rollbackTimer
	n.cfgMu.Unlock()

	if t == nil || !t.Reset(0) {
		return false
	}

	for pending, _ := n.RollbackPending(); pending; pending, _ = n.RollbackPending() {
		time.Sleep(time.Millisecond)
	}

	return true
}

// Rendered returns the kube-apiserver container rendered from the running config
// (nil on a worker), and the error when the last render failed (the pod then stays as it was).
func (n *Node) Rendered() (*ContainerConfig, error) {
	n.cfgMu.Lock()
	defer n.cfgMu.Unlock()

	if n.rendered == nil {
		return nil, n.renderErr
	}

	c := *n.rendered

	return &c, n.renderErr
}

func (n *Node) currentConfig() *nodeConfig {
	n.cfgMu.Lock()
	defer n.cfgMu.Unlock()

	return n.running
}

// parseTalosVersion reads "v1.12.3" as (1, 12).
func parseTalosVersion(v string) (int, int, error) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("bad Talos version %q", v)
	}

	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])

	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad Talos version %q", v)
	}

	return major, minor, nil
}

// stringOnlyArgs is true for Talos before v1.13, whose extraArgs are map[string]string.
func (n *Node) stringOnlyArgs() bool {
	major, minor, _ := parseTalosVersion(n.TalosVersion)

	return major < 1 || (major == 1 && minor < 13)
}

// validationMode is the runtime mode configs are validated for: an installed metal node.
type validationMode struct{}

func (validationMode) String() string        { return "metal" }
func (validationMode) RequiresInstall() bool { return false }
func (validationMode) InContainer() bool     { return false }

// parseConfig loads and validates config bytes as the node's machined would; errors are
// gRPC InvalidArgument statuses with the loader's message.
func (n *Node) parseConfig(raw []byte) (*nodeConfig, error) {
	known, err := stripKinds(raw, n.knownKinds)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if n.stringOnlyArgs() {
		if err := checkStringArgs(known); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}

	prov, err := configloader.NewFromBytes(known)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if prov.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}

	if _, err := prov.Validate(validationMode{}); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	return &nodeConfig{raw: bytes.Clone(raw), prov: prov}, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*\r?\n`)

// stripKinds drops the documents whose kind is in kinds (documents a newer Talos knows
// and this machinery does not), keeping every other byte.
func stripKinds(raw []byte, kinds []string) ([]byte, error) {
	if len(kinds) == 0 {
		return raw, nil
	}

	parts := docSeparator.Split(string(raw), -1)
	kept := make([]string, 0, len(parts))
	dropped := false

	for _, p := range parts {
		var doc struct {
			Kind string `yaml:"kind"`
		}

		if err := yaml.Unmarshal([]byte(p), &doc); err == nil && doc.Kind != "" && slices.Contains(kinds, doc.Kind) {
			dropped = true

			continue
		}

		if strings.TrimSpace(p) != "" {
			kept = append(kept, p)
		}
	}

	if !dropped {
		return raw, nil
	}

	return []byte(strings.Join(kept, "---\n")), nil
}

// documentKinds lists the kinds of the YAML documents in text.
func documentKinds(text string) []string {
	var kinds []string

	for _, p := range docSeparator.Split(text, -1) {
		var doc struct {
			Kind string `yaml:"kind"`
		}

		if yaml.Unmarshal([]byte(p), &doc) == nil && doc.Kind != "" {
			kinds = append(kinds, doc.Kind)
		}
	}

	return kinds
}

// checkStringArgs refuses list values in extraArgs, which a Talos 1.11/1.12 loader
// cannot decode (its extraArgs are map[string]string).
func checkStringArgs(raw []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))

	for {
		var doc yaml.Node

		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return err
		}

		if len(doc.Content) == 0 {
			continue
		}

		root := doc.Content[0]

		for _, path := range [][]string{
			{"cluster", "apiServer", "extraArgs"},
			{"cluster", "controllerManager", "extraArgs"},
			{"cluster", "scheduler", "extraArgs"},
			{"cluster", "proxy", "extraArgs"},
			{"cluster", "etcd", "extraArgs"},
			{"machine", "kubelet", "extraArgs"},
		} {
			m := lookupYAML(root, path...)
			if m == nil || m.Kind != yaml.MappingNode {
				continue
			}

			for i := 1; i < len(m.Content); i += 2 {
				if v := m.Content[i]; v.Kind != yaml.ScalarNode {
					return fmt.Errorf("yaml: unmarshal errors:\n  line %d: cannot unmarshal %s into string", v.Line, v.ShortTag())
				}
			}
		}
	}
}

func lookupYAML(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}

		var next *yaml.Node

		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}

		n = next
	}

	return n
}

// publishStatic writes the resources that do not follow the config.
func (n *Node) publishStatic(ctx context.Context, cfg *nodeConfig) error {
	mt := config.NewMachineType()
	mt.SetMachineType(n.Type)

	if err := n.st.Create(ctx, mt); err != nil {
		return err
	}

	nn := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	nn.TypedSpec().Nodename = n.Name
	nn.TypedSpec().HostnameVersion = "1"

	if err := n.st.Create(ctx, nn); err != nil {
		return err
	}

	if n.Type != machinetype.TypeControlPlane {
		return nil
	}

	root := secrets.NewEtcdRoot(secrets.EtcdRootID)
	root.TypedSpec().EtcdCA = cfg.prov.Cluster().Etcd().CA()

	if err := n.st.Create(ctx, root); err != nil {
		return err
	}

	certs, err := n.etcdCerts(root.TypedSpec().EtcdCA)
	if err != nil {
		return fmt.Errorf("issuing etcd certificates: %w", err)
	}

	etcd := secrets.NewEtcd()
	*etcd.TypedSpec() = *certs

	return n.st.Create(ctx, etcd)
}

// etcdCerts issues the node's etcd certificates from the etcd CA, as machined's
// secrets.EtcdController does: server and peer certificates for the node's addresses,
// client certificates "talos" (admin) and "kube-apiserver".
func (n *Node) etcdCerts(caPEM *x509.PEMEncodedCertificateAndKey) (*secrets.EtcdCertsSpec, error) {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(caPEM)
	if err != nil {
		return nil, err
	}

	issue := func(cn string, usage []stdx509.ExtKeyUsage, ips []net.IP, dns []string) (*x509.PEMEncodedCertificateAndKey, error) {
		kp, err := x509.NewKeyPair(ca,
			x509.CommonName(cn),
			x509.IPAddresses(ips),
			x509.DNSNames(dns),
			x509.NotAfter(time.Now().Add(365*24*time.Hour)),
			x509.KeyUsage(stdx509.KeyUsageDigitalSignature|stdx509.KeyUsageKeyEncipherment),
			x509.ExtKeyUsage(usage),
		)
		if err != nil {
			return nil, err
		}

		return x509.NewCertificateAndKeyFromKeyPair(kp), nil
	}

	both := []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth, stdx509.ExtKeyUsageClientAuth}
	client := []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}
	ips := []net.IP{net.ParseIP(n.IP), net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	dns := []string{n.Name, "localhost"}

	var spec secrets.EtcdCertsSpec

	if spec.Etcd, err = issue(n.Name, both, ips, dns); err != nil {
		return nil, err
	}

	// etcd checks a peer's certificate against the address its connection comes from,
	// and looks its DNS names up when no address matches: on loopback connections come
	// from 127.0.0.1, and no name may be looked up (nothing leaves loopback), so the
	// peer certificate names that address and no host name (on a node: its addresses
	// and hostname)
	if spec.EtcdPeer, err = issue(n.Name, both, ips[:2], nil); err != nil {
		return nil, err
	}

	if spec.EtcdAdmin, err = issue("talos", client, nil, nil); err != nil {
		return nil, err
	}

	if spec.EtcdAPIServer, err = issue("kube-apiserver", client, nil, nil); err != nil {
		return nil, err
	}

	return &spec, nil
}

// EtcdCerts returns the etcd certificates the node serves as the EtcdSecrets resource
// (server and peer for its addresses, clients "talos" and "kube-apiserver"), nil on a worker.
func (n *Node) EtcdCerts() *secrets.EtcdCertsSpec {
	r, err := n.st.Get(n.ctx, secrets.NewEtcd().Metadata())
	if err != nil {
		return nil
	}

	return r.(*secrets.Etcd).TypedSpec()
}

func (n *Node) setPersistentLocked(cfg *nodeConfig) {
	n.persistent = cfg

	if err := n.st.Modify(n.ctx, newRawMachineConfig(config.PersistentID, nil), func(r resource.Resource) error {
		r.(*rawMachineConfig).spec.raw = bytes.Clone(cfg.raw)

		return nil
	}); err != nil {
		n.logf("writing persistent config: %v", err)
	}
}

// setRunningLocked makes cfg the running config and lets the "controllers" follow:
// MachineConfig, APIServerConfig, the rendered StaticPod and the kubelet.
func (n *Node) setRunningLocked(cfg *nodeConfig) {
	n.running = cfg

	if err := n.st.Modify(n.ctx, newRawMachineConfig(config.ActiveID, nil), func(r resource.Resource) error {
		r.(*rawMachineConfig).spec.raw = bytes.Clone(cfg.raw)

		return nil
	}); err != nil {
		n.logf("writing running config: %v", err)
	}

	if n.Type != machinetype.TypeControlPlane {
		return
	}

	spec := apiServerConfigSpec(cfg.prov)

	published := spec
	if n.stringOnlyArgs() {
		// extraArgs moved to a new protobuf field in 1.13: a 1.13 client reads none from older nodes
		published.ExtraArgs = nil
	}

	asc := k8s.NewAPIServerConfig()

	if err := n.st.Modify(n.ctx, asc, func(r resource.Resource) error {
		*r.(*k8s.APIServerConfig).TypedSpec() = published

		return nil
	}); err != nil {
		n.logf("writing APIServerConfig: %v", err)
	}

	n.renderPodLocked()
}

// renderPodLocked is machined's ControlPlaneStaticPodController: the StaticPod
// resource, which the kubelet fetches, rendered from the config, but only while
// the node's etcd is healthy (a render waits for it otherwise).
func (n *Node) renderPodLocked() {
	running, healthy := n.etcdServiceStatus()
	if !running {
		n.teardownPodsLocked()

		return
	}

	if !healthy {
		if !n.renderPending {
			n.logf("k8s.ControlPlaneStaticPodController: etcd is not healthy, not rendering static pods")
		}

		n.renderPending = true

		return
	}

	n.renderPending = false
	spec := apiServerConfigSpec(n.running.prov)
	asc := k8s.NewAPIServerConfig()

	baseArgs := n.cluster.opts.BaseArgs
	if baseArgs == nil {
		baseArgs = TalosBaseArgs
	}

	cmd, err := renderCommand(baseArgs(n, &spec), spec.ExtraArgs)
	if err != nil {
		// machined's static pod controller fails the same way and leaves the pod as it was
		n.renderErr = err
		n.logf("k8s.ControlPlaneStaticPodController: error rendering kube-apiserver: %v", err)

		return
	}

	n.renderErr = nil
	rendered := ContainerConfig{Image: spec.Image, Command: cmd}

	cur, _ := n.st.Get(n.ctx, asc.Metadata())
	version := ""

	if cur != nil {
		version = cur.Metadata().Version().String()
	}

	// The manifest carries the APIServerConfig's version (talos.dev/config-version):
	// every change of that config is a new manifest, and so a new pod, even where
	// the container comes out as one that ran before.
	if n.rendered != nil && n.rendered.Equal(rendered) && n.renderedVersion == version {
		return
	}

	n.rendered, n.renderedVersion = &rendered, version

	pod, err := staticpod.Manifest(rendered, version)
	if err != nil {
		n.logf("rendering static pod: %v", err)

		return
	}

	if err := n.st.Modify(n.ctx, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID), func(r resource.Resource) error {
		r.(*k8s.StaticPod).TypedSpec().Pod = pod

		return nil
	}); err != nil {
		n.logf("writing StaticPod: %v", err)
	}
}

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

// waitRendered waits until the static pod controller rendered the pod, or failed to.
func (n *Node) waitRendered(ctx context.Context) error {
	for {
		if r, err := n.Rendered(); r != nil || err != nil {
			return nil
		}

		if !sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}
