package talostest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/apid"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdclient"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/machined"
)

// Defaults used when ClusterOptions leaves a field empty.
const (
	DefaultTalosVersion      = "v1.13.8"
	DefaultKubernetesVersion = "1.34.4"
	DefaultClusterName       = "breakglass"
	DefaultFirstIP           = "127.0.0.11"
)

// ClusterOptions describe an emulated cluster. The zero value is one control-plane node.
type ClusterOptions struct {
	ControlPlanes int // default 1
	Workers       int

	// Dir receives the talosconfig files written by Talosconfig; default: a new temporary directory removed by Close.
	Dir string

	ClusterName       string // default DefaultClusterName
	KubernetesVersion string // without "v", default DefaultKubernetesVersion
	// Endpoint is the cluster (kube-apiserver) endpoint, default https://<first IP>:6443.
	Endpoint string
	// IPs of the nodes, control planes first; default consecutive addresses from 127.0.0.11.
	IPs []string
	// Port of every node's Talos API; 0 picks a free port per node (the lab uses 50000).
	// Each node holds its address until Close (PortReservation).
	Port int

	// ServiceSubnets are cluster.network.serviceSubnets in the generated
	// configs (talosctl gen config --service-cidr); default Talos's.
	ServiceSubnets []string

	// AESCBCEncryptionSecret, when set, is the generated configs'
	// cluster.aescbcEncryptionSecret in place of the bundle's
	// secretboxEncryptionSecret: a cluster created before Talos 1.3, whose
	// generator wrote the AES-CBC secret (generate/init.go: secretbox only
	// from the 1.3 contract on; a bundle holds one of the two). Its legacy
	// rendering is aescbc key1, then identity.
	AESCBCEncryptionSecret string

	// Secrets is the cluster's secrets bundle; default a new one. Reusing one saves
	// the key generation (about a second) when many clusters are made, as in tests.
	Secrets *secrets.Bundle

	// Nodes holds per-node options, indexed like IPs (control planes first); missing entries use defaults.
	Nodes []NodeOptions

	// Runner runs kube-apiserver containers; default StandIn{}.
	Runner PodRunner
	// BaseArgs returns the kube-apiserver flags a node renders before merging the
	// config's extraArgs (the lab supplies cert paths, etcd servers, ports); default TalosBaseArgs.
	BaseArgs func(n *Node, spec *k8s.APIServerConfigSpec) map[string]string
	// Kubelet are the kubelet's and Talos's times; zero fields take a real node's.
	// Tests set TimeScale (e.g. 0.01) to run them faster.
	Kubelet KubeletOptions
	// EtcdSnapshot streams an etcd snapshot for MachineService.EtcdSnapshot; nil: the
	// snapshot of the node's member (EtcdMember), Unavailable without one.
	EtcdSnapshot func(ctx context.Context, n *Node, w io.Writer) error
	// EtcdMember tells how to reach a control plane's own etcd member, as machined's local
	// client does. With it the etcd calls (EtcdStatus, EtcdMemberList, EtcdAlarmList,
	// EtcdAlarmDisarm, EtcdDefragment, EtcdSnapshot) act on that real member; an error
	// means no member runs there. Without it EtcdStatus and EtcdMemberList answer from a
	// model and the others fail (etcd.go).
	EtcdMember func(n *Node) (EtcdAccess, error)
	// Etcd makes every control plane run machined's etcd service around a real member
	// of its own (etcdservice.go), formed into one cluster at start; the etcd calls, the
	// recovery calls (Bootstrap, EtcdRecover, Reset, ...) and the static pods follow it.
	// It replaces EtcdMember and the model of SetEtcdHealthy.
	Etcd *EtcdOptions
	// RebootDuration is how long the Talos API is away after an apply in REBOOT mode; default 1s.
	RebootDuration time.Duration

	// applyHook runs inside ApplyConfiguration while the apply lock is held (tests).
	applyHook func(n *Node)
}

// NodeOptions change one node.
type NodeOptions struct {
	// TalosVersion reported by Version and deciding what configs the node accepts; default DefaultTalosVersion.
	// Nodes older than v1.13 accept only string extraArgs values.
	TalosVersion string
	// Name is the node name (hostname); default cp-N or worker-N.
	Name string
	// ExtraDocuments are appended verbatim to the generated config (for example a
	// "kind: FutureConfig" document). Their kinds become known to this node, as on a newer Talos.
	ExtraDocuments string
	// KnownKinds lists further document kinds this node accepts beyond machinery's.
	KnownKinds []string
	// Config replaces the generated config bytes entirely.
	Config []byte
	// Runner overrides ClusterOptions.Runner for this node.
	Runner PodRunner
}

// Cluster is a set of emulated Talos nodes sharing one secrets bundle.
type Cluster struct {
	Nodes    []*Node
	Secrets  *secrets.Bundle
	Endpoint string
	Name     string

	// ControlPlaneConfig and WorkerConfig are the generated config bytes (before per-node ExtraDocuments).
	ControlPlaneConfig []byte
	WorkerConfig       []byte

	opts      ClusterOptions
	dir       string
	tmpDir    bool
	etcdModel *machined.EtcdModel // etcd when no member runs on the nodes

	mu sync.Mutex
}

// NewCluster generates the secrets and machine configs and starts every node.
func NewCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.ControlPlanes == 0 && opts.Workers == 0 {
		opts.ControlPlanes = 1
	}

	if opts.ControlPlanes < 0 || opts.Workers < 0 {
		return nil, errors.New("negative node count")
	}

	total := opts.ControlPlanes + opts.Workers

	if opts.ClusterName == "" {
		opts.ClusterName = DefaultClusterName
	}

	if opts.KubernetesVersion == "" {
		opts.KubernetesVersion = DefaultKubernetesVersion
	}

	opts.KubernetesVersion = strings.TrimPrefix(opts.KubernetesVersion, "v")

	ips, err := nodeIPs(opts.IPs, total)
	if err != nil {
		return nil, err
	}

	if opts.Endpoint == "" {
		opts.Endpoint = "https://" + ips[0] + ":6443"
	}

	if opts.Runner == nil {
		opts.Runner = StandIn{}
	}

	c := &Cluster{Endpoint: opts.Endpoint, Name: opts.ClusterName, opts: opts, dir: opts.Dir}

	if opts.Etcd == nil {
		c.etcdModel = machined.NewEtcdModel(opts.ClusterName)
	}

	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "talostest-"); err != nil {
			return nil, err
		}

		c.tmpDir = true
	}

	c.Secrets = opts.Secrets
	if c.Secrets == nil {
		if c.Secrets, err = secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil); err != nil {
			return nil, fmt.Errorf("generating secrets: %w", err)
		}
	}

	in, err := generate.NewInput(opts.ClusterName, opts.Endpoint, opts.KubernetesVersion,
		generate.WithSecretsBundle(c.Secrets),
		generate.WithAdditionalSubjectAltNames(ips),
		generate.WithEndpointList(ips),
	)
	if err != nil {
		return nil, fmt.Errorf("generating config: %w", err)
	}
	if len(opts.ServiceSubnets) > 0 {
		in.ServiceNet = opts.ServiceSubnets
	}

	for _, t := range []struct {
		typ machine.Type
		out *[]byte
	}{{machine.TypeControlPlane, &c.ControlPlaneConfig}, {machine.TypeWorker, &c.WorkerConfig}} {
		prov, err := in.Config(t.typ)
		if err != nil {
			return nil, fmt.Errorf("generating %s config: %w", t.typ, err)
		}

		if *t.out, err = prov.Bytes(); err != nil {
			return nil, err
		}

		if opts.AESCBCEncryptionSecret != "" && t.typ == machine.TypeControlPlane {
			if *t.out, err = withAESCBC(*t.out, opts.AESCBCEncryptionSecret); err != nil {
				return nil, err
			}
		}
	}

	if opts.AESCBCEncryptionSecret != "" { // the bundle as such a cluster has it
		b, s := *c.Secrets, *c.Secrets.Secrets
		s.AESCBCEncryptionSecret, s.SecretboxEncryptionSecret = opts.AESCBCEncryptionSecret, ""
		b.Secrets = &s
		c.Secrets = &b
	}

	for i := range total {
		var no NodeOptions
		if i < len(opts.Nodes) {
			no = opts.Nodes[i]
		}

		typ, cfg := machine.TypeControlPlane, c.ControlPlaneConfig
		name := fmt.Sprintf("cp-%d", i+1)

		if i >= opts.ControlPlanes {
			typ, cfg = machine.TypeWorker, c.WorkerConfig
			name = fmt.Sprintf("worker-%d", i-opts.ControlPlanes+1)
		}

		if no.Name == "" {
			no.Name = name
		}

		if no.Config == nil {
			cfg = append([]byte(nil), cfg...)
			if no.ExtraDocuments != "" {
				cfg = appendDocuments(cfg, no.ExtraDocuments)
			}

			no.Config = cfg
		}

		if no.ExtraDocuments != "" {
			no.KnownKinds = append(no.KnownKinds, machined.DocumentKinds(no.ExtraDocuments)...)
		}

		n, err := newNode(ctx, c, ips[i], typ, no)
		if err != nil {
			c.Close()

			return nil, fmt.Errorf("node %s: %w", ips[i], err)
		}

		c.Nodes = append(c.Nodes, n)
	}

	if err := c.publishMembers(); err != nil {
		c.Close()

		return nil, err
	}

	if opts.Etcd != nil {
		if err := c.formEtcd(ctx); err != nil {
			c.Close()

			return nil, err
		}
	}

	return c, nil
}

// formEtcd starts every control plane's etcd service as the members of one new
// cluster, waits until each runs and answers a quorum read, then starts the kubelets:
// the cluster was bootstrapped before the emulator started, so its static pods run
// from the start.
func (c *Cluster) formEtcd(ctx context.Context) error {
	var initial []string

	cps := c.ControlPlanes()
	for _, n := range cps {
		initial = append(initial, n.Name+"="+n.etcd.PeerURL())
	}

	for _, n := range cps {
		n.etcd.Form(strings.Join(initial, ","))
	}

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	for _, n := range cps {
		for !n.etcd.HealthyRunning() {
			if _, err := n.etcd.Wait(ctx, func(st EtcdServiceState) bool { return st.State == ServiceRunning }); err != nil {
				return fmt.Errorf("node %s: etcd did not start: %w (%s)", n.IP, err, n.etcd.State().LastEvent)
			}

			n.etcd.CheckHealth(ctx)

			if ctx.Err() != nil {
				return fmt.Errorf("node %s: etcd not healthy: %w (%s; its log ends %s)", n.IP, ctx.Err(), n.etcd.State().HealthMessage, n.etcd.LastLog(3))
			}

			if !n.etcd.HealthyRunning() {
				time.Sleep(100 * time.Millisecond) // the members are still electing a leader
			}
		}
	}

	// the static pods are rendered once etcd runs healthy: the kubelets start with them
	for _, n := range cps {
		if err := n.machined.WaitRendered(ctx); err != nil {
			return fmt.Errorf("node %s: static pods not rendered: %w", n.IP, err)
		}

		n.kubelet.Start()
	}

	return nil
}

func nodeIPs(given []string, total int) ([]string, error) {
	if len(given) > 0 {
		if len(given) < total {
			return nil, fmt.Errorf("%d IPs given for %d nodes", len(given), total)
		}

		for _, ip := range given[:total] {
			addr, err := netip.ParseAddr(ip)
			if err != nil || !addr.IsLoopback() {
				return nil, fmt.Errorf("node IP %q is not a loopback address", ip)
			}
		}

		return given[:total], nil
	}

	addr := netip.MustParseAddr(DefaultFirstIP)
	ips := make([]string, 0, total)

	for range total {
		ips = append(ips, addr.String())
		addr = addr.Next()
	}

	return ips, nil
}

func appendDocuments(cfg []byte, docs string) []byte {
	docs = strings.TrimPrefix(docs, "---\n")
	if len(cfg) > 0 && cfg[len(cfg)-1] != '\n' {
		cfg = append(cfg, '\n')
	}

	return append(append(cfg, "---\n"...), docs...)
}

// lookup finds a node by IP, IP:port or name, as a request's node metadata names it.
func (c *Cluster) lookup(name string) *Node {
	for _, n := range c.Nodes {
		if name == n.IP || name == n.Addr || name == n.Name {
			return n
		}
	}

	return nil
}

// AdminKubeconfig returns an admin kubeconfig for the cluster endpoint, as the node's Kubeconfig call does.
func (c *Cluster) AdminKubeconfig() ([]byte, error) {
	for _, n := range c.ControlPlanes() {
		return n.machined.AdminKubeconfig()
	}

	return nil, errors.New("no control-plane node")
}

// apidOf is apid's view of the cluster: another node's apid, by IP, IP:port or name.
func (c *Cluster) apidOf(name string) *apid.Server {
	if n := c.lookup(name); n != nil {
		return n.apid
	}

	return nil
}

// Node returns the node with the given IP or name, or nil.
func (c *Cluster) Node(name string) *Node { return c.lookup(name) }

// ControlPlanes returns the control-plane nodes.
func (c *Cluster) ControlPlanes() []*Node {
	var out []*Node

	for _, n := range c.Nodes {
		if n.Type == machine.TypeControlPlane {
			out = append(out, n)
		}
	}

	return out
}

// Close stops every node and removes the temporary directory it created.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Stop()
		n.shutdown()
	}

	if c.tmpDir {
		os.RemoveAll(c.dir) //nolint:errcheck
	}
}

// TalosconfigFor returns a talosconfig for the given role (one context named after
// the cluster; endpoints and nodes: every control-plane node), with a client
// certificate signed by the OS CA carrying the role as Organization.
func (c *Cluster) TalosconfigFor(r role.Role) (*config.Config, error) {
	return c.TalosconfigWith(role.MakeSet(r), nil, nil)
}

// TalosconfigWith is TalosconfigFor with explicit roles, endpoints and nodes (IPs or
// IP:port; nil means the control-plane nodes).
func (c *Cluster) TalosconfigWith(roles role.Set, endpoints, nodes []string) (*config.Config, error) {
	crt, err := secrets.NewAdminCertificateAndKey(time.Now().Add(-time.Minute), c.Secrets.Certs.OS, roles, constants.TalosAPIDefaultCertificateValidityDuration)
	if err != nil {
		return nil, err
	}

	if endpoints == nil {
		for _, n := range c.ControlPlanes() {
			endpoints = append(endpoints, n.Addr)
		}
	}

	if nodes == nil {
		for _, n := range c.ControlPlanes() {
			nodes = append(nodes, n.IP)
		}
	}

	cfg := config.NewConfig(c.Name, endpoints, c.Secrets.Certs.OS.Crt, crt)
	cfg.Contexts[c.Name].Nodes = nodes

	return cfg, nil
}

// Talosconfig writes a talosconfig for the role (see TalosconfigFor) into the
// cluster's directory and returns its path.
func (c *Cluster) Talosconfig(r role.Role) (string, error) {
	cfg, err := c.TalosconfigFor(r)
	if err != nil {
		return "", err
	}

	path := filepath.Join(c.dir, "talosconfig-"+strings.ReplaceAll(string(r), ":", "-"))

	if err := cfg.Save(path); err != nil {
		return "", err
	}

	return path, nil
}

// TalosconfigBytes returns the talosconfig for the role (see TalosconfigFor) as YAML.
func (c *Cluster) TalosconfigBytes(r role.Role) ([]byte, error) {
	cfg, err := c.TalosconfigFor(r)
	if err != nil {
		return nil, err
	}

	return cfg.Bytes()
}

// OSCA, KubernetesCA and EtcdCA return the cluster's certificate authorities (PEM certificate and key).
func (c *Cluster) OSCA() *x509.PEMEncodedCertificateAndKey         { return c.Secrets.Certs.OS }
func (c *Cluster) KubernetesCA() *x509.PEMEncodedCertificateAndKey { return c.Secrets.Certs.K8s }
func (c *Cluster) EtcdCA() *x509.PEMEncodedCertificateAndKey       { return c.Secrets.Certs.Etcd }

// scaled is a Talos time as the emulator plays it: Kubelet.TimeScale applies
// to the node's own timers too (the try-mode rollback), so that tests can
// use real flag values (breakglass refuses --revert-after under 2m).
func (c *Cluster) scaled(d time.Duration) time.Duration {
	if s := c.opts.Kubelet.TimeScale; s > 0 {
		return time.Duration(float64(d) * s)
	}
	return d
}

func (c *Cluster) rebootDuration() time.Duration {
	if c.opts.RebootDuration <= 0 {
		return time.Second
	}

	return c.opts.RebootDuration
}

// etcdEndpoints are the client URLs of the control planes' members, as machined finds
// them (NewClientFromControlPlaneIPs).
func (c *Cluster) etcdEndpoints() []string {
	var out []string

	for _, n := range c.ControlPlanes() {
		if n.etcd != nil {
			out = append(out, n.etcd.ClientURL())
		}
	}

	return out
}

// etcdMembers is how n's machined reaches etcd: its own member's service, with its
// admin certificate (ClusterOptions.Etcd), or the members ClusterOptions.EtcdMember
// names; nothing without either.
func (c *Cluster) etcdMembers(n *Node) machined.EtcdMembers {
	switch {
	case n.etcd != nil:
		access := func(endpoint string) EtcdAccess {
			tlsConf, _ := etcdclient.AdminTLS(n.host.Life, n.host.State) //nolint:errcheck // machined issued them
			return EtcdAccess{Endpoint: endpoint, TLS: tlsConf}
		}

		return machined.EtcdMembers{
			Local: func() (EtcdAccess, error) { return access(n.etcd.ClientURL()), nil },
			All: func() []EtcdAccess {
				var out []EtcdAccess
				for _, e := range c.etcdEndpoints() {
					out = append(out, access(e))
				}

				return out
			},
		}
	case c.opts.EtcdMember != nil && n.Type == machine.TypeControlPlane:
		hook := c.opts.EtcdMember

		return machined.EtcdMembers{
			Local: func() (EtcdAccess, error) { return hook(n) },
			All: func() []EtcdAccess {
				var out []EtcdAccess

				for _, m := range c.ControlPlanes() {
					if acc, err := hook(m); err == nil { // no member there: the node's address is still listed, and refuses
						out = append(out, acc)
					}
				}

				return out
			},
		}
	}

	return machined.EtcdMembers{}
}

// nodeID is a node's discovery identity: random base62 on a node, stable here.
func nodeID(c *Cluster, n *Node) string {
	sum := sha256.Sum256([]byte("identity/" + c.Name + "/" + n.Name))

	return new(big.Int).SetBytes(sum[:]).Text(62)
}

// publishMembers writes the discovery Members of every node of the cluster.
func (c *Cluster) publishMembers() error {
	apiPort := 6443

	if u, err := url.Parse(c.Endpoint); err == nil && u.Port() != "" {
		apiPort, _ = strconv.Atoi(u.Port()) //nolint:errcheck
	}

	for _, n := range c.Nodes {
		for _, m := range c.Nodes {
			member := cluster.NewMember(cluster.NamespaceName, m.Name)
			spec := member.TypedSpec()
			spec.NodeID = nodeID(c, m)
			spec.Addresses = []netip.Addr{netip.MustParseAddr(m.IP)}
			spec.Hostname = m.Name
			spec.MachineType = m.Type
			spec.OperatingSystem = fmt.Sprintf("Talos (%s)", m.TalosVersion)

			if m.Type == machine.TypeControlPlane {
				spec.ControlPlane = &cluster.ControlPlane{APIServerPort: apiPort}
			}

			if err := n.host.State.Create(n.host.Life, member); err != nil {
				return fmt.Errorf("node %s: member %s: %w", n.IP, m.Name, err)
			}
		}
	}

	return nil
}

// secretboxLine is the generated config's secretbox secret, its comment
// included.
var secretboxLine = regexp.MustCompile(`(?m)^([ \t]*)secretboxEncryptionSecret:[^\n]*\n`)

// withAESCBC is a generated control-plane config holding the AES-CBC
// secret where it held the secretbox one.
func withAESCBC(cfg []byte, secret string) ([]byte, error) {
	m := secretboxLine.FindSubmatchIndex(cfg)
	if m == nil {
		return nil, errors.New("the generated config holds no cluster.secretboxEncryptionSecret")
	}

	line := string(cfg[m[2]:m[3]]) + "aescbcEncryptionSecret: " + secret + "\n"

	return append(append(append([]byte(nil), cfg[:m[0]]...), line...), cfg[m[1]:]...), nil
}
