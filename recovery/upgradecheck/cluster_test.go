package upgradecheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// testCluster is emulated Talos nodes (the real machinery client talks to
// them), each control plane running machined's etcd service around a real
// member of its own, with TLS and client-certificate auth, at NODE:2379 as
// on Talos: the gate finds etcd and mints its client certificate from the
// machine config, as on a real cluster. Its kube-system namespace is
// stored, as kube-apiserver stores it at its first start.
type testCluster struct {
	cluster     *talostest.Cluster
	talosconfig string
	kv          *clientv3.Client // the test's own client of the members
	uid         string           // the kube-system namespace's UID
	bundle      string           // testBundle's file, as the operator keeps it offline
}

type clusterSpec struct {
	controlPlanes int
	kubernetes    string // default 1.33.13
	talos         string // every node's Talos version; default the emulator's
	quota         int64
}

var testBundle = func() *secrets.Bundle {
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	if err != nil {
		panic(err)
	}
	return b
}()

// newBundle is a secrets bundle of its own, for a test that needs another
// cluster's (testBundle is every test cluster's).
func newBundle(t *testing.T) *secrets.Bundle {
	t.Helper()
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// saveBundle writes b as the operator keeps it offline (secrets.yaml, in a
// directory of its own) and returns its path.
func saveBundle(t *testing.T, b *secrets.Bundle) string {
	t.Helper()
	raw, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each cluster's nodes get loopback addresses of their own, 127.88.R.S+i,
// so that every member listens on NODE:2379 as on Talos while the tests
// run side by side.
var (
	ipsMu   sync.Mutex
	ipsUsed = map[[2]int]bool{}
)

func loopbackIPs(n int) []string {
	ipsMu.Lock()
	defer ipsMu.Unlock()
	for {
		k := [2]int{rand.IntN(250) + 1, rand.IntN(24)*10 + 1}
		if ipsUsed[k] {
			continue
		}
		ipsUsed[k] = true
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("127.88.%d.%d", k[0], k[1]+i))
		}
		return out
	}
}

func newTestCluster(t *testing.T, spec clusterSpec) *testCluster {
	t.Helper()
	if spec.controlPlanes == 0 {
		spec.controlPlanes = 1
	}
	if spec.kubernetes == "" {
		spec.kubernetes = "1.33.13"
	}
	nodes := make([]talostest.NodeOptions, spec.controlPlanes)
	for i := range nodes {
		nodes[i].TalosVersion = spec.talos
	}
	c, err := talostest.NewCluster(t.Context(), talostest.ClusterOptions{ControlPlanes: spec.controlPlanes, Dir: t.TempDir(), Secrets: testBundle,
		KubernetesVersion: spec.kubernetes, Nodes: nodes, IPs: loopbackIPs(spec.controlPlanes),
		Etcd: &talostest.EtcdOptions{ClientPort: 2379, QuotaBytes: spec.quota}, Kubelet: talostest.KubeletOptions{TimeScale: 0.02}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	path, err := c.Talosconfig(role.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{cluster: c, talosconfig: path, kv: membersClient(t, c), uid: fmt.Sprintf("%08x-0000-4000-8000-%012x", rand.Uint32(), rand.Uint64()&(1<<48-1))}
	tc.bundle = saveBundle(t, testBundle)
	tc.put(t, "/registry/namespaces/kube-system", etcdtest.Namespace("kube-system", tc.uid))
	return tc
}

// membersClient is a client of every member, its certificate signed by the
// cluster's etcd CA.
func membersClient(t *testing.T, c *talostest.Cluster) *clientv3.Client {
	t.Helper()
	ca, err := etcdtest.LoadCA(c.EtcdCA().Crt, c.EtcdCA().Key)
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := ca.ClientTLS("upgradecheck-test")
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, n := range c.ControlPlanes() {
		endpoints = append(endpoints, n.EtcdEndpoint())
	}
	kv, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, TLS: tlsConf, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	return kv
}

// options are the gate's for this cluster, as an operator gives them: the
// talosconfig, and nothing of etcd (NODE:2379, a certificate minted from
// the machine config's etcd CA).
func (tc *testCluster) options(to string) Options {
	return Options{Talos: talos.Options{Talosconfig: tc.talosconfig, ConnectTimeout: 5 * time.Second}, To: minor(to), SecretsBundle: tc.bundle}
}

// minor is a version the test knows to be good.
func minor(v string) Minor {
	m, err := ParseMinor(v)
	if err != nil {
		panic(err)
	}
	return m
}

func (tc *testCluster) put(t *testing.T, key string, value []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := tc.kv.Put(ctx, key, string(value)); err != nil {
		t.Fatal(err)
	}
}
