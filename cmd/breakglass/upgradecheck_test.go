package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// upgrade-check's scripts (testdata/upgradecheck/*.txtar) run the real
// command against emulated Talos nodes whose etcd member is a real etcd
// signed by the cluster's own etcd CA: the gate mints its client
// certificate from the machine config, as on a cluster.
func TestUpgradeCheckScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:   "testdata/upgradecheck",
		Setup: scriptSetup,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"gatecluster": cmdGateCluster,
			"gatewebhook": cmdGateWebhook,
		},
	})
}

// gatecluster [-k8s VERSION] starts one control plane running kube-apiserver
// VERSION (default 1.33.13) and its etcd; sets TALOSCONFIG (os:admin, its
// context "gate", and a context "lost" whose endpoint accepts connections
// and never answers), NODE1 and GATE_ETCD.
func cmdGateCluster(ts *testscript.TestScript, neg bool, args []string) {
	k8s := "1.33.13"
	if len(args) == 2 && args[0] == "-k8s" {
		k8s = args[1]
	}
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	ts.Check(err)
	ca, err := etcdtest.LoadCA(bundle.Certs.Etcd.Crt, bundle.Certs.Etcd.Key)
	ts.Check(err)
	// The member listens where a Talos node's does, NODE:2379, on a
	// loopback address of its own (another script may hold another).
	var srv *etcdtest.Server
	var ip string
	for attempt := 0; srv == nil; attempt++ {
		ip = fmt.Sprintf("127.77.%d.%d", rand.IntN(250)+1, rand.IntN(250)+1)
		srv, err = etcdtest.Start(ts.MkAbs(fmt.Sprintf("etcd%d", attempt)), etcdtest.WithCA(ca), etcdtest.WithHost(ip), etcdtest.WithClientPort(2379))
		if err != nil && attempt == 9 {
			ts.Fatalf("etcd on a loopback address's port 2379: %v", err)
		}
	}
	ts.Defer(srv.Close)
	c, err := talostest.NewCluster(context.Background(), talostest.ClusterOptions{Dir: ts.MkAbs("talos"), Secrets: bundle, KubernetesVersion: k8s, ClusterName: "gate", IPs: []string{ip},
		EtcdMember: func(*talostest.Node) (talostest.EtcdAccess, error) {
			tlsConf, err := srv.ClientTLS()
			return talostest.EtcdAccess{Endpoint: srv.Endpoints[0], TLS: tlsConf}, err
		}})
	ts.Check(err)
	ts.Defer(c.Close)
	path, err := c.Talosconfig(role.Admin)
	ts.Check(err)
	cfg, err := config.Open(path)
	ts.Check(err)
	gate := *cfg.Contexts[cfg.Context]
	lost := gate
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Defer(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			ts.Defer(func() { conn.Close() })
		}
	}()
	lost.Endpoints, lost.Nodes = []string{l.Addr().String()}, []string{"127.0.9.9"}
	cfg.Contexts = map[string]*config.Context{"gate": &gate, "lost": &lost}
	cfg.Context = "gate"
	final := ts.MkAbs("talosconfig")
	ts.Check(cfg.Save(final))
	ts.Setenv("TALOSCONFIG", final)
	ts.Setenv("GATE_ETCD", srv.Endpoints[0])
	ts.Setenv("NODE1", c.Nodes[0].IP)
	ts.Value(clusterKey).(*clusterHolder).c = c
	gateServers.Store(srv.Endpoints[0], srv)
	ts.Defer(func() { gateServers.Delete(srv.Endpoints[0]) })
}

// gatewebhook NAME puts a fail-closed catch-all webhook configuration in
// the gatecluster's etcd, as kube-apiserver stores it.
func cmdGateWebhook(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: gatewebhook NAME")
	}
	v, ok := gateServers.Load(ts.Getenv("GATE_ETCD"))
	if !ok {
		ts.Fatalf("no gatecluster")
	}
	kv, err := v.(*etcdtest.Server).Client()
	ts.Check(err)
	defer kv.Close()
	b, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook(args[0], "https://127.0.0.1:1/validate"), admissionregistrationv1.SchemeGroupVersion)
	ts.Check(err)
	_, err = kv.Put(context.Background(), "/registry/validatingwebhookconfigurations/"+args[0], string(b))
	ts.Check(err)
}

// gateServers are the gateclusters' etcds by endpoint: scripts run in
// parallel in one process.
var gateServers sync.Map
