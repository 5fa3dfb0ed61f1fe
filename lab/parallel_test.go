package lab

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// The lab's end-to-end tests run side by side. Each one calls t.Parallel
// first and starts its lab on a loopback range of its own (labFirstIP:
// startLab does it; Rehearse and Replay take it as an option), so that no
// two labs share an address even where one takes the real ports.

// labParallel is how many tests run at once unless -parallel says
// otherwise: one more than the cores. A lab test spends most of its time
// waiting for the kubelet's 20 s manifest polls and the old pod's shutdown;
// its CPU comes in bursts (a kube-apiserver start-up takes about one core
// for 3 to 8 s, three at once on a 3-node lab). With one test per core
// plus one, the cores stay busy while one test waits; more would make the
// bursts collide and stretch every wait. On 2 cores: 3. Capped at 8: each
// lab holds up to ~2 GB (three kube-apiservers and etcd members).
func labParallel() int { return max(2, min(runtime.NumCPU()+1, 8)) }

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(labParallel())); err != nil {
			fmt.Fprintln(os.Stderr, "lab tests: -parallel:", err)
			os.Exit(2)
		}
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// labRanges counts the ranges handed out in this test binary.
var labRanges atomic.Int32

// labFirstIP is the first node address of a lab of its own: 127.0.N.11 for
// N = 1, 2, ... (the nodes take .11 to .13 of it), leaving 127.0.0.11-13,
// the lab's default, to `lab up` and to the other packages' tests. Ports
// are picked free as before, so a range used again after 254 labs, or by
// another test binary at the same time, still works.
func labFirstIP() string {
	n := (labRanges.Add(1)-1)%254 + 1
	return fmt.Sprintf("127.0.%d.11", n)
}

// built is the breakglass binary the tests run, built once per test binary.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildBreakglassTB builds ./cmd/breakglass once for every test (or takes
// $BREAKGLASS_TEST_BIN): tests running side by side would otherwise each
// link their own.
func buildBreakglassTB(tb testing.TB) string {
	tb.Helper()
	if b := os.Getenv("BREAKGLASS_TEST_BIN"); b != "" {
		return b
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "breakglass-lab-test-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "breakglass")
		cmd := exec.Command("go", "build", "-o", built.path, "./cmd/breakglass")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build ./cmd/breakglass: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		tb.Fatal(built.err)
	}
	return built.path
}
