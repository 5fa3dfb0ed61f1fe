package lab

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// EtcdCluster is the lab's etcd: real embedded members with TLS and
// client-certificate auth, their CA the Talos config's cluster.etcd.ca. One
// member per node (as on Talos, each kube-apiserver talks to its node's
// member), or one member for all nodes.
type EtcdCluster struct {
	Endpoints []string // client URLs, one per member, in node order
	// A client certificate the CA signed, for the lab's own reads.
	CACertPEM, CertPEM, KeyPEM []byte

	members []*embed.Etcd
	byNode  map[string]string            // node IP -> its member's client URL
	peers   []*talostest.PortReservation // the members' peer ports
}

// startEtcd starts one member on each of ips, on the given client ports
// (reserved by the caller) and peer ports it reserves, each with the space
// quota given (0: etcd's default), and waits until the cluster has a leader. The members listen with SO_REUSEPORT, next to the
// reservations.
func startEtcd(dir string, ca *etcdtest.CA, names, ips []string, clientPorts []int, quota int64) (_ *EtcdCluster, err error) {
	c := &EtcdCluster{CACertPEM: ca.CertPEM, byNode: map[string]string{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.CertPEM, c.KeyPEM, err = ca.IssueClient("breakglass-lab", certLifetime); err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	peers := make([]url.URL, len(ips))
	var initial []string
	for i, ip := range ips {
		r, err := talostest.ReservePort(ip, 0)
		if err != nil {
			return nil, err
		}
		c.peers = append(c.peers, r)
		peers[i] = url.URL{Scheme: "http", Host: r.Addr()}
		initial = append(initial, names[i]+"="+peers[i].String())
	}
	for i, ip := range ips {
		mdir := filepath.Join(dir, names[i])
		if err := os.MkdirAll(mdir, 0o700); err != nil {
			return nil, err
		}
		crt, key, err := ca.IssueServer([]string{ip, "127.0.0.1", "localhost"}, certLifetime)
		if err != nil {
			return nil, err
		}
		crtFile, keyFile := filepath.Join(mdir, "server.crt"), filepath.Join(mdir, "server.key")
		if err := os.WriteFile(crtFile, crt, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			return nil, err
		}
		curl := url.URL{Scheme: "https", Host: net.JoinHostPort(ip, strconv.Itoa(clientPorts[i]))}
		cfg := embed.NewConfig()
		cfg.Name = names[i]
		cfg.Dir = filepath.Join(mdir, "data")
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.LogLevel = "error"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: crtFile, KeyFile: keyFile, TrustedCAFile: caFile, ClientCertAuth: true}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peers[i]}, []url.URL{peers[i]}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "breakglass-lab"
		cfg.SocketOpts = transport.SocketOpts{ReusePort: true}
		cfg.QuotaBackendBytes = quota
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			return nil, fmt.Errorf("etcd member %s: %w", names[i], err)
		}
		c.members = append(c.members, e)
		c.Endpoints = append(c.Endpoints, curl.String())
		c.byNode[ip] = curl.String()
	}
	timeout := time.After(60 * time.Second)
	for i, e := range c.members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			return nil, fmt.Errorf("etcd member %s failed: %w", names[i], err)
		case <-timeout:
			return nil, errors.New("etcd not ready after 60s")
		}
	}
	return c, nil
}

// EndpointFor is the member a node's kube-apiserver talks to: its own when
// each node has one, else the only one.
func (c *EtcdCluster) EndpointFor(ip string) string {
	if u, ok := c.byNode[ip]; ok {
		return u
	}
	return c.Endpoints[0]
}

// Close stops every member.
func (c *EtcdCluster) Close() {
	for _, e := range c.members {
		e.Close()
	}
	c.members = nil
	for _, r := range c.peers {
		r.Close()
	}
	c.peers = nil
}
