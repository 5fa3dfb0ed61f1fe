package etcd_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

// usageBench is the etcd BenchmarkUsage reads: built once per process, of
// about BREAKGLASS_BENCH_ETCD_BYTES bytes of keys and values (default 64
// MiB, small enough for CI). With BREAKGLASS_BENCH_ETCD_DIR the data is
// kept there and reused by the next run that asks for the same size, as
// loading 1 GB takes minutes.
var usageBench struct {
	once sync.Once
	srv  *etcdtest.Server
	c    *etcd.Client
	keys int64
	err  error
}

const defaultBenchBytes = 64 << 20

func benchBytes(b *testing.B) int64 {
	s := os.Getenv("BREAKGLASS_BENCH_ETCD_BYTES")
	if s == "" {
		return defaultBenchBytes
	}
	n, err := strconv.ParseFloat(s, 64) // 1e9 reads as well as 1000000000
	if err != nil || n < 1<<20 {
		b.Fatalf("BREAKGLASS_BENCH_ETCD_BYTES=%q: want a number of bytes, at least 1 MiB", s)
	}
	return int64(n)
}

func getUsageBench(b *testing.B) (*etcd.Client, int64) {
	b.Helper()
	usageBench.once.Do(func() {
		size := benchBytes(b)
		dir, keep := os.Getenv("BREAKGLASS_BENCH_ETCD_DIR"), true
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "etcd-usage-bench-"); err != nil {
				usageBench.err = err
				return
			}
			keep = false
			benchMu.Lock()
			benchDirs = append(benchDirs, dir)
			benchMu.Unlock()
		}
		usageBench.keys, usageBench.err = startUsageBench(dir, size, keep)
	})
	if usageBench.err != nil {
		b.Fatal(usageBench.err)
	}
	return usageBench.c, usageBench.keys
}

func startUsageBench(dir string, size int64, keep bool) (int64, error) {
	marker := filepath.Join(dir, fmt.Sprintf("loaded-%d-bytes", size))
	_, err := os.Stat(marker)
	loaded := keep && err == nil
	if !loaded {
		os.RemoveAll(filepath.Join(dir, "data"))
	}
	// A small snapshot count keeps etcd's raft log (in this process) small
	// while loading; the quota leaves room for bbolt's overhead.
	srv, err := etcdtest.Start(dir, etcdtest.WithSnapshotCount(500), etcdtest.WithQuota(max(2*size, 1<<30)), etcdtest.WithoutFsync())
	if err != nil {
		return 0, err
	}
	usageBench.srv = srv
	benchClosers = append(benchClosers, srv.Close)
	c, err := etcd.Connect(context.Background(), etcd.Config{Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		return 0, err
	}
	usageBench.c = c
	benchClosers = append(benchClosers, func() { c.Close() })
	if !loaded {
		if err := loadUsageBench(c.KV(), size); err != nil {
			return 0, err
		}
		if keep {
			if err := os.WriteFile(marker, nil, 0o600); err != nil {
				return 0, err
			}
		}
	}
	resp, err := c.KV().Get(context.Background(), "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// loadUsageBench writes about size bytes the way a cluster in an event
// flood holds them: most bytes in events of one namespace, the rest in
// pods, config maps, secrets, custom resources and leases over 200
// namespaces, values of 0.5 to 4 KiB; 100 puts to a transaction (etcd's
// --max-txn-ops is 128), four transactions at a time.
func loadUsageBench(kv *clientv3.Client, size int64) error {
	rng := rand.New(rand.NewPCG(1, 2))
	payload := make([]byte, 4096)
	for i := range payload {
		payload[i] = 'a' + byte(rng.IntN(26))
	}
	type kvp struct{ k, v string }
	batches := make(chan []kvp, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := range batches {
				ops := make([]clientv3.Op, len(batch))
				for i, p := range batch {
					ops[i] = clientv3.OpPut(p.k, p.v)
				}
				if _, err := kv.Txn(ctx).Then(ops...).Commit(); err != nil {
					errs <- fmt.Errorf("load: %w", err)
					cancel()
					return
				}
			}
		}()
	}
	func() {
		defer close(batches)
		var written int64
		var batch []kvp
		for i := 0; written < size; i++ {
			var k string
			n := 512 + rng.IntN(3584)
			switch r := i % 20; {
			case r < 11:
				k, n = fmt.Sprintf("/registry/events/flood/crashloop-%08d.17a2b3c4d5e6f708", i), 900+rng.IntN(300)
			case r < 13:
				k = fmt.Sprintf("/registry/events/ns-%03d/event-%08d", i%200, i)
			case r < 15:
				k = fmt.Sprintf("/registry/pods/ns-%03d/pod-%08d", i%200, i)
			case r < 17:
				k = fmt.Sprintf("/registry/configmaps/ns-%03d/cm-%08d", i%200, i)
			case r < 18:
				k = fmt.Sprintf("/registry/secrets/ns-%03d/secret-%08d", i%200, i)
			case r < 19:
				k = fmt.Sprintf("/registry/example.com/widgets/ns-%03d/w-%08d", i%200, i)
			default:
				k, n = fmt.Sprintf("/registry/leases/ns-%03d/lease-%08d", i%200, i), 300
			}
			batch = append(batch, kvp{k, "k8s\x00" + string(payload[:n])})
			written += int64(len(k) + 4 + n)
			if len(batch) == 100 {
				select {
				case batches <- batch:
				case <-ctx.Done():
					return
				}
				batch = nil
			}
		}
		if len(batch) > 0 {
			select {
			case batches <- batch:
			case <-ctx.Done():
			}
		}
	}()
	wg.Wait()
	close(errs)
	return <-errs
}

// BenchmarkUsage reads the usage report of a large etcd (see usageBench
// for its size) at a few page sizes. keys/s is keys weighed a second;
// peak-live-heap-MiB is the most live heap any garbage collection found
// while reading, above what was live before (the embedded etcd server's
// side of each page included): it stays a few pages whatever the
// database's size.
func BenchmarkUsage(b *testing.B) {
	c, keys := getUsageBench(b)
	for _, page := range []int{1 << 20, 8 << 20} {
		b.Run(fmt.Sprintf("page=%dMiB", page>>20), func(b *testing.B) {
			b.ReportAllocs()
			var peak heapPeak
			peak.start()
			for b.Loop() {
				u, err := c.Usage(context.Background(), etcd.UsageOptions{PageBytes: page})
				if err != nil {
					b.Fatal(err)
				}
				if got := u.Total.Keys + u.Outside.Keys; got != keys {
					b.Fatalf("counted %d keys, etcd holds %d", got, keys)
				}
			}
			b.ReportMetric(float64(keys)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(float64(peak.stop())/(1<<20), "peak-live-heap-MiB")
		})
	}
}

// heapPeak samples the live heap as the last garbage collection measured
// it, every 2 ms, and keeps the highest value above the one at start.
type heapPeak struct {
	base, peak atomic.Uint64
	done       chan struct{}
	wg         sync.WaitGroup
}

func (h *heapPeak) start() {
	runtime.GC()
	h.base.Store(heapLive())
	h.done = make(chan struct{})
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-t.C:
				if v := heapLive(); v > h.peak.Load() {
					h.peak.Store(v)
				}
			}
		}
	}()
}

func (h *heapPeak) stop() uint64 {
	close(h.done)
	h.wg.Wait()
	return max(h.peak.Load(), h.base.Load()) - h.base.Load()
}

func heapLive() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
