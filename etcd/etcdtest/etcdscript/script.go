// Package etcdscript gives CLI script tests (rogpeppe/go-internal/testscript)
// an embedded etcd and ways to seed and inspect it; etcd.txtar beside it is
// the CLI test of the etcd commands. Kept apart from etcdtest so that the
// lab, which links etcdtest into the breakglass-lab binary, does not link
// testscript (nor package testing).
package etcdscript

import (
	"context"
	"flag"
	"os"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	clientv3 "go.etcd.io/etcd/client/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

// ScriptCommands are testscript commands for CLI tests of the etcd commands:
//
//	etcd [-plain]            start an embedded etcd (TLS with client-certificate auth unless -plain)
//	                         under $WORK/etcd; sets etcdctl's ETCDCTL_ENDPOINTS, ETCDCTL_CACERT,
//	                         ETCDCTL_CERT and ETCDCTL_KEY
//	etcdput KEY FILE         put FILE's bytes at KEY
//	etcdput -protobuf KEY FILE
//	                         put kube-apiserver's protobuf magic "k8s\x00" then FILE's bytes
//	                         at KEY (a value that claims protobuf, for undecodable ones)
//	etcdput -webhook NAME    put a fail-closed catch-all ValidatingWebhookConfiguration NAME
//	                         (URL on 127.0.0.1) at /registry/validatingwebhookconfigurations/NAME,
//	                         encoded as kube-apiserver stores it
//	etcdget KEY FILE         write KEY's value to FILE; fails if absent (! etcdget: must be absent)
func ScriptCommands() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"etcd":    cmdEtcd,
		"etcdput": cmdEtcdPut,
		"etcdget": cmdEtcdGet,
	}
}

const scriptKey = "ETCDTEST_SERVER"

func cmdEtcd(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	plain := fs.Bool("plain", false, "serve http:// without TLS")
	ts.Check(fs.Parse(args))
	var opts []etcdtest.Option
	if *plain {
		opts = append(opts, etcdtest.Plain())
	}
	s, err := etcdtest.Start(ts.MkAbs("etcd"), opts...)
	ts.Check(err)
	ts.Defer(s.Close)
	ts.Setenv("ETCDCTL_ENDPOINTS", s.Endpoints[0])
	if !*plain {
		ts.Setenv("ETCDCTL_CACERT", s.CAFile)
		ts.Setenv("ETCDCTL_CERT", s.CertFile)
		ts.Setenv("ETCDCTL_KEY", s.KeyFile)
	}
	// testscript keeps one value store per script: remember the server for etcdput/etcdget.
	ts.Setenv(scriptKey, s.Endpoints[0])
	serversMu.Lock()
	servers[s.Endpoints[0]] = s
	serversMu.Unlock()
	ts.Defer(func() {
		serversMu.Lock()
		delete(servers, s.Endpoints[0])
		serversMu.Unlock()
	})
}

// servers maps endpoints to servers: scripts run in parallel in one process.
var (
	serversMu sync.Mutex
	servers   = map[string]*etcdtest.Server{}
)

func scriptClient(ts *testscript.TestScript) *clientv3.Client {
	serversMu.Lock()
	s := servers[ts.Getenv(scriptKey)]
	serversMu.Unlock()
	if s == nil {
		ts.Fatalf("no etcd: start one with the etcd command")
	}
	c, err := s.Client()
	ts.Check(err)
	return c
}

func cmdEtcdPut(ts *testscript.TestScript, neg bool, args []string) {
	var magic []byte
	if len(args) == 3 && args[0] == "-protobuf" {
		magic, args = []byte("k8s\x00"), args[1:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: etcdput KEY FILE | etcdput -protobuf KEY FILE | etcdput -webhook NAME")
	}
	var key string
	var value []byte
	if args[0] == "-webhook" {
		key = "/registry/validatingwebhookconfigurations/" + args[1]
		b, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook(args[1], "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
		ts.Check(err)
		value = b
	} else {
		key = args[0]
		b, err := os.ReadFile(ts.MkAbs(args[1]))
		ts.Check(err)
		value = append(magic, b...)
	}
	c := scriptClient(ts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Put(ctx, key, string(value))
	ts.Check(err)
}

func cmdEtcdGet(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: etcdget KEY FILE")
	}
	c := scriptClient(ts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, args[0])
	ts.Check(err)
	switch {
	case len(resp.Kvs) == 0 && !neg:
		ts.Fatalf("%s is absent", args[0])
	case len(resp.Kvs) > 0 && neg:
		ts.Fatalf("%s is present", args[0])
	case len(resp.Kvs) > 0:
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), resp.Kvs[0].Value, 0o600))
	}
}
