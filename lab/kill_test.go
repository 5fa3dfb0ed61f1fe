package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// buildBreakglass is the real command, built once for all the tests
// (parallel_test.go). BREAKGLASS_TEST_BIN names a prebuilt binary instead
// (for a tree that is mid-edit elsewhere).
func buildBreakglass(t *testing.T) string {
	t.Helper()
	return buildBreakglassTB(t)
}

// TestKilledMidwayConverges runs `breakglass admission disable` and then
// `restore` as subprocesses against a deadlocked three-node lab, kills them
// with SIGKILL at random moments, and runs them again. After every kill,
// every node's config must be explained by the state directory (the
// original, or the change its record describes); in the end the recovery
// must have converged: ready, configs byte-identical to the original.
func TestKilledMidwayConverges(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	l := startLab(t, 3, DefaultKubelet())
	bin := buildBreakglass(t)
	ctx := context.Background()
	if _, err := RunScenario(ctx, l, ScenarioKyvernoServiceCIDR, NewTimeline(testWriter{t})); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	tc, err := l.TalosClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	orig := configHashes(t, ctx, tc, l.Nodes())
	stateDir := filepath.Join(l.Dir, "state")
	st := recovery.State{Dir: stateDir}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("random seed %d", seed)

	run := func(killAfter time.Duration, args ...string) (killed bool, out string, err error) {
		full := append([]string{"--talosconfig", l.Talosconfig, "--state-dir", stateDir}, args...)
		return runKilled(t, exec.Command(bin, full...), killAfter, 4*time.Minute)
	}

	// explained: the node's config is the original (and any record says so),
	// or exactly the change a record describes, made from the original.
	explained := func(when string) {
		t.Helper()
		for _, ip := range l.Nodes() {
			cfg, err := tc.ReadMachineConfig(ctx, ip)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			rec, err := st.LoadAdmission(l.Cluster.Name, ip)
			if err != nil {
				t.Fatalf("%s: node %s: state record unreadable: %v", when, ip, err)
			}
			h := cfg.Hash()
			switch {
			case h == orig[ip] && (rec == nil || rec.ConfigHashBefore == orig[ip]):
			case rec != nil && h == rec.ConfigHashAfter && rec.ConfigHashBefore == orig[ip]:
			default:
				t.Fatalf("%s: node %s runs a config the state directory cannot explain: hash %s, original %s, record %+v", when, ip, h, orig[ip], rec)
			}
		}
	}

	plugins := strings.Join(RecoveryPlugins, ",")
	ops := [][]string{
		{"admission", "disable", "--plugins", plugins, "--yes"},
		{"admission", "restore", "--yes"},
	}
	for cycle := range 2 {
		for _, args := range ops {
			name := fmt.Sprintf("cycle %d: %s", cycle, args[1])
			// The first kill lands early (start-up, connect, plan, apply: a few
			// hundred ms), the second anywhere (also while waiting for the pods).
			for round, limit := range []time.Duration{400 * time.Millisecond, 3 * time.Second} {
				after := time.Duration(rng.Int64N(int64(limit))) + time.Millisecond
				killed, out, err := run(after, args...)
				last := strings.TrimSpace(out)
				if i := strings.LastIndexByte(last, '\n'); i >= 0 {
					last = last[i+1:]
				}
				t.Logf("%s: round %d: kill after %s: killed %v (%v); last output: %s", name, round, after, killed, err, last)
				if !killed && err != nil {
					t.Fatalf("%s: round %d exited by itself with %v:\n%s", name, round, err, out)
				}
				explained(fmt.Sprintf("%s, after kill round %d", name, round))
			}
			_, out, err := run(0, args...)
			if err != nil {
				t.Fatalf("%s after the kills does not converge: %v\n%s", name, err, out)
			}
			explained(name + ", converged")
			if _, err := recovery.WaitReady(ctx, tc, recovery.HealthOptions{Timeout: 3 * time.Minute}); err != nil {
				t.Fatalf("%s: kube-apiserver not ready: %v", name, err)
			}
		}
	}

	final := configHashes(t, ctx, tc, l.Nodes())
	for _, ip := range l.Nodes() {
		if final[ip] != orig[ip] {
			t.Errorf("node %s: config not byte-identical to the original after restore", ip)
		}
		pod, err := tc.ReadAPIServerPod(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		if v := pod.DisabledPlugins(); len(v) > 0 {
			t.Errorf("node %s: static pod still has --disable-admission-plugins=%v", ip, v)
		}
		if rec, _ := st.LoadAdmission(l.Cluster.Name, ip); rec != nil {
			// Explained (checked above) but stale: restore was killed between
			// applying and removing the record, and the next restore found
			// nothing to do.
			t.Logf("node %s: a stale record remains (config already restored): %+v", ip, rec.ConfigHashBefore)
		}
	}
}

// runKilled runs cmd and, when killAfter is not zero, kills it with SIGKILL
// then (no deferred cleanup, no journal flush); a run past hang fails the
// test.
func runKilled(t *testing.T, cmd *exec.Cmd, killAfter, hang time.Duration) (killed bool, out string, err error) {
	t.Helper()
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timer <-chan time.Time
	if killAfter > 0 {
		timer = time.After(killAfter)
	}
	select {
	case err = <-done:
	case <-timer:
		_ = cmd.Process.Kill()
		err, killed = <-done, true
	case <-time.After(hang):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v hangs:\n%s", cmd.Args, buf.String())
	}
	return killed, buf.String(), err
}

// killedAndResumed runs recover --yes and kills it with SIGKILL after a
// random time in [from, from+spread), then resume the same way, then lets
// resume finish: it must converge, and at least one kill must have landed.
func (g *guided) killedAndResumed(from, spread, limit time.Duration) {
	t := g.t
	t.Helper()
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("random seed %d", seed)
	args := append([]string{"recover", "--yes"}, g.etcdFlags()...)
	kills := 0
	for try := 0; ; try++ {
		killAfter := from + time.Duration(rng.Int64N(int64(spread)))
		if try >= 2 {
			killAfter = 0 // then let it finish
		}
		killed, out, err := runKilled(t, g.command(args...), killAfter, limit)
		t.Logf("breakglass %s (kill after %s): killed %v, %v\n%s", args[0], killAfter, killed, err, out)
		if killed {
			kills++
		}
		if !killed {
			if kills == 0 {
				t.Fatal("never killed: the run ended before each kill, so this proves nothing")
			}
			if err != nil {
				t.Fatalf("%s did not converge: %v", args[0], err)
			}
			return
		}
		if incidents, _ := g.st.Incidents(); len(incidents) > 0 {
			args = []string{"resume", "--yes"} // else killed before its journal: recover again
		}
		if try > 5 {
			t.Fatal("never finished")
		}
	}
}
