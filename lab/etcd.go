package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// EtcdCluster is the lab's etcd: one real member per node, run by the node's emulated
// etcd service as machined runs it (talostest.EtcdOptions: its own data directory
// under the node's EPHEMERAL, stopped, wiped, rejoined or bootstrapped from a snapshot
// on its own), TLS with client-certificate auth, its CA the Talos config's
// cluster.etcd.ca. Each kube-apiserver talks to its node's member, as on Talos.
type EtcdCluster struct {
	Endpoints []string // client URLs, one per member, in node order
	// A client certificate the CA signed, for the lab's own reads.
	CACertPEM, CertPEM, KeyPEM []byte

	byNode map[string]string // node IP -> its member's client URL
}

// newEtcdCluster describes the members the cluster's control planes run, with a client
// certificate for the lab.
func newEtcdCluster(c *talostest.Cluster, ca *etcdtest.CA) (*EtcdCluster, error) {
	e := &EtcdCluster{CACertPEM: ca.CertPEM, byNode: map[string]string{}}

	var err error
	if e.CertPEM, e.KeyPEM, err = ca.IssueClient("breakglass-lab", certLifetime); err != nil {
		return nil, err
	}

	for _, n := range c.ControlPlanes() {
		e.Endpoints = append(e.Endpoints, n.EtcdEndpoint())
		e.byNode[n.IP] = n.EtcdEndpoint()
	}

	return e, nil
}

// EndpointFor is the client URL of the node's member.
func (c *EtcdCluster) EndpointFor(ip string) string { return c.byNode[ip] }

// etcdNode is the emulated node at ip.
func (l *Lab) etcdNode(ip string) (*talostest.Node, error) {
	n := l.Cluster.Node(ip)
	if n == nil || n.EtcdEndpoint() == "" {
		return nil, fmt.Errorf("lab: no etcd member on node %s", ip)
	}

	return n, nil
}

// DestroyEtcdData is a lost disk under the node's etcd member: the member dies and its
// data directory is emptied. The node's etcd service restarts it every 5 s and each
// start fails (talostest.Node.DestroyEtcdData); the node's kube-apiserver pod is torn
// down while its etcd does not run.
func (l *Lab) DestroyEtcdData(ip string) error {
	n, err := l.etcdNode(ip)
	if err != nil {
		return err
	}

	l.logf("node %s: etcd member's data destroyed", ip)

	return n.DestroyEtcdData()
}

// KillEtcd kills the node's etcd member (SIGKILL); its service starts it again 5 s later.
func (l *Lab) KillEtcd(ip string) error {
	n, err := l.etcdNode(ip)
	if err != nil {
		return err
	}

	return n.KillEtcd()
}

// EtcdState is the node's etcd service as machined reports it.
func (l *Lab) EtcdState(ip string) talostest.EtcdServiceState {
	if n, err := l.etcdNode(ip); err == nil {
		return n.EtcdState()
	}

	return talostest.EtcdServiceState{}
}

// WaitEtcd waits, up to timeout, until cond holds for the node's etcd service.
func (l *Lab) WaitEtcd(ctx context.Context, ip string, timeout time.Duration, what string, cond func(talostest.EtcdServiceState) bool) error {
	n, err := l.etcdNode(ip)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	st, err := n.WaitEtcd(ctx, cond)
	if err != nil {
		return fmt.Errorf("lab: node %s: etcd not %s after %s: %w (service %s: %s)", ip, what, timeout, err, st.State, st.LastEvent)
	}

	return nil
}

// EtcdHealthy is a running etcd service whose last health check passed.
func EtcdHealthy(st talostest.EtcdServiceState) bool {
	return st.State == talostest.ServiceRunning && st.HealthKnown && st.Healthy
}
