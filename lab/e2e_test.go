package lab

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// needBinaries returns the kube-apiserver directory holding OldVersion,
// NewVersion and more (needKubeBinaries).
func needBinaries(t testing.TB, more ...string) string {
	t.Helper()
	return needKubeBinaries(t, append([]string{OldVersion, NewVersion}, more...)...)
}

// needKubeBinaries returns the kube-apiserver directory once it holds every
// version, through the lab's one lookup (Binaries): while make test builds
// binaries beside the tests, a missing one is waited for, up to a minute
// before the test's deadline. Missing, the test skips with the reason,
// except under CI=true, where it fails the run.
func needKubeBinaries(t testing.TB, versions ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end lab test: skipped with -short")
	}
	ctx := context.Background()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-time.Minute))
			defer cancel()
		}
	}
	dir, err := Binaries(ctx, "", testWriter{t}, versions...)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the lab cannot run: %v (build them: make kube-apiserver)", err)
		}
		t.Skipf("lab e2e test skipped: %v (build them: make kube-apiserver, or set %s)", err, KubeBinDirEnv)
	}
	return dir
}

// testWriter sends lab output to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startLab(t *testing.T, nodes int, kubelet talostest.KubeletOptions) *Lab {
	t.Helper()
	return startLabWith(t, Options{Nodes: nodes, Kubelet: kubelet})
}

// startLabWith starts a lab of opts in a directory, on a loopback range and
// with the binaries of its own, logging to the test.
func startLabWith(t *testing.T, opts Options) *Lab {
	t.Helper()
	bin := needBinaries(t)
	ctx := context.Background()
	if opts.Kubelet == (talostest.KubeletOptions{}) {
		opts.Kubelet = DefaultKubelet()
	}
	opts.Dir, opts.FirstIP, opts.KubeBinDir, opts.Log = t.TempDir(), labFirstIP(), bin, testWriter{t}
	l, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start lab: %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

func configHashes(t *testing.T, ctx context.Context, tc *talos.Client, nodes []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ip := range nodes {
		cfg, err := tc.ReadMachineConfig(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		out[ip] = cfg.Hash()
	}
	return out
}

// TestDeadlockAndBothWebhookPlugins reproduces the incident on one node and
// shows why the recovery disables two plugins: with only
// ValidatingAdmissionWebhook off, the fail-closed mutating webhook still
// blocks the default ServiceCIDR; with both off, kube-apiserver is ready;
// the restore puts the config back byte for byte.
func TestDeadlockAndBothWebhookPlugins(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	l := startLab(t, 1, DefaultKubelet())
	ctx := context.Background()
	tl := NewTimeline(testWriter{t})
	ev, err := RunScenario(ctx, l, ScenarioKyvernoServiceCIDR, tl)
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	node := l.Nodes()[0]
	if len(ev) != 1 || !slices.Contains(ev[0].FailingChecks, DeadlockCheck) || ev[0].LogLines == 0 {
		t.Fatalf("deadlock evidence incomplete: %+v", ev)
	}
	if l.Webhook.Serving() {
		t.Fatal("the webhook backend answers during the deadlock: the service network should be down")
	}
	if ok, err := l.EtcdKeyExists(ctx, "/registry/servicecidrs/kubernetes"); err != nil || ok {
		t.Fatalf("default ServiceCIDR exists during the deadlock (%v, %v)", ok, err)
	}
	tc, err := l.TalosClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	name, err := tc.NodeName(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	// v1.34 exits by itself once a fatal post-start hook gives up (no probes
	// on Talos) and the kubelet restarts it: seen through the Talos API, whose
	// StaticPodStatus refreshes every 15 s.
	var st talos.PodStatus
	for wctx := withTimeout(t, ctx, 3*time.Minute); st.RestartCount < 1; {
		if st, err = tc.ReadAPIServerStatus(wctx, node, name); err != nil || wctx.Err() != nil {
			t.Fatalf("no restart of the deadlocked kube-apiserver: %+v: %v", st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("deadlocked kube-apiserver restarted by the kubelet: restarts %d, waiting %q", st.RestartCount, st.WaitingReason)
	before := configHashes(t, ctx, tc, l.Nodes())

	// The node's etcd member, snapshotted through the Talos API.
	var snap bytes.Buffer
	if err := tc.EtcdSnapshot(ctx, node, &snap); err != nil {
		t.Fatalf("etcd snapshot through the Talos API: %v", err)
	}
	if snap.Len() < 1024 || snap.Len()%512 != 32 {
		t.Errorf("etcd snapshot of %d bytes is not a valid snapshot (512*n + 32-byte hash)", snap.Len())
	}

	state := recovery.State{Dir: filepath.Join(l.Dir, "state")}
	// The plugins go off and on as `breakglass admission disable|restore --yes` does it.
	ui := newMeasuringUI(io.Discard, func(string) {})
	change := func(op func(context.Context, *talos.Client, recovery.State, recovery.Effects, recovery.UI, recovery.AdmissionChange) (*recovery.RecoverResult, error), plugins ...string) {
		t.Helper()
		res, err := op(ctx, tc, state, recovery.Live(tc), ui, recovery.AdmissionChange{Plugins: plugins, WaitTimeout: 2 * time.Minute,
			Etcd: recovery.EtcdOptions{Endpoints: l.Etcd.Endpoints}})
		if err != nil || res.Outcome != "completed" {
			t.Fatalf("admission change %v: %v (%+v)", plugins, err, res)
		}
	}
	disable := func(plugins ...string) { t.Helper(); change(recovery.DisableAdmission, plugins...) }

	// Only the validating plugin off: still deadlocked, now on the mutating webhook.
	disable("ValidatingAdmissionWebhook")
	api, err := l.machineryClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		logs, _ := ReadAPIServerLogs(ctx, api, node, name, 0)
		ready, failing, _ := kube.Readyz(ctx)
		if ready {
			t.Fatal("kube-apiserver became ready with only ValidatingAdmissionWebhook disabled: the mutating webhook should still block the ServiceCIDR")
		}
		cur := l.Current()[node]
		if slices.Contains(failing, DeadlockCheck) && strings.Contains(logs, `failed calling webhook "mutate.kyverno.svc-fail"`) &&
			slices.ContainsFunc(cur.Args, func(a string) bool { return a == "--disable-admission-plugins=ValidatingAdmissionWebhook" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with ValidatingAdmissionWebhook disabled: want readyz failing on %s and the mutating webhook failing in the logs; readyz failing %v", DeadlockCheck, failing)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if l.Webhook.Serving() {
		t.Fatal("the webhook backend came back although the ServiceCIDR cannot be created")
	}

	// Both off: ready, the ServiceCIDR is created, the backend comes back.
	disable("MutatingAdmissionWebhook")
	if _, err := recovery.WaitReady(ctx, tc, recovery.HealthOptions{Timeout: 2 * time.Minute}); err != nil {
		t.Fatalf("not ready with both webhook plugins disabled: %v", err)
	}
	if ok, err := l.EtcdKeyExists(ctx, "/registry/servicecidrs/kubernetes"); err != nil || !ok {
		t.Fatalf("default ServiceCIDR missing after recovery (%v, %v)", ok, err)
	}
	if err := waitServing(ctx, l.Webhook, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	change(recovery.RestoreAdmission)
	if _, err := recovery.WaitReady(ctx, tc, recovery.HealthOptions{Timeout: 2 * time.Minute}); err != nil {
		t.Fatalf("not ready after restore: %v", err)
	}
	after := configHashes(t, ctx, tc, l.Nodes())
	if after[node] != before[node] {
		t.Errorf("config after restore is not byte-identical to the config before the first disable: %s != %s", after[node], before[node])
	}
	pod, err := tc.ReadAPIServerPod(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if v := pod.DisabledPlugins(); len(v) > 0 {
		t.Errorf("static pod still has --disable-admission-plugins=%v", v)
	}
	n0 := l.Webhook.Answered()
	if err := ProbeWebhook(ctx, kube, l.Webhook, "after"); err != nil || l.Webhook.Answered() <= n0 {
		t.Errorf("webhook not called after the restore: %v", err)
	}
}

// TestRehearse runs the whole rehearsal, as `breakglass lab rehearse` does,
// on one and on three nodes.
func TestRehearse(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	for _, nodes := range []int{1, 3} {
		t.Run(map[int]string{1: "1-node", 3: "3-nodes"}[nodes], func(t *testing.T) {
			t.Parallel()
			bin := needBinaries(t)
			var out bytes.Buffer
			rep, err := Rehearse(context.Background(), RehearseOptions{Nodes: nodes, Dir: t.TempDir(), KubeBinDir: bin, Out: &out, Lab: Options{FirstIP: labFirstIP()}})
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Deadlock) != nodes {
				t.Errorf("deadlock seen on %d nodes, want %d", len(rep.Deadlock), nodes)
			}
			wantChecks := 6 + 4*nodes // with the diagnosis's plan: the rehearsal runs recover
			if len(rep.Checks) != wantChecks {
				t.Errorf("%d checks, want %d", len(rep.Checks), wantChecks)
			}
			for _, m := range []Measurement{rep.Disable, rep.Restore} {
				if m.Floor <= 0 || m.Total < m.Floor || m.Notice < -time.Second {
					t.Errorf("implausible measurement %+v", m)
				}
			}
			for _, s := range []string{"timeline:", "measurements", "webhooks answer reviews again", "config byte-identical", "[3/9] disable", "=> verify ok"} {
				if !strings.Contains(out.String(), s) {
					t.Errorf("report lacks %q", s)
				}
			}
		})
	}
}

func withTimeout(t *testing.T, ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	t.Cleanup(cancel)
	return ctx
}

// TestExcludedAPIServerUpgrades is the prevention: with a matchCondition
// that leaves the user system:apiserver alone, the upgrade to v1.34.4
// succeeds although the webhook backend is down the whole time, and the
// webhooks still review everyone else's writes afterwards.
func TestExcludedAPIServerUpgrades(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	l := startLab(t, 1, talostest.KubeletOptions{})
	ctx := context.Background()
	if _, err := RunScenario(ctx, l, ScenarioExcluded, NewTimeline(testWriter{t})); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	if ok, err := l.EtcdKeyExists(ctx, "/registry/servicecidrs/kubernetes"); err != nil || !ok {
		t.Fatalf("default ServiceCIDR missing (%v, %v)", ok, err)
	}
	api, err := l.machineryClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	logs, err := ReadAPIServerLogs(ctx, api, l.Nodes()[0], l.Cluster.Nodes[0].Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "Serving securely") && !strings.Contains(logs, "Starting") {
		t.Fatalf("the Talos Logs API returned no kube-apiserver log:\n%s", logs)
	}
	if n := strings.Count(logs, "failed calling webhook"); n > 0 {
		t.Errorf("v1.34.4 called the webhook %d times and failed: the exclusion should keep its own writes away", n)
	}
	if strings.Contains(logs, DeadlockLogLine) {
		t.Errorf("log says %q", DeadlockLogLine)
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitServing(ctx, l.Webhook, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := ProbeWebhook(ctx, kube, l.Webhook, "after-upgrade"); err != nil {
		t.Errorf("the excluded webhooks no longer review the admin's writes: %v", err)
	}
}
