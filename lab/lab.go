// Package lab reproduces the incident breakglass exists for with real
// parts: real etcd members (a process per node) with TLS and
// client-certificate auth, real kube-apiserver processes of pinned versions,
// and emulated Talos control-plane nodes (talos/talostest) that run them as
// static pods, plus the policy engine's webhook backend that only answers
// while the cluster's service network is up. On top of it: scenarios, and the
// rehearsal of the recovery through the same code paths as the real commands.
package lab

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sidero "github.com/siderolabs/crypto/x509"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// Versions the lab knows how to run.
const (
	OldVersion = "v1.32.13" // before the default ServiceCIDR (KEP-1880 is off)
	NewVersion = "v1.34.4"  // creates the default ServiceCIDR at start-up
	// ServiceCIDR is the lab cluster's service network: configuration only, never dialled.
	ServiceCIDR = "10.1.0.0/20"
	// FirstIP is the first node's address; the others follow.
	FirstIP = "127.0.0.11"
)

// Options describe a lab. Zero ports pick free ones (tests); `lab up` uses
// the real ones (50000, 6443, 2379). Every port is held for the lab's life
// (talostest.PortReservation), so that restarts never lose it.
type Options struct {
	Dir   string // working directory: certificates, etcd data, talosconfig (required)
	Nodes int    // control-plane nodes; default 1
	// FirstIP is the first node's loopback address, the others follow it
	// (default FirstIP, 127.0.0.11); labs side by side each take their own.
	FirstIP   string
	IPs       []string // the nodes' addresses, given one by one (instead of FirstIP)
	TalosPort int
	APIPort   int
	// EtcdPort and EtcdPeerPort are each node's etcd client and peer ports (Talos:
	// 2379, 2380); 0 picks free ones. Every node runs a member, as on Talos.
	EtcdPort     int
	EtcdPeerPort int
	// EtcdQuotaBytes is each member's space quota (etcd's --quota-backend-bytes); 0:
	// etcd's default, 2 GiB, as on Talos. A small one lets a scenario fill it (NOSPACE).
	EtcdQuotaBytes int64
	KubeBinDir     string // holds VERSION/kube-apiserver; default: $BREAKGLASS_KUBE_BIN_DIR, else KubeCacheDir
	Version        string // Kubernetes version to boot, default OldVersion
	// TalosVersion is every node's Talos version; default talostest's
	// (v1.13.8). v1.14 and later take the KubeEtcdEncryptionConfig document.
	TalosVersion string
	// AESCBCEncryption: the nodes' configs hold a new
	// cluster.aescbcEncryptionSecret instead of the secretbox one, as
	// generated for a cluster created before Talos 1.3 (aescbc key1, then
	// identity).
	AESCBCEncryption bool
	// Kubelet are the emulated kubelet's and Talos's times; zero: the real ones.
	Kubelet talostest.KubeletOptions
	// TimeScale scales the real kubelet and Talos times left zero in Kubelet
	// (talostest.KubeletOptions.TimeScale) unless Kubelet sets its own; 0: real times.
	TimeScale float64
	// NoKubeletRestart: the recoveries the lab runs leave the kubelets to
	// their next poll (recover --no-kubelet-restart): the node's passive
	// path, which lab bench compares breakglass's with.
	NoKubeletRestart bool
	Log              io.Writer // one line per lab event; nil: discard
}

// Lab is a running lab.
type Lab struct {
	Cluster     *talostest.Cluster
	Etcd        *EtcdCluster
	Webhook     *WebhookBackend
	Dir         string
	Talosconfig string // os:admin talosconfig for every node
	KubeBinDir  string

	opts     Options
	runner   *processRunner
	apiPorts map[string]int // node IP -> kube-apiserver port
	gate     chan struct{}
	ports    []*talostest.PortReservation // kube-apiserver ports
	kv       *clientv3.Client
	cancel   context.CancelFunc
	log      io.Writer

	closeOnce sync.Once
}

// Start brings a lab up: the Talos nodes, etcd with the generated config's
// etcd CA, the kube-apiserver files from the config's CAs, the service CIDR
// applied the Talos way, and the webhook backend. The kube-apiservers start
// at once; WaitReady tells when they are ready.
func Start(ctx context.Context, opts Options) (_ *Lab, err error) {
	if opts.Dir == "" {
		return nil, errors.New("lab: no directory")
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.Version == "" {
		opts.Version = OldVersion
	}
	if opts.KubeBinDir, err = Binaries(ctx, opts.KubeBinDir, opts.Log, opts.Version); err != nil {
		return nil, err
	}
	ips := opts.IPs
	if len(ips) == 0 {
		if ips, err = NodeIPs(opts.FirstIP, opts.Nodes); err != nil {
			return nil, err
		}
	}
	if len(ips) < opts.Nodes {
		return nil, fmt.Errorf("lab: %d addresses for %d nodes", len(ips), opts.Nodes)
	}
	ips = ips[:opts.Nodes]
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	l := &Lab{Dir: opts.Dir, KubeBinDir: opts.KubeBinDir, opts: opts, apiPorts: map[string]int{}, gate: make(chan struct{}), log: opts.Log}
	if l.log == nil {
		l.log = io.Discard
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for _, ip := range ips {
		r, err := l.reserve(ip, opts.APIPort)
		if err != nil {
			return nil, err
		}
		l.apiPorts[ip] = r.Port()
	}
	kubelet := opts.Kubelet
	if kubelet.TimeScale == 0 {
		kubelet.TimeScale = opts.TimeScale
	}
	l.runner = newProcessRunner(opts.KubeBinDir, l.gate)
	l.logf("starting %d emulated Talos node(s) on %s", len(ips), strings.Join(ips, ", "))
	var aescbc string
	if opts.AESCBCEncryption {
		var key [32]byte
		if _, err := rand.Read(key[:]); err != nil {
			return nil, err
		}
		aescbc = encryption.SecretOf(key[:]).Reveal()
	}
	l.Cluster, err = talostest.NewCluster(ctx, talostest.ClusterOptions{
		ServiceSubnets:         []string{ServiceCIDR}, // in the configs from the start: the kubelet fetches its first pod before any apply
		ControlPlanes:          opts.Nodes,
		Dir:                    filepath.Join(opts.Dir, "talos"),
		KubernetesVersion:      opts.Version,
		Endpoint:               "https://" + net.JoinHostPort(ips[0], strconv.Itoa(l.apiPorts[ips[0]])),
		IPs:                    ips,
		Port:                   opts.TalosPort,
		Runner:                 l.runner,
		BaseArgs:               l.baseArgs,
		Kubelet:                kubelet,
		Etcd:                   &talostest.EtcdOptions{ClientPort: opts.EtcdPort, PeerPort: opts.EtcdPeerPort, QuotaBytes: opts.EtcdQuotaBytes},
		Nodes:                  nodeOptions(opts),
		AESCBCEncryptionSecret: aescbc,
	})
	if err != nil {
		return nil, fmt.Errorf("lab: talos nodes: %w", err)
	}
	prov, err := configloader.NewFromBytes(l.Cluster.ControlPlaneConfig)
	if err != nil {
		return nil, fmt.Errorf("lab: generated config: %w", err)
	}
	cl := prov.Cluster()

	// etcd: its CA is the generated config's cluster.etcd.ca, as on Talos.
	ca, err := etcdtest.LoadCA(cl.Etcd().CA().Crt, cl.Etcd().CA().Key)
	if err != nil {
		return nil, fmt.Errorf("lab: etcd CA: %w", err)
	}
	if l.Etcd, err = newEtcdCluster(l.Cluster, ca); err != nil {
		return nil, fmt.Errorf("lab: etcd: %w", err)
	}
	l.logf("etcd: %d member(s) on %s (client-certificate auth, CA cluster.etcd.ca)", len(l.Etcd.Endpoints), strings.Join(l.Etcd.Endpoints, ","))
	tlsInfo, err := l.etcdTLS()
	if err != nil {
		return nil, err
	}
	if l.kv, err = clientv3.New(clientv3.Config{Endpoints: l.Etcd.Endpoints, TLS: tlsInfo, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		return nil, fmt.Errorf("lab: etcd client: %w", err)
	}

	for _, ip := range ips {
		if err := writeNodeSecrets(l.nodeDir(ip), ip, cl, l.Cluster.ControlPlaneConfig); err != nil {
			return nil, fmt.Errorf("lab: node %s files: %w", ip, err)
		}
	}
	// Each start renders encryptionconfig.yaml from the node's running
	// config, as Talos renders it into kube-apiserver's secrets directory
	// (a change of it is a new pod: talos.dev/secrets-version).
	l.runner.prepare = l.writeEncryption
	probeTLS, err := adminTLS(cl)
	if err != nil {
		return nil, err
	}
	l.runner.setClient(probeTLS)

	tc, err := l.Cluster.TalosconfigFor(role.Admin)
	if err != nil {
		return nil, err
	}
	l.Talosconfig = filepath.Join(opts.Dir, "talosconfig")
	if err := tc.Save(l.Talosconfig); err != nil {
		return nil, err
	}

	var bctx context.Context
	bctx, l.cancel = context.WithCancel(context.Background())
	if l.Webhook, err = newWebhookBackend(l.serviceNetworkUp); err != nil {
		return nil, err
	}
	l.Webhook.start(bctx)
	close(l.gate)
	l.logf("kube-apiserver %s starting on %s", opts.Version, strings.Join(l.APIServers(), ", "))
	return l, nil
}

// Close stops everything: kube-apiserver processes (and waits for them),
// the Talos nodes, the webhook backend and etcd. Safe to call twice.
func (l *Lab) Close() {
	l.closeOnce.Do(func() {
		if l.Webhook != nil {
			l.Webhook.stop()
		}
		if l.cancel != nil {
			l.cancel()
		}
		if l.Cluster != nil {
			l.Cluster.Close()
		}
		if l.kv != nil {
			l.kv.Close()
		}
		for _, r := range l.ports {
			r.Close()
		}
	})
}

func (l *Lab) logf(format string, args ...any) {
	fmt.Fprintf(l.log, "lab: "+format+"\n", args...)
}

// Nodes are the node addresses, in order.
func (l *Lab) Nodes() []string {
	var out []string
	for _, n := range l.Cluster.ControlPlanes() {
		out = append(out, n.IP)
	}
	return out
}

// APIServers are the kube-apiserver URLs, one per node.
func (l *Lab) APIServers() []string {
	var out []string
	for _, ip := range l.Nodes() {
		out = append(out, "https://"+net.JoinHostPort(ip, strconv.Itoa(l.apiPorts[ip])))
	}
	return out
}

// Runs lists every kube-apiserver container the lab has run.
func (l *Lab) Runs() []ContainerRun { return l.runner.Runs() }

// TalosClient connects to every node with the lab's admin talosconfig,
// through the real machinery client.
func (l *Lab) TalosClient(ctx context.Context) (*talos.Client, error) {
	return talos.Connect(ctx, talos.Options{Talosconfig: l.Talosconfig})
}

// Kube returns a Kubernetes client built from the admin kubeconfig that the
// first node serves through the Talos API.
func (l *Lab) Kube(ctx context.Context) (*KubeClient, error) {
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	kc, err := tc.AdminKubeconfig(ctx, l.Nodes()[0])
	if err != nil {
		return nil, err
	}
	return NewKubeClient(kc)
}

// EtcdKeyExists tells whether a key exists in the lab's etcd.
func (l *Lab) EtcdKeyExists(ctx context.Context, key string) (bool, error) {
	resp, err := l.kv.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return resp.Count > 0, nil
}

// serviceNetworkUp is the lab's model of the cluster's service network:
// up while every node runs a Kubernetes older than 1.33, or once the default
// ServiceCIDR exists (1.33+ networking needs it). The webhook backend, a
// pod behind a Service, is reachable only then.
func (l *Lab) serviceNetworkUp(ctx context.Context) bool {
	newest := 0
	for _, n := range l.Cluster.ControlPlanes() {
		c, _ := n.Rendered()
		if c == nil {
			continue
		}
		if m, err := minorOf(c.Image); err == nil && m > newest {
			newest = m
		}
	}
	if newest < 33 {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ok, err := l.EtcdKeyExists(cctx, "/registry/servicecidrs/kubernetes")
	return err == nil && ok
}

func (l *Lab) nodeDir(ip string) string { return filepath.Join(l.Dir, "nodes", ip) }

// baseArgs renders the flags Talos renders (talostest.TalosBaseArgs), with
// the node's files where Talos keeps them on disk, its own address and
// port, and the lab's etcd. Audit logging is left out (no disk churn).
func (l *Lab) baseArgs(n *talostest.Node, spec *k8s.APIServerConfigSpec) map[string]string {
	args := talostest.TalosBaseArgs(n, spec)
	for k, v := range args {
		if strings.HasPrefix(v, constants.KubernetesAPIServerSecretsDir+"/") || strings.HasPrefix(v, constants.KubernetesAPIServerConfigDir+"/") {
			args[k] = filepath.Join(l.nodeDir(n.IP), filepath.Base(v))
		}
		if strings.HasPrefix(k, "audit-") {
			delete(args, k)
		}
	}
	args["bind-address"] = n.IP
	args["secure-port"] = strconv.Itoa(l.apiPorts[n.IP])
	// SO_REUSEPORT: the lab holds the port between restarts (l.reserve)
	args["permit-port-sharing"] = "true"
	args["etcd-servers"] = n.EtcdEndpoint()
	for _, a := range loopbackOnlyArgs(spec.Image) {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		args[k] = v
	}
	return args
}

// loopbackOnlyArgs are the flags a kube-apiserver needs to run on a loopback
// address (version "v1.37.2" or an image ending in ":v1.37.2"). From 1.37
// the endpoint reconciler refuses a loopback advertise address
// (ValidateEndpointIP in pkg/controlplane/instance.go); a real node has a
// routable one, but the lab must never publish an address anything could
// dial, so from 1.37 the lab writes no kubernetes Endpoints at all.
func loopbackOnlyArgs(version string) []string {
	if i := strings.LastIndex(version, ":"); i >= 0 {
		version = version[i+1:]
	}
	if m, err := minorOf(":" + version); err == nil && m >= 37 {
		return []string{"--endpoint-reconciler-type=none"}
	}
	return nil
}

func (l *Lab) etcdTLS() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(l.Etcd.CertPEM, l.Etcd.KeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(l.Etcd.CACertPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// adminTLS is a system:masters client of the cluster CA, for the lab's /readyz watch.
func adminTLS(cl talosconfig.ClusterConfig) (*tls.Config, error) {
	ca, err := sidero.NewCertificateAuthorityFromCertificateAndKey(cl.IssuingCA())
	if err != nil {
		return nil, err
	}
	kp, err := sidero.NewKeyPair(ca, sidero.CommonName("lab-kubelet-probe"), sidero.Organization("system:masters"),
		sidero.NotAfter(time.Now().Add(certLifetime)),
		sidero.KeyUsage(x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment),
		sidero.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cl.IssuingCA().Crt)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*kp.Certificate}, MinVersion: tls.VersionTLS12}, nil
}

// NodeIPs are n consecutive loopback addresses from first ("": FirstIP),
// within first's /24.
func NodeIPs(first string, n int) ([]string, error) {
	if first == "" {
		first = FirstIP
	}
	const hint = "take a first address in 127.0.0.0/8 with room for the nodes before .255 of its /24, e.g. --first-ip 127.0.1.11"
	addr, err := netip.ParseAddr(first)
	if err != nil || !addr.Is4() || !addr.IsLoopback() {
		return nil, failure.Input(hint, "the first node address %q is not an IPv4 loopback address (127.0.0.0/8)", first)
	}
	if b := addr.As4(); b[3] == 0 || int(b[3])+n-1 > 254 {
		return nil, failure.Input(hint, "%d node(s) from %s do not fit in %s", n, first, netip.PrefixFrom(addr, 24).Masked())
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, addr.String())
		addr = addr.Next()
	}
	return out, nil
}

// reserve holds ip:port (0: a free port) until Close; the servers that
// listen there set SO_REUSEPORT (kube-apiserver --permit-port-sharing, etcd's
// SocketOpts.ReusePort).
func (l *Lab) reserve(ip string, port int) (*talostest.PortReservation, error) {
	r, err := talostest.ReservePort(ip, port)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	l.ports = append(l.ports, r)
	return r, nil
}

// ErrNotReady: kube-apiserver did not become ready in time.
var ErrNotReady = errors.New("kube-apiserver not ready")

// Current returns each node's latest kube-apiserver container run.
func (l *Lab) Current() map[string]ContainerRun {
	out := map[string]ContainerRun{}
	for _, r := range l.runner.Runs() {
		out[r.Node] = r
	}
	return out
}

// WaitReady waits until the latest kube-apiserver container of every node
// answers /readyz with 200 and has not exited.
func (l *Lab) WaitReady(ctx context.Context, timeout time.Duration) error {
	return l.WaitReadyVersion(ctx, "", timeout)
}

// WaitReadyVersion is WaitReady, and the ready containers must run this
// Kubernetes version (the image tag), if not empty.
func (l *Lab) WaitReadyVersion(ctx context.Context, version string, timeout time.Duration) error {
	return l.waitReadyRuns(ctx, timeout, func(r ContainerRun) (bool, error) {
		return version == "" || strings.HasSuffix(r.Image, ":"+version), nil
	})
}

// waitReadyRuns waits until the latest kube-apiserver container of every
// node is ready, has not exited, and is one that want accepts; an error
// from want ends the wait.
func (l *Lab) waitReadyRuns(ctx context.Context, timeout time.Duration, want func(ContainerRun) (bool, error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := l.runner.changed()
		cur := l.Current()
		var waiting []string
		for _, ip := range l.Nodes() {
			r, ok := cur[ip]
			if !ok {
				waiting = append(waiting, ip)
				continue
			}
			accepted, err := want(r)
			if err != nil {
				return err
			}

			if r.Ready.IsZero() || !r.Exited.IsZero() || !accepted {
				waiting = append(waiting, ip)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%w after %s on %s", ErrNotReady, timeout, strings.Join(waiting, ", "))
		case <-changed:
		}
	}
}
