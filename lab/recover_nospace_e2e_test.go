package lab

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
)

// A cluster dead on a full etcd, as an on-call engineer meets it: diagnose
// names it with the figures (exit 30), and recover --yes with no expert
// flag brings writes and /readyz back: the verified snapshot on disk, no
// configuration changed, no live key lost.
func TestRecoverFullEtcdAsTyped(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d-node", nodes), func(t *testing.T) {
			t.Parallel()
			g := newFullEtcd(t, nodes)
			r := g.run("", "diagnose")
			if r.code != int(failure.DiagnoseNoSpace) || !strings.Contains(r.stdout, "verdict: etcd-nospace") || !strings.Contains(r.stdout, "alarm NOSPACE") || !strings.Contains(r.stdout, "in use") {
				t.Fatalf("diagnose: exit %d, want 30 naming etcd-nospace with the figures\n%s%s", r.code, r.stdout, r.stderr)
			}
			before := g.keysNow()
			if nodes > 1 {
				// -n naming one member of three: refused before any change,
				// naming the others (before, their alarms were disarmed on
				// members still full).
				one := g.l.Nodes()[0]
				r = g.run("", append([]string{"-n", one, "recover", "--yes"}, g.etcdFlags()...)...)
				if r.code != int(failure.BadInput) || !strings.Contains(r.stderr, "-n leaves out") || strings.Count(r.stderr, "cp-") < nodes-1 {
					t.Fatalf("recover -n %s on %d nodes: exit %d, want 2 naming the members left out\n%s%s", one, nodes, r.code, r.stdout, r.stderr)
				}
				if !maps.Equal(g.keysNow(), before) || !g.noSpace() {
					t.Fatal("the refused run changed etcd")
				}
			}
			t0 := time.Now()
			r = g.run("", append([]string{"recover", "--yes"}, g.etcdFlags()...)...)
			took := time.Since(t0)
			if r.code != 0 {
				t.Fatalf("recover --yes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			t.Logf("recover --yes on %d node(s): %s\n%s%s", nodes, round(took), r.stdout, r.stderr)
			for _, want := range []string{`ok +snapshot `, `ok +compact `, `ok +defragment `, `ok +disarm `, `ok +wait-apiserver `, "what filled etcd: events in namespace " + FloodNamespace, "quota-backend-bytes"} {
				if !regexp.MustCompile(want).MatchString(r.stdout) {
					t.Errorf("recover's summary does not say %q", want)
				}
			}
			g.cameBack(before)
			snaps, _ := filepath.Glob(filepath.Join(g.stateDir, "incidents", "*", "etcd.snapshot"))
			if len(snaps) != 1 {
				t.Fatalf("snapshots %q, want the incident's one", snaps)
			}
			if _, err := etcd.VerifySnapshotFile(snaps[0]); err != nil {
				t.Errorf("the incident's snapshot: %v", err)
			}
		})
	}
}

// Killed with SIGKILL at a random instant of recover, then of resume, and
// resumed to the end: it still converges.
func TestRecoverFullEtcdKilledAndResumed(t *testing.T) {
	t.Parallel()
	g := newFullEtcd(t, 1)
	before := g.keysNow()
	// Its changes take about a second after a start of a few hundred
	// milliseconds; the wait for kube-apiserver takes the rest.
	g.killedAndResumed(100*time.Millisecond, 1200*time.Millisecond, 8*time.Minute)
	g.cameBack(before)
}

// newFullEtcd is a lab whose etcd the etcd-nospace scenario filled, with
// v1.34.4 crash-looping on it.
func newFullEtcd(t *testing.T, nodes int) *guided {
	t.Helper()
	l := startLabWith(t, Options{Nodes: nodes, EtcdQuotaBytes: NoSpaceQuota})
	if _, err := RunScenario(context.Background(), l, ScenarioEtcdNoSpace, NewTimeline(testWriter{t})); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	return guidedOn(t, l)
}

func (g *guided) keysNow() map[string]string {
	g.t.Helper()
	ctx := withTimeout(g.t, context.Background(), time.Minute)
	ec, err := g.l.EtcdClient(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	defer ec.Close()
	keys, _, err := EtcdKeys(ctx, ec)
	if err != nil {
		g.t.Fatal(err)
	}
	return keys
}

// cameBack: no alarm, kube-apiserver ready on every node with its
// configuration unchanged, and no live key lost (the changed keys are
// kube-apiserver's own).
func (g *guided) cameBack(before map[string]string) {
	g.t.Helper()
	ctx := withTimeout(g.t, context.Background(), 7*time.Minute)
	if err := g.l.WaitReadyVersion(ctx, NewVersion, 6*time.Minute); err != nil {
		g.t.Fatalf("kube-apiserver not ready after the recovery: %v", err)
	}
	for _, ip := range g.l.Nodes() {
		if al, err := g.tc.EtcdAlarms(ctx, ip); err != nil || len(al) != 0 {
			g.t.Errorf("node %s alarms after the recovery: %v %v", ip, al, err)
		}
	}
	if got := configHashes(g.t, ctx, g.tc, g.l.Nodes()); !maps.Equal(got, g.orig) {
		g.t.Errorf("machine configs changed: %v, were %v", got, g.orig)
	}
	d := DiffKeys(before, g.keysNow())
	if len(d.Gone) > 0 {
		g.t.Errorf("keys lost: %q", d.Gone)
	}
	for _, k := range d.Changed {
		if !APIServerWrites(k) {
			g.t.Errorf("key %q changed", k)
		}
	}
	if h := g.lockHolder(); h != nil {
		g.t.Errorf("the cluster lock is still held by %+v", h)
	}
}

// lab rehearse --scenario etcd-nospace: the scenario, recover --yes through
// recovery.Recover, and every check holds.
func TestRehearseFullEtcd(t *testing.T) {
	t.Parallel()
	bin := needBinaries(t, OldVersion, NewVersion)
	var out strings.Builder
	rep, err := Rehearse(context.Background(), RehearseOptions{Scenario: ScenarioEtcdNoSpace, Nodes: 1, KubeBinDir: bin, Out: &out, ToolVersion: "test",
		Lab: Options{FirstIP: labFirstIP()}})
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Recovery <= 0 || len(rep.Checks) < 6 {
		t.Errorf("recovery %s, checks %+v", rep.Recovery, rep.Checks)
	}
	t.Logf("guided recovery of a full etcd on the lab: %s", rep.Recovery.Round(time.Millisecond))
}

// noSpace tells whether every node lists the NOSPACE alarm.
func (g *guided) noSpace() bool {
	g.t.Helper()
	ctx := withTimeout(g.t, context.Background(), time.Minute)
	for _, ip := range g.l.Nodes() {
		al, err := g.tc.EtcdAlarms(ctx, ip)
		if err != nil || !slices.ContainsFunc(al, func(a talos.EtcdAlarm) bool { return a.Type == "NOSPACE" }) {
			return false
		}
	}
	return true
}
