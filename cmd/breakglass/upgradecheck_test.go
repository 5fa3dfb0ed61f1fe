package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/recovery/upgradecheck"
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

// gatecluster [-k8s VERSION] [-evil] starts one control plane running
// kube-apiserver VERSION (default 1.33.13) and machined's etcd service
// around a real member at NODE:2379, as on Talos, holding the kube-system
// namespace; sets TALOSCONFIG (os:admin, its context "gate", and a context
// "lost" whose endpoint accepts connections and never answers), NODE1 and
// GATE_ETCD. -evil adds a context of the same cluster whose name holds a
// carriage return, and erase-line and conceal sequences (evilContext).
func cmdGateCluster(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("gatecluster", flag.ContinueOnError)
	k8s := fs.String("k8s", "1.33.13", "kube-apiserver's version")
	evil := fs.Bool("evil", false, "add a context named with terminal sequences")
	ts.Check(fs.Parse(args))
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	ts.Check(err)
	// The cluster's secrets bundle, as an operator keeps it offline:
	// secrets.yaml in the script's directory.
	raw, err := yaml.Marshal(bundle)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs("secrets.yaml"), raw, 0o600))
	// The node on a loopback address of its own (another script may hold
	// another), its member at NODE:2379.
	var c *talostest.Cluster
	for attempt := 0; c == nil; attempt++ {
		ip := fmt.Sprintf("127.77.%d.%d", rand.IntN(250)+1, rand.IntN(250)+1)
		c, err = talostest.NewCluster(context.Background(), talostest.ClusterOptions{Dir: ts.MkAbs(fmt.Sprintf("talos%d", attempt)), Secrets: bundle, KubernetesVersion: *k8s,
			ClusterName: "gate", IPs: []string{ip}, Etcd: &talostest.EtcdOptions{ClientPort: 2379}, Kubelet: talostest.KubeletOptions{TimeScale: 0.02}})
		if err != nil && attempt == 9 {
			ts.Fatalf("a node with its etcd at a loopback address's port 2379: %v", err)
		}
	}
	ts.Defer(c.Close)
	endpoint := c.Nodes[0].EtcdEndpoint()
	kv, err := etcdClient(bundle, endpoint)
	ts.Check(err)
	ts.Defer(func() { kv.Close() })
	// kube-apiserver made the kube-system namespace at its first start.
	_, err = kv.Put(context.Background(), "/registry/namespaces/kube-system", string(etcdtest.Namespace("kube-system", "5f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f")))
	ts.Check(err)
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
	if *evil {
		same := gate
		cfg.Contexts[evilContext] = &same
	}
	cfg.Context = "gate"
	final := ts.MkAbs("talosconfig")
	ts.Check(cfg.Save(final))
	ts.Setenv("TALOSCONFIG", final)
	ts.Setenv("GATE_ETCD", endpoint)
	ts.Setenv("NODE1", c.Nodes[0].IP)
	ts.Value(clusterKey).(*clusterHolder).c = c
	gateClients.Store(endpoint, kv)
	ts.Defer(func() { gateClients.Delete(endpoint) })
}

// etcdClient is a client of the member at endpoint, its certificate signed
// by the cluster's etcd CA.
func etcdClient(bundle *secrets.Bundle, endpoint string) (*clientv3.Client, error) {
	ca, err := etcdtest.LoadCA(bundle.Certs.Etcd.Crt, bundle.Certs.Etcd.Key)
	if err != nil {
		return nil, err
	}
	tlsConf, err := ca.ClientTLS("gate-script")
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tlsConf})
}

// evilContext is a context name that, printed raw, moves the cursor to the
// line's start, erases it, writes GO and conceals what follows.
const evilContext = "gate\r\x1b[2KGO\x1b[8m"

// gatewebhook NAME puts a fail-closed catch-all webhook configuration in
// the gatecluster's etcd, as kube-apiserver stores it.
func cmdGateWebhook(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: gatewebhook NAME")
	}
	v, ok := gateClients.Load(ts.Getenv("GATE_ETCD"))
	if !ok {
		ts.Fatalf("no gatecluster")
	}
	b, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook(args[0], "https://127.0.0.1:1/validate"), admissionregistrationv1.SchemeGroupVersion)
	ts.Check(err)
	_, err = v.(*clientv3.Client).Put(context.Background(), "/registry/validatingwebhookconfigurations/"+args[0], string(b))
	ts.Check(err)
}

// gateClients are the gateclusters' etcd clients by endpoint: scripts run
// in parallel in one process.
var gateClients sync.Map

// The live lines on a terminal: a context's name and what the gate reads
// are shown escaped; the only sequences written are the live lines' own
// (carriage return, erase line, erase down, cursor up), each complete.
func TestFleetLiveLinesEscapeNames(t *testing.T) {
	var raw strings.Builder // no spinner runs: every write is the test's own
	u := &terminalUI{w: &raw, conf: &confirmer{yes: true}, live: true, said: map[string]string{}, cols: func() int { return 120 }}
	live := &fleetLive{ui: u}
	report := &upgradecheck.Report{Cluster: evilContext, Verdict: upgradecheck.NoGo, Checks: []upgradecheck.Check{{ID: upgradecheck.CheckAdmission, Verdict: upgradecheck.NoGo}}}
	live.event(upgradecheck.Event{Cluster: evilContext, Message: "reading node \x1b]0;pwned\a"})
	live.event(upgradecheck.Event{Cluster: evilContext, Done: true, Verdict: upgradecheck.NoGo, Report: report})
	live.done()
	out := raw.String()
	own := regexp.MustCompile(`\r|\x1b\[K|\x1b\[J|\x1b\[[0-9]+A`)
	if rest := own.ReplaceAllString(out, ""); strings.ContainsAny(rest, "\x1b\r\a") {
		t.Errorf("the live lines wrote sequences of the cluster's: %q", out)
	}
	if !strings.Contains(out, `gate\x0d\x1b[2KGO\x1b[8m: NO-GO (1 no-go, 0 warn`) || !strings.Contains(out, `reading node \x1b]0;pwned\x07`) {
		t.Errorf("live lines: %q", out)
	}
}

// upgrade-check --help lists the checks as the gate's table says them,
// every one, in its order.
func TestUpgradeCheckHelpIsTheTable(t *testing.T) {
	var out strings.Builder
	run(context.Background(), []string{"breakglass", "upgrade-check", "--help"}, streams{In: strings.NewReader(""), Out: &out, Err: &out})
	var want []string
	for _, line := range strings.Split(strings.TrimRight(upgradecheck.ChecksHelp(104), "\n"), "\n") {
		want = append(want, "   "+line) // the help's indent
	}
	if !strings.Contains(out.String(), strings.Join(want, "\n")+"\n") {
		t.Errorf("the help does not list the checks as the table says them:\n%s", out.String())
	}
	for _, id := range []string{upgradecheck.CheckAccess, upgradecheck.CheckEtcdMembers, upgradecheck.CheckReplay} {
		if !strings.Contains(out.String(), "     "+id+" ") {
			t.Errorf("%s not in the help", id)
		}
	}
}
