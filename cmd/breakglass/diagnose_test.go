package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/siderolabs/talos/pkg/machinery/role"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// TestDiagnoseScripts runs testdata/script/diagnose_harness/*.txtar with
// the commands of TestScripts plus deadcluster, readycluster and etcdseed.
// They live in a subdirectory because TestScripts, which reads
// testdata/script, does not have these commands.
func TestDiagnoseScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:   "testdata/script/diagnose_harness",
		Setup: scriptSetup,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"stopnode":     cmdStopNode,
			"deadcluster":  cmdDeadCluster,
			"readycluster": cmdReadyCluster,
			"etcdseed":     cmdEtcdSeed,
		},
	})
}

// deadcluster [-cp N] LOGFILE starts emulated control planes whose
// kube-apiserver logs LOGFILE's lines and hangs, waits until each has been
// restarted twice, and sets the same variables as cluster.
func cmdDeadCluster(ts *testscript.TestScript, neg bool, args []string) {
	cps, args := cpFlag(ts, args)
	if len(args) != 1 {
		ts.Fatalf("usage: deadcluster [-cp N] LOGFILE")
	}
	raw, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	runner := talostest.Logged{Lines: lines, ExitAfter: 20 * time.Millisecond} // real v1.34.4 lines, in the scripts
	startScriptCluster(ts, cps, runner, "restarted twice", func(p talostest.PodState) bool { return p.RestartCount >= 2 })
}

// readycluster [-cp N] starts emulated control planes with a healthy
// kube-apiserver, waits until kubelet reports each ready, and sets the
// same variables as cluster.
func cmdReadyCluster(ts *testscript.TestScript, neg bool, args []string) {
	cps, args := cpFlag(ts, args)
	if len(args) != 0 {
		ts.Fatalf("usage: readycluster [-cp N]")
	}
	startScriptCluster(ts, cps, talostest.StandIn{ReadyAfter: 10 * time.Millisecond}, "ready", func(p talostest.PodState) bool { return p.Ready })
}

func cpFlag(ts *testscript.TestScript, args []string) (int, []string) {
	cps := 1
	if len(args) >= 2 && args[0] == "-cp" {
		_, err := fmt.Sscan(args[1], &cps)
		ts.Check(err)
		args = args[2:]
	}
	return cps, args
}

func startScriptCluster(ts *testscript.TestScript, cps int, runner talostest.PodRunner, what string, until func(talostest.PodState) bool) {
	dir := ts.MkAbs("talos")
	ts.Check(os.MkdirAll(dir, 0o700))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := talostest.NewCluster(ctx, talostest.ClusterOptions{ControlPlanes: cps, Dir: dir, Runner: runner,
		Kubelet: talostest.KubeletOptions{TimeScale: 0.005}}) // poll 100ms, status 75ms, back-off 50ms
	ts.Check(err)
	ts.Defer(c.Close)
	for r, name := range map[role.Role]string{role.Admin: "TALOSCONFIG", role.Operator: "TALOSCONFIG_OPERATOR", role.Reader: "TALOSCONFIG_READER"} {
		path, err := c.Talosconfig(r)
		ts.Check(err)
		ts.Setenv(name, path)
	}
	var ips []string
	for i, n := range c.Nodes {
		ts.Setenv(fmt.Sprintf("NODE%d", i+1), n.IP)
		ips = append(ips, n.IP)
		// Polled every 10ms; the deadline only guards against a hang.
		deadline := time.Now().Add(30 * time.Second)
		for !until(n.Pod()) {
			if time.Now().After(deadline) {
				ts.Fatalf("node %s: kube-apiserver not %s", n.IP, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// What the kubelet knows, Talos reports at its next refresh: make
		// that now, so the scripts start from a settled StaticPodStatus.
		n.RefreshPodStatus()
	}
	ts.Setenv("NODES", strings.Join(ips, ","))
	ts.Value(clusterKey).(*clusterHolder).c = c
}

// etcdseed FILE... starts an embedded etcd (TLS, client certificates) and
// stores each webhook configuration (YAML or JSON) the way kube-apiserver
// does: protobuf under /registry/RESOURCE/NAME. It sets ETCD_ENDPOINTS,
// ETCD_CACERT, ETCD_CERT and ETCD_KEY.
func cmdEtcdSeed(ts *testscript.TestScript, neg bool, args []string) {
	ts.Check(os.MkdirAll(ts.MkAbs("etcd"), 0o700))
	srv, err := etcdtest.Start(ts.MkAbs("etcd"))
	ts.Check(err)
	ts.Defer(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ec, err := etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	ts.Check(err)
	defer ec.Close()
	for _, f := range args {
		raw, err := os.ReadFile(ts.MkAbs(f))
		ts.Check(err)
		var meta struct{ Kind string }
		ts.Check(kyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(&meta))
		var obj runtime.Object
		var name, resource string
		switch meta.Kind {
		case "ValidatingWebhookConfiguration":
			o := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			ts.Check(kyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(o))
			obj, name, resource = o, o.Name, "validatingwebhookconfigurations"
		case "MutatingWebhookConfiguration":
			o := &admissionregistrationv1.MutatingWebhookConfiguration{}
			ts.Check(kyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(o))
			obj, name, resource = o, o.Name, "mutatingwebhookconfigurations"
		default:
			ts.Fatalf("%s: kind %q is not a webhook configuration", f, meta.Kind)
		}
		v, err := etcdtest.EncodeProtobuf(obj, admissionregistrationv1.SchemeGroupVersion)
		ts.Check(err)
		_, err = ec.KV().Put(ctx, "/registry/"+resource+"/"+name, string(v))
		ts.Check(err)
	}
	ts.Setenv("ETCD_ENDPOINTS", strings.Join(srv.Endpoints, ","))
	ts.Setenv("ETCD_CACERT", srv.CAFile)
	ts.Setenv("ETCD_CERT", srv.CertFile)
	ts.Setenv("ETCD_KEY", srv.KeyFile)
}
