package recovery

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
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

// NeedsTalos tells whether reaching etcd needs the Talos API: for the
// nodes' endpoints (none given), or to mint a client certificate (none
// given, and an endpoint is https://). Explicit certificates with
// endpoints, or plain http:// endpoints, need no Talos access at all.
func (o EtcdOptions) NeedsTalos() bool {
	if len(o.Endpoints) == 0 {
		return true
	}
	return !o.HasClientCert() && !plainHTTP(o.Endpoints)
}

// HasClientCert: a client certificate and its key are given.
func (o EtcdOptions) HasClientCert() bool { return o.Cert != "" && o.Key != "" }

// plainHTTP: every endpoint is an etcd without TLS.
func plainHTTP(endpoints []string) bool {
	for _, e := range endpoints {
		if !strings.HasPrefix(e, "http://") {
			return false
		}
	}
	return len(endpoints) > 0
}

// Check refuses, before anything is dialled, half a client certificate, a
// client certificate without the CA to check etcd's own, and endpoints
// that are not URLs: without them breakglass would fall back to minting a
// certificate through Talos and say something about a talosconfig, or fail
// TLS and blame a flag never given. The combinations that are complete
// only with a talosconfig (a minted certificate, the nodes' endpoints) are
// explained when it cannot be read (TalosForEtcd).
func (o EtcdOptions) Check() error {
	switch {
	case o.Cert != "" && o.Key == "":
		return failure.Input("give the client key too: --etcd-key FILE (etcdctl --key)", "--etcd-cert needs --etcd-key")
	case o.Key != "" && o.Cert == "":
		return failure.Input("give the client certificate too: --etcd-cert FILE (etcdctl --cert)", "--etcd-key needs --etcd-cert")
	case o.Cert != "" && o.CACert == "" && !plainHTTP(o.Endpoints):
		// etcd's server certificate is signed by the etcd CA, which no system trusts.
		return failure.Input("give the etcd CA too: --etcd-cacert FILE (etcdctl --cacert; on Talos, cluster.etcd.ca of the machine config)",
			"--etcd-cert and --etcd-key need --etcd-cacert, the CA etcd's own certificate is checked against")
	}
	for _, e := range o.Endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return failure.Input("give it as https://HOST:2379 (or http://HOST:2379 for an etcd without TLS)", "--etcd-endpoints %q is not an etcd client URL", e)
		}
	}
	return nil
}

// withNodes gives a client certificate without endpoints the nodes'
// https://NODE:2379, as ConnectEtcd would from the Talos client's nodes:
// with -n, no talosconfig is needed for them.
func (o EtcdOptions) withNodes(nodes []string) EtcdOptions {
	if len(o.Endpoints) == 0 && o.HasClientCert() {
		for _, n := range nodes {
			o.Endpoints = append(o.Endpoints, "https://"+net.JoinHostPort(n, "2379"))
		}
	}
	return o
}

// TalosForEtcd opens the Talos client that reaching etcd needs (nil when
// it needs none: close it when not nil), and returns the options to reach
// etcd with (a client certificate without endpoints goes to t's nodes).
// When etcd options were given that are not enough without a talosconfig,
// and it cannot be read, the error is bad input saying which etcd flags
// are missing: the operator meant to reach etcd directly.
func TalosForEtcd(ctx context.Context, o EtcdOptions, t talos.Options) (*talos.Client, EtcdOptions, error) {
	o = o.withNodes(t.Nodes)
	if !o.NeedsTalos() {
		return nil, o, nil
	}
	tc, err := talos.Connect(ctx, t)
	if err == nil {
		return tc, o, nil
	}
	given := o.given()
	if len(given) == 0 || failure.Code(err) != int(failure.BadInput) {
		return nil, o, err // no etcd flags: the talosconfig is the way, and its error says what is wrong
	}
	// With -n the endpoints are the nodes' (withNodes); only the
	// certificate then needs the talosconfig.
	var missing, give, how []string
	if len(o.Endpoints) == 0 && len(t.Nodes) == 0 {
		missing, give = append(missing, "--etcd-endpoints"), append(give, "--etcd-endpoints https://HOST:2379")
		how = append(how, "at https://NODE:2379 of the talosconfig's nodes")
	}
	if !o.HasClientCert() {
		if o.CACert == "" {
			missing, give = append(missing, "--etcd-cacert"), append(give, "--etcd-cacert FILE")
		}
		missing, give = append(missing, "--etcd-cert", "--etcd-key"), append(give, "--etcd-cert FILE", "--etcd-key FILE")
		how = append(how, "with a client certificate minted from the Talos etcd CA")
	}
	them := "them"
	if len(missing) == 1 {
		them = "it"
	}
	hint := "to reach etcd directly, give " + strings.Join(give, " ") + " (etcdctl's names)"
	if len(missing) == 1 { // only the endpoints: the nodes will do
		hint += ", or the control-plane nodes with -n NODE"
	}
	return nil, o, failure.Input(hint+"; or a talosconfig it can read: --talosconfig PATH",
		"%s given, but not %s: without %s breakglass reaches etcd %s, and %v", joinFlags(given), joinFlags(missing), them, strings.Join(how, ", "), err)
}

// given are the etcd connection flags set (on the command line or as ETCDCTL_*).
func (o EtcdOptions) given() []string {
	var out []string
	for _, x := range []struct {
		name string
		set  bool
	}{{"--etcd-endpoints", len(o.Endpoints) > 0}, {"--etcd-cacert", o.CACert != ""}, {"--etcd-cert", o.Cert != ""}, {"--etcd-key", o.Key != ""}} {
		if x.set {
			out = append(out, x.name)
		}
	}
	return out
}

// joinFlags is "--a", "--a and --b", "--a, --b and --c".
func joinFlags(flags []string) string {
	if len(flags) <= 1 {
		return strings.Join(flags, "")
	}
	return strings.Join(flags[:len(flags)-1], ", ") + " and " + flags[len(flags)-1]
}

// DialEtcd connects to etcd as o says, through the Talos API (t) only
// when it must (TalosForEtcd); the Talos client is closed once connected.
func DialEtcd(ctx context.Context, o EtcdOptions, t talos.Options) (*etcd.Client, error) {
	tc, o, err := TalosForEtcd(ctx, o, t)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		defer tc.Close()
	}
	return ConnectEtcd(ctx, tc, o)
}

// SaveSnapshot saves a full etcd snapshot into a new file at path,
// verified, through fx (a dry run writes nothing): straight from etcd when
// endpoints or a client certificate are given, otherwise through the Talos
// API of t's first node (os:operator is enough, no etcd certificate
// needed). source says where it came from.
func SaveSnapshot(ctx context.Context, o EtcdOptions, t talos.Options, fx Effects, path string) (info *etcd.SnapshotInfo, source string, err error) {
	if len(o.Endpoints) > 0 || o.Cert != "" {
		ec, err := DialEtcd(ctx, o, t)
		if err != nil {
			return nil, "", err
		}
		defer ec.Close()
		info, err = ec.Snapshot(ctx, path, fx.EtcdWriter(ec))
		return info, "etcd " + strings.Join(ec.Endpoints(), ","), err
	}
	tc, err := talos.Connect(ctx, t)
	if err != nil {
		return nil, "", err
	}
	defer tc.Close()
	nodes := tc.Nodes()
	if len(nodes) == 0 {
		return nil, "", failure.Input("-n NODE", "no target node for the snapshot")
	}
	info, err = snapshotThroughTalos(ctx, tc, nodes[0], path, fx.EtcdWriter(nil))
	return info, "the Talos API on node " + nodes[0], err
}

// snapshotThroughTalos saves a full etcd snapshot that node streams
// through the Talos API (EtcdSnapshot) into a new file at path through w;
// a dry-run writer does not even open the stream.
func snapshotThroughTalos(ctx context.Context, tc *talos.Client, node, path string, w etcd.Writer) (*etcd.SnapshotInfo, error) {
	if w.DryRun() {
		return etcd.WriteSnapshot(strings.NewReader(""), path, w)
	}
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() { pw.CloseWithError(tc.EtcdSnapshot(ctx, node, pw)) }()
	return etcd.WriteSnapshot(pr, path, w)
}

// ConnectEtcd connects to the cluster's etcd. With explicit endpoints and
// certificates (or plain http:// endpoints) it needs no Talos access at
// all; otherwise it reads the etcd CA from the first node's machine config
// (os:admin) and mints a client certificate in memory, valid one hour at
// most and never written to disk. tc may be nil when Talos is not needed.
func ConnectEtcd(ctx context.Context, tc *talos.Client, o EtcdOptions) (*etcd.Client, error) {
	cfg := etcd.Config{Endpoints: o.Endpoints, CACertFile: o.CACert, CertFile: o.Cert, KeyFile: o.Key, Prefix: o.Prefix, DialTimeout: o.DialTimeout}
	if !o.NeedsTalos() {
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
