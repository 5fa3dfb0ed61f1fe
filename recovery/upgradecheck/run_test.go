package upgradecheck

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

func verdicts(r *Report) map[string]Verdict {
	out := map[string]Verdict{}
	for _, c := range r.Checks {
		out[c.ID] = c.Verdict
	}
	return out
}

func mustCheck(t *testing.T, r *Report, id string) Check {
	t.Helper()
	c, ok := r.Check(id)
	if !ok {
		t.Fatalf("no check %s in %+v", id, verdicts(r))
	}
	return c
}

func TestHealthyClusterIsGo(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{controlPlanes: 3})
	r := Run(t.Context(), tc.options("1.34"))
	want := map[string]Verdict{CheckAccess: Go, CheckUpgradePath: Go, CheckTalosSupport: Go, CheckAdmission: Go, CheckAPIServerFlags: Go,
		CheckEtcdMembers: Go, CheckEtcdAlarms: Go, CheckEtcdSpace: Go, CheckStoredVersions: Go, CheckRollbackPoint: Warn,
		CheckTalosAccess: Go, CheckEncryption: Go}
	got := verdicts(r)
	for id, v := range want {
		if got[id] != v {
			c, _ := r.Check(id)
			t.Errorf("%s: %s (%s), want %s\n  evidence: %s", id, got[id], c.Summary, v, strings.Join(c.Evidence, "\n  "))
		}
	}
	if r.Verdict != Warn || r.From != "1.33" || r.To != "1.34" || len(got) != len(want) {
		t.Errorf("report %s %s -> %s, checks %v", r.Verdict, r.From, r.To, got)
	}
	// The first cluster's name is its context; the pair's writes are the recording's.
	if !strings.Contains(strings.Join(mustCheck(t, r, CheckUpgradePath).Evidence, "\n"), "recorded from the real binaries (v1.33.13 -> v1.34.4)") {
		t.Errorf("upgrade-path evidence: %v", mustCheck(t, r, CheckUpgradePath).Evidence)
	}
	// --strict: the missing rollback point is a no-go; a snapshot taken now is go.
	o := tc.options("1.34")
	o.Strict = true
	if r := Run(t.Context(), o); r.Verdict != NoGo {
		t.Errorf("strict without a snapshot: %s", r.Verdict)
	}
	o.Snapshot = filepath.Join(t.TempDir(), "before.snapshot")
	r = Run(t.Context(), o)
	if c := mustCheck(t, r, CheckRollbackPoint); c.Verdict != Go || r.Verdict != Go {
		t.Errorf("with --snapshot: %s %s (%s)", r.Verdict, c.Verdict, c.Summary)
	}
	if st, err := os.Stat(o.Snapshot); err != nil || st.Size() == 0 {
		t.Errorf("snapshot file: %v", err)
	}
	// Named, it is the rollback point of the next run: verified, its age said.
	o.Snapshot, o.LastSnapshots, o.Strict = "", []string{filepath.Dir(o.Snapshot)}, false
	if c := mustCheck(t, Run(t.Context(), o), CheckRollbackPoint); c.Verdict != Go || !strings.Contains(c.Summary, "is a verified snapshot of this cluster") {
		t.Errorf("last snapshot: %s (%s)", c.Verdict, c.Summary)
	}
	// A snapshot that does not verify is no rollback point.
	bad := filepath.Join(t.TempDir(), "bad.snapshot")
	if err := os.WriteFile(bad, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.LastSnapshots = []string{bad}
	if c := mustCheck(t, Run(t.Context(), o), CheckRollbackPoint); c.Verdict != NoGo {
		t.Errorf("bad snapshot: %s (%s)", c.Verdict, c.Summary)
	}
}

// A fail-closed catch-all webhook: 1.34 updates and creates ClusterRoles
// at its first start after 1.33 (recorded), which it rejects.
func TestAdmissionNoGoAndItsFix(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{})
	hook := etcdtest.FailClosedWebhook("policy-engine", "https://127.0.0.1:1/validate")
	b, err := etcdtest.EncodeProtobuf(hook, admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	tc.put(t, "/registry/validatingwebhookconfigurations/policy-engine", b)
	r := Run(t.Context(), tc.options("1.34"))
	c := mustCheck(t, r, CheckAdmission)
	if c.Verdict != NoGo || !strings.Contains(c.Summary, "policy-engine") || r.Verdict != NoGo || r.Checks[0].ID != CheckAdmission {
		t.Fatalf("admission %s: %s (first check %s)", c.Verdict, c.Summary, r.Checks[0].ID)
	}
	if !strings.Contains(strings.Join(c.Evidence, "\n"), "poststarthook/rbac/bootstrap-roles") || !strings.Contains(strings.Join(c.Fix, "\n"), "audit --from-etcd --fix --from 1.33 --to 1.34") {
		t.Errorf("evidence %q, fix %q", c.Evidence, c.Fix)
	}
	// The fix the gate names: the matchCondition that excludes kube-apiserver.
	hook.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "breakglass-exclude-apiserver", Expression: "request.userInfo.username != 'system:apiserver'"}}
	if b, err = etcdtest.EncodeProtobuf(hook, admissionregistrationv1.SchemeGroupVersion); err != nil {
		t.Fatal(err)
	}
	tc.put(t, "/registry/validatingwebhookconfigurations/policy-engine", b)
	if c := mustCheck(t, Run(t.Context(), tc.options("1.34")), CheckAdmission); c.Verdict != Go {
		t.Errorf("after the fix: %s (%s)", c.Verdict, c.Summary)
	}
}

// A feature gate 1.34 locks: the fix is the talosctl patch the gate
// prints, applied as talosctl applies it (configpatcher, then the node).
func TestFlagsNoGoAndThePatchItPrints(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{controlPlanes: 2})
	node := tc.cluster.Nodes[0]
	apply := func(cfg []byte) {
		t.Helper()
		cl, err := talos.Connect(t.Context(), talos.Options{Talosconfig: tc.talosconfig, Nodes: []string{node.IP}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := cl.Apply(t.Context(), node.IP, talos.ApplyRequest{Config: cfg, Mode: talos.NoReboot}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := strings.Replace(string(node.RunningConfig()), "\n    apiServer:\n", "\n    apiServer:\n        extraArgs:\n            feature-gates: APIResponseCompression=true,MultiCIDRServiceAllocator=false\n", 1)
	apply([]byte(cfg))
	r := Run(t.Context(), tc.options("1.34"))
	c := mustCheck(t, r, CheckAPIServerFlags)
	if c.Verdict != NoGo || !strings.Contains(strings.Join(c.Evidence, "\n"), "locked to true") {
		t.Fatalf("flags %s: %s\n%v", c.Verdict, c.Summary, c.Evidence)
	}
	var patches []string
	for _, f := range c.Fix {
		if strings.HasPrefix(f, "talosctl ") && strings.Contains(f, "-n "+node.IP+" ") {
			for _, p := range strings.Split(f, " -p '")[1:] {
				patches = append(patches, strings.TrimSuffix(p, "'"))
			}
		}
	}
	if len(patches) == 0 {
		t.Fatalf("no talosctl patch for %s in %q", node.IP, c.Fix)
	}
	loaded, err := configpatcher.LoadPatches(patches)
	if err != nil {
		t.Fatal(err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(node.RunningConfig()), loaded)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(patched), "APIResponseCompression=true") || strings.Contains(string(patched), "MultiCIDRServiceAllocator") {
		t.Fatalf("patched extraArgs:\n%s", patched)
	}
	apply(patched)
	if c := mustCheck(t, Run(t.Context(), tc.options("1.34")), CheckAPIServerFlags); c.Verdict != Go {
		t.Errorf("after the patch: %s (%s) %v", c.Verdict, c.Summary, c.Evidence)
	}
	// On 1.33 the same gate only warns (GA, accepted): a warning, not a no-go.
	tc2 := newTestCluster(t, clusterSpec{kubernetes: "1.32.13"})
	n2 := tc2.cluster.Nodes[0]
	node = n2
	tc.talosconfig, tc.cluster = tc2.talosconfig, tc2.cluster
	apply([]byte(cfg2(string(n2.RunningConfig()))))
	if c := mustCheck(t, Run(t.Context(), tc2.options("1.33")), CheckAPIServerFlags); c.Verdict != Warn {
		t.Errorf("1.32 -> 1.33: %s (%s)", c.Verdict, c.Summary)
	}
}

func cfg2(cfg string) string {
	return strings.Replace(cfg, "\n    apiServer:\n", "\n    apiServer:\n        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=false\n", 1)
}

// 1.32 -> 1.34 skips a minor; Talos 1.10 does not run 1.34.
func TestPathAndTalosSupport(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{kubernetes: "1.32.13", talos: "v1.10.6"})
	r := Run(t.Context(), tc.options("1.34"))
	path, sup := mustCheck(t, r, CheckUpgradePath), mustCheck(t, r, CheckTalosSupport)
	if path.Verdict != NoGo || !strings.Contains(path.Summary, "skips 1.33") {
		t.Errorf("path %s: %s", path.Verdict, path.Summary)
	}
	if sup.Verdict != NoGo || !strings.Contains(strings.Join(sup.Evidence, "\n"), "Talos v1.10.6 (its Talos API) runs Kubernetes 1.28 to 1.33, not 1.34") ||
		!strings.Contains(strings.Join(sup.Fix, "\n"), "1.11") {
		t.Errorf("support %s: %s %v %v", sup.Verdict, sup.Summary, sup.Evidence, sup.Fix)
	}
	// The admission and flags checks are not run for a path breakglass cannot audit: no-go, not go.
	if a := mustCheck(t, r, CheckAdmission); a.Verdict != Go && !a.NotChecked {
		t.Errorf("admission on a skipped minor: %s %s", a.Verdict, a.Summary)
	}
	if r := Run(t.Context(), tc.options("1.33")); mustCheck(t, r, CheckUpgradePath).Verdict != Go || mustCheck(t, r, CheckTalosSupport).Verdict != Go {
		t.Errorf("1.32 -> 1.33 on Talos 1.10: %v", verdicts(r))
	}
}

// A full etcd: the alarm and the room are no-gos naming the recovery.
func TestFullEtcdIsNoGo(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{quota: 2 << 20})
	// etcd checks its quota against the size of its last committed batch,
	// so a fast writer overshoots it by a batch or more: write up to 20
	// times the quota and require the refusal to be NOSPACE.
	if err := etcdtest.Fill(t.Context(), tc.kv, "/registry/events/flood/e", 40000, 1024); err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("etcd took 40 MiB under a 2 MiB quota, or refused it otherwise: %v", err)
	}
	r := Run(t.Context(), tc.options("1.34"))
	al, sp := mustCheck(t, r, CheckEtcdAlarms), mustCheck(t, r, CheckEtcdSpace)
	if al.Verdict != NoGo || !strings.Contains(al.Summary, "NOSPACE") || !strings.Contains(strings.Join(al.Fix, "\n"), "recover") {
		t.Errorf("alarms %s: %s %v", al.Verdict, al.Summary, al.Fix)
	}
	if sp.Verdict != NoGo || !strings.Contains(strings.Join(sp.Evidence, "\n"), "quota") {
		t.Errorf("space %s: %s %v", sp.Verdict, sp.Summary, sp.Evidence)
	}
}

// Objects stored at a version 1.34 no longer registers (networking
// v1alpha1, an alpha 1.32 served); manifests last applied in one 1.36
// dropped (autoscaling/v2beta2).
func TestStoredVersions(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{})
	stored := func(apiVersion, kind, lastApplied string) []byte {
		t.Helper()
		meta := []byte{}
		if lastApplied != "" {
			// ObjectMeta{annotations: {last-applied: ...}} by hand: field 12, entry key 1, value 2.
			entry := append(protoBytes(1, []byte("kubectl.kubernetes.io/last-applied-configuration")), protoBytes(2, []byte(lastApplied))...)
			meta = protoBytes(12, entry)
		}
		u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: protoBytes(1, meta)}
		b, err := u.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte("k8s\x00"), b...)
	}
	tc.put(t, "/registry/horizontalpodautoscalers/shop/web", stored("autoscaling/v2", "HorizontalPodAutoscaler", `{"apiVersion":"autoscaling/v2beta2","kind":"HorizontalPodAutoscaler"}`))
	o := tc.options("1.34")
	if c := mustCheck(t, Run(t.Context(), o), CheckStoredVersions); c.Verdict != Go {
		t.Errorf("1.34 still serves autoscaling/v2beta2: %s (%s)", c.Verdict, c.Summary)
	}
	tc2 := newTestCluster(t, clusterSpec{kubernetes: "1.35.4"})
	tc2.put(t, "/registry/horizontalpodautoscalers/shop/web", stored("autoscaling/v2", "HorizontalPodAutoscaler", `{"apiVersion":"autoscaling/v2beta2","kind":"HorizontalPodAutoscaler"}`))
	if c := mustCheck(t, Run(t.Context(), tc2.options("1.36")), CheckStoredVersions); c.Verdict != Warn || !strings.Contains(c.Summary, "autoscaling/v2beta2") {
		t.Errorf("1.36 dropped autoscaling/v2beta2: %s (%s)", c.Verdict, c.Summary)
	}
	tc.put(t, "/registry/servicecidrs/old", stored("networking.k8s.io/v1alpha1", "ServiceCIDR", ""))
	c := mustCheck(t, Run(t.Context(), o), CheckStoredVersions)
	if c.Verdict != NoGo || !strings.Contains(c.Summary, "networking.k8s.io/v1alpha1") || !strings.Contains(c.Summary, "v1.34.4") {
		t.Errorf("networking v1alpha1 on 1.34: %s (%s)", c.Verdict, c.Summary)
	}
}

func protoBytes(field int, b []byte) []byte {
	out := []byte{byte(field<<3 | 2)}
	if field >= 16 {
		panic("one-byte tags only")
	}
	n := len(b)
	for n >= 0x80 {
		out = append(out, byte(n)|0x80)
		n >>= 7
	}
	return append(append(out, byte(n)), b...)
}

// blackhole accepts connections and never answers: a Talos endpoint that
// hangs (what a firewall that drops, or a stuck apid, looks like).
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}

// Two clusters side by side, one of them unreachable: both verdicts, and
// the unreachable one given up after its connect timeout, not a hang.
func TestFleetWithAnUnreachableCluster(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{})
	cfg, err := config.Open(tc.talosconfig)
	if err != nil {
		t.Fatal(err)
	}
	good := *cfg.Contexts[cfg.Context]
	lost := good
	lost.Endpoints, lost.Nodes = []string{blackhole(t)}, []string{"127.0.9.9"}
	cfg.Contexts["lost"] = &lost
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	names, _, err := talos.Contexts(t.Context(), path)
	if err != nil || len(names) != 2 {
		t.Fatalf("contexts %v %v", names, err)
	}
	timeout := 2 * time.Second
	var opts []Options
	for _, name := range names {
		o := tc.options("1.34")
		o.Talos.Talosconfig, o.Talos.Context, o.Talos.ConnectTimeout = path, name, timeout
		if name == "lost" {
			o.Etcd = recovery.EtcdOptions{}
		}
		opts = append(opts, o)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a hang fails here, not by a stopwatch
	defer cancel()
	fl := RunFleet(ctx, opts)
	if len(fl.Clusters) != 2 || fl.Verdict != NoGo {
		t.Fatalf("fleet %s, %d clusters", fl.Verdict, len(fl.Clusters))
	}
	for _, r := range fl.Clusters {
		t.Logf("%s: %s in %s", r.Cluster, r.Verdict, r.Elapsed.Round(time.Millisecond))
		if r.Cluster == "lost" {
			a := mustCheck(t, r, CheckAccess)
			if r.Verdict != NoGo || a.Verdict != NoGo || !strings.Contains(a.Summary, "did not answer") {
				t.Errorf("lost: %s, access %s", r.Verdict, a.Summary)
			}
			for _, c := range r.Checks {
				if c.ID != CheckAccess && c.ID != CheckRollbackPoint && !c.NotChecked {
					t.Errorf("lost: %s checked: %s", c.ID, c.Summary)
				}
			}
		} else if r.Verdict == NoGo {
			t.Errorf("%s: %v", r.Cluster, verdicts(r))
		}
	}
}
