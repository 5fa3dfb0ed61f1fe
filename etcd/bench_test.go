package etcd_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// benchEnv is an etcd holding the same 20 admission objects plus n
// unrelated keys. Loading 100,000 keys takes a while, so each is built once
// per process and torn down in TestMain.
type benchEnv struct {
	srv *etcdtest.Server
	c   *etcd.Client
	err error
}

var (
	benchMu   sync.Mutex
	benchEnvs = map[int]*benchEnv{}
	benchDirs []string
	// benchClosers stop what other benchmarks built once per process.
	benchClosers []func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, e := range benchEnvs {
		if e.c != nil {
			e.c.Close()
		}
		if e.srv != nil {
			e.srv.Close()
		}
	}
	for _, f := range benchClosers {
		f()
	}
	for _, d := range benchDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

func getBenchEnv(b *testing.B, unrelated int) *benchEnv {
	b.Helper()
	benchMu.Lock()
	defer benchMu.Unlock()
	if e, ok := benchEnvs[unrelated]; ok {
		if e.err != nil {
			b.Fatal(e.err)
		}
		return e
	}
	e := &benchEnv{}
	benchEnvs[unrelated] = e
	e.err = e.build(b, unrelated)
	if e.err != nil {
		b.Fatal(e.err)
	}
	return e
}

func (e *benchEnv) build(b *testing.B, unrelated int) error {
	dir, err := os.MkdirTemp("", "etcd-bench-")
	if err != nil {
		return err
	}
	benchDirs = append(benchDirs, dir)
	// A small snapshot count keeps etcd's in-memory raft log (and so this
	// process's memory) small while loading hundreds of megabytes.
	if e.srv, err = etcdtest.Start(dir, etcdtest.WithSnapshotCount(500), etcdtest.WithQuota(4<<30)); err != nil {
		return err
	}
	if e.c, err = etcd.Connect(context.Background(), etcd.Config{
		Endpoints: e.srv.Endpoints, CACertFile: e.srv.CAFile, CertFile: e.srv.CertFile, KeyFile: e.srv.KeyFile,
	}); err != nil {
		return err
	}
	kv := e.c.KV()
	ctx := context.Background()
	var ops []clientv3.Op
	for i := range 8 {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/validatingwebhookconfigurations/policy-engine-%d", i), string(mustProtobuf(b, validatingWebhook(fmt.Sprintf("policy-engine-%d", i))))))
	}
	for i := range 4 {
		ops = append(ops,
			clientv3.OpPut(fmt.Sprintf("/registry/mutatingwebhookconfigurations/mutator-%d", i), string(mustProtobuf(b, mutatingWebhook(fmt.Sprintf("mutator-%d", i))))),
			clientv3.OpPut(fmt.Sprintf("/registry/validatingadmissionpolicies/vap-%d", i), string(mustProtobuf(b, validatingPolicy(fmt.Sprintf("vap-%d", i))))),
			clientv3.OpPut(fmt.Sprintf("/registry/validatingadmissionpolicybindings/vap-%d", i), string(mustProtobuf(b, validatingBinding(fmt.Sprintf("vap-%d", i), fmt.Sprintf("vap-%d", i))))))
	}
	if _, err := kv.Txn(ctx).Then(ops...).Commit(); err != nil {
		return err
	}
	// Unrelated keys of realistic sizes (1-4 KB), in batched transactions.
	rng := rand.New(rand.NewPCG(1, 2))
	payload := make([]byte, 4096)
	for i := range payload {
		payload[i] = byte(rng.IntN(256))
	}
	resources := []string{"pods", "configmaps", "events", "secrets", "services/specs", "apps/replicasets", "leases"}
	ops = ops[:0]
	for i := range unrelated {
		size := 1024 + rng.IntN(3072)
		key := fmt.Sprintf("/registry/%s/ns-%03d/object-%06d", resources[i%len(resources)], i%200, i)
		ops = append(ops, clientv3.OpPut(key, "k8s\x00"+string(payload[:size])))
		if len(ops) == 100 || i == unrelated-1 {
			if _, err := kv.Txn(ctx).Then(ops...).Commit(); err != nil {
				return fmt.Errorf("load unrelated keys: %w", err)
			}
			ops = ops[:0]
		}
	}
	return nil
}

// BenchmarkList compares breakglass's listing (range requests on the six
// admission prefixes, decoded) with an etcdctl-style full scan of /registry
// (get --prefix /registry, not even decoded), at 0 and 100,000 unrelated keys.
func BenchmarkList(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{0, 100_000} {
		e := getBenchEnv(b, n)
		b.Run(fmt.Sprintf("unrelated=%d/breakglass-list-decode", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l, err := e.c.List(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if len(l.Objects) != 20 {
					b.Fatalf("listed %d objects", len(l.Objects))
				}
			}
		})
		b.Run(fmt.Sprintf("unrelated=%d/etcdctl-get-prefix-registry", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := e.c.KV().Get(ctx, "/registry", clientv3.WithPrefix())
				if err != nil {
					b.Fatal(err)
				}
				if len(resp.Kvs) != 20+n {
					b.Fatalf("scanned %d keys", len(resp.Kvs))
				}
			}
		})
	}
}
