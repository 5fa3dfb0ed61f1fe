package recovery

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
)

// EtcdOptions say how to reach etcd, with etcdctl's names.
type EtcdOptions struct {
	Endpoints         []string // default: https://NODE:2379 for the target nodes
	CACert, Cert, Key string   // files; when absent, a client certificate is minted from the Talos etcd CA
	Prefix            string   // kube-apiserver's --etcd-prefix; default /registry
	CertValidFor      time.Duration
	DialTimeout       time.Duration
}

// needsTalos tells whether reaching etcd needs the Talos API: for default
// endpoints, or to mint a client certificate.
func (o EtcdOptions) needsTalos() bool {
	if len(o.Endpoints) == 0 {
		return true
	}
	if o.Cert != "" && o.Key != "" {
		return false
	}
	for _, e := range o.Endpoints {
		if !strings.HasPrefix(e, "http://") {
			return true
		}
	}
	return false
}

// ConnectEtcd connects to the cluster's etcd. With explicit endpoints and
// certificates (or plain http:// endpoints) it needs no Talos access at
// all; otherwise it reads the etcd CA from the first node's machine config
// (os:admin) and mints a client certificate in memory, valid one hour at
// most and never written to disk. tc may be nil when Talos is not needed.
func ConnectEtcd(ctx context.Context, tc *talos.Client, o EtcdOptions) (*etcd.Client, error) {
	cfg := etcd.Config{Endpoints: o.Endpoints, CACertFile: o.CACert, CertFile: o.Cert, KeyFile: o.Key, Prefix: o.Prefix, DialTimeout: o.DialTimeout}
	if !o.needsTalos() {
		return etcd.Connect(ctx, cfg)
	}
	if tc == nil {
		return nil, failure.Input("pass --etcd-endpoints with --etcd-cacert/--etcd-cert/--etcd-key, or a talosconfig", "etcd needs either certificates or Talos access to mint one")
	}
	nodes := tc.Nodes()
	if len(nodes) == 0 {
		return nil, failure.Input("name the control-plane nodes with -n NODE[,NODE...]", "no target nodes: the talosconfig context names none")
	}
	if len(cfg.Endpoints) == 0 {
		for _, n := range nodes {
			cfg.Endpoints = append(cfg.Endpoints, "https://"+net.JoinHostPort(n, "2379"))
		}
	}
	if o.Cert == "" {
		if !tc.CanApply() {
			return nil, talos.NewNodeError(nodes[0], "read the etcd CA", fmt.Errorf("%w: minting an etcd client certificate needs the etcd CA from the machine config, readable with os:admin only; this talosconfig is %s", talos.ErrPermission, tc.Role()),
				"pass etcd client certificates: --etcd-cacert CA --etcd-cert CRT --etcd-key KEY",
				"or take a snapshot, which os:operator may: breakglass etcd snapshot --out FILE")
		}
		mc, err := tc.ReadMachineConfig(ctx, nodes[0])
		if err != nil {
			return nil, err
		}
		facts, err := talos.ReadFacts(mc.Bytes)
		if err != nil {
			return nil, talos.NewNodeError(nodes[0], "read the etcd CA", err)
		}
		if len(facts.EtcdCACert) == 0 || len(facts.EtcdCAKey) == 0 {
			return nil, talos.NewNodeError(nodes[0], "read the etcd CA", fmt.Errorf("the machine config has no cluster.etcd.ca"))
		}
		validFor := o.CertValidFor
		if validFor <= 0 || validFor > time.Hour {
			validFor = time.Hour
		}
		crt, key, err := etcd.MintClientCert(facts.EtcdCACert, facts.EtcdCAKey, validFor)
		if err != nil {
			return nil, talos.NewNodeError(nodes[0], "mint an etcd client certificate", err)
		}
		cfg.CertPEM, cfg.KeyPEM = crt, key
		if o.CACert == "" {
			cfg.CACertPEM = facts.EtcdCACert
		}
	}
	return etcd.Connect(ctx, cfg)
}
