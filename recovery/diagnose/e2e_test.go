package diagnose_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

func ptr[T any](v T) *T { return &v }

// kyverno is a Kyverno-like configuration as kube-apiserver stores it
// (defaults filled in): one fail-closed catch-all webhook, one failing open.
func kyverno() *admissionregistrationv1.ValidatingWebhookConfiguration {
	hook := func(name, path string, fp admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://127.0.0.1:9443" + path)},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: ptr(admissionregistrationv1.AllScopes)},
			}},
			FailurePolicy:           ptr(fp),
			MatchPolicy:             ptr(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			TimeoutSeconds:          ptr(int32(10)),
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "kyverno-resource-validating-webhook-cfg", UID: "6f1c2e0a-kyverno", Generation: 1,
			Labels: map[string]string{"webhook.kyverno.io/managed-by": "kyverno"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook("validate.kyverno.svc-fail", "/validate/fail", admissionregistrationv1.Fail),
			hook("validate.kyverno.svc-ignore", "/validate/ignore", admissionregistrationv1.Ignore),
		},
	}
}

// certManager is an innocent bystander: fail-closed, but its webhook name
// is not in the logs.
func certManager() *admissionregistrationv1.ValidatingWebhookConfiguration {
	c := kyverno()
	c.Name = "cert-manager-webhook"
	c.Webhooks = c.Webhooks[:1]
	c.Webhooks[0].Name = "webhook.cert-manager.io"
	return c
}

func seedEtcd(t *testing.T) *etcd.Client {
	t.Helper()
	srv := etcdtest.StartTLS(t)
	ctx := context.Background()
	ec, err := etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ec.Close() })
	for name, obj := range map[string]runtime.Object{"kyverno-resource-validating-webhook-cfg": kyverno(), "cert-manager-webhook": certManager()} {
		v, err := etcdtest.EncodeProtobuf(obj, admissionregistrationv1.SchemeGroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ec.KV().Put(ctx, "/registry/validatingwebhookconfigurations/"+name, string(v)); err != nil {
			t.Fatal(err)
		}
	}
	return ec
}

func startCluster(t *testing.T, cps int, runner talostest.PodRunner) *talostest.Cluster {
	t.Helper()
	c, err := talostest.NewCluster(t.Context(), talostest.ClusterOptions{
		ControlPlanes: cps, Dir: t.TempDir(), Runner: runner,
		Kubelet: talostest.KubeletOptions{TimeScale: 0.005}, // poll 100ms, status 75ms, back-off 50ms
	})
	if err != nil {
		t.Fatalf("start emulated nodes: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func connect(t *testing.T, c *talostest.Cluster, r role.Role) *talos.Client {
	t.Helper()
	path, err := c.Talosconfig(r)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range c.Nodes {
		nodes = append(nodes, n.IP)
	}
	tc, err := talos.Connect(t.Context(), talos.Options{Talosconfig: path, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	return tc
}

// waitFor polls cond every 10ms; the deadline only guards against a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func restartedTwice(t *testing.T, tc *talos.Client, c *talostest.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		waitFor(t, "kube-apiserver restarts on "+n.IP, func() bool {
			st, err := tc.ReadAPIServerStatus(t.Context(), n.IP, n.Name)
			return err == nil && st.RestartCount >= 2
		})
	}
}

// deadlockedNodes starts cps emulated control planes whose kube-apiserver
// logs the excerpt (testdata/logs) and restarts, and connects to them as r
// once each has restarted twice.
func deadlockedNodes(t *testing.T, cps int, excerpt string, r role.Role) (*talostest.Cluster, *talos.Client) {
	t.Helper()
	// kube-apiserver in the incident: it logs what the real v1.34.4 logged
	// and never becomes live nor ready, so the kubelet restarts it again and
	// again; it exits later than a status refresh (75ms here).
	c := startCluster(t, cps, talostest.Logged{Lines: diagnose.ReadLogExcerpt(t, excerpt), ExitAfter: 200 * time.Millisecond})
	tc := connect(t, c, r)
	restartedTwice(t, tc, c)
	return c, tc
}

// The incident end to end: two emulated control planes whose kube-apiserver
// logs the real deadlock and restarts, an embedded etcd holding the
// configurations as kube-apiserver stores them. The verdict names the
// configuration and the command that removes it.
func TestRunNamesTheDeadlockedConfiguration(t *testing.T) {
	c, tc := deadlockedNodes(t, 2, "upgrade-deadlock.log", role.Admin)
	ec := seedEtcd(t)

	healthAsked := 0
	r, err := diagnose.Run(t.Context(), tc, ec, diagnose.Options{
		Tail: 100,
		// What recovery.CheckHealth reports of a deadlocked v1.34.4 (testdata/readyz-deadlock.txt),
		// for the first node; the second does not answer.
		Health: func(context.Context) ([]diagnose.Readyz, error) {
			healthAsked++
			return []diagnose.Readyz{
				{Node: c.Nodes[0].IP, FailingChecks: []string{"poststarthook/start-service-ip-repair-controllers", "poststarthook/rbac/bootstrap-roles", "poststarthook/start-kubernetes-service-cidr-controller", "autoregister-completion"}},
				{Node: c.Nodes[1].IP, Error: "connect: connection refused"},
			}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != diagnose.AdmissionDeadlock {
		t.Fatalf("verdict %s: %s", r.Verdict, r.Summary)
	}
	if len(r.Culprits) != 1 {
		t.Fatalf("culprits %+v", r.Culprits)
	}
	cu := r.Culprits[0]
	if cu.Kind != "ValidatingWebhookConfiguration" || cu.Name != "kyverno-resource-validating-webhook-cfg" || cu.Webhook != "validate.kyverno.svc-fail" ||
		cu.FailurePolicy != "Fail" || cu.Key != "/registry/validatingwebhookconfigurations/kyverno-resource-validating-webhook-cfg" || !cu.FoundInEtcd || cu.Plugin != "ValidatingAdmissionWebhook" {
		t.Errorf("culprit %+v", cu)
	}
	if len(r.Next) == 0 || r.Next[0] != "breakglass recover --delete kyverno-resource-validating-webhook-cfg" {
		t.Errorf("next %v", r.Next)
	}
	if healthAsked != 1 {
		t.Errorf("readyz asked %d times", healthAsked)
	}
	ev := r.Evidence
	if len(ev.Etcd.Objects) != 2 || ev.Etcd.Error != "" {
		t.Errorf("etcd evidence %+v", ev.Etcd)
	}
	for i, ne := range ev.Nodes {
		if ne.Node != c.Nodes[i].IP || ne.NodeName != c.Nodes[i].Name {
			t.Errorf("node %d is %s (%s)", i, ne.Node, ne.NodeName)
		}
		// Ready or not depends on the moment (no probes: Ready while the container runs); the restarts do not.
		if ne.Pod == nil || !ne.Pod.Found || ne.Pod.Restarts < 2 {
			t.Errorf("node %s pod %+v", ne.Node, ne.Pod)
		}
		if ne.LogLinesRead == 0 || ne.LogLinesRead > 100 {
			t.Errorf("node %s: %d log lines read with tail 100", ne.Node, ne.LogLinesRead)
		}
		if len(ne.Errors) > 0 {
			t.Errorf("node %s errors %v", ne.Node, ne.Errors)
		}
		if ne.Readyz == nil {
			t.Errorf("node %s: readyz not merged", ne.Node)
		}
	}
	f := r.Findings[0]
	if f.Signature != "webhook-failing-closed" || f.Subject != "validate.kyverno.svc-fail" || len(f.Nodes) != 2 {
		t.Errorf("first finding %+v", f)
	}
	if !strings.Contains(r.Summary, "start-kubernetes-service-cidr-controller") || !strings.Contains(r.Summary, "the default ServiceCIDR") {
		t.Errorf("summary %s", r.Summary)
	}
}

// An Omni break-glass talosconfig (os:operator) reads logs and pod status,
// and without etcd the webhook is still named, the configuration is not.
func TestRunWithoutEtcdAsOperator(t *testing.T) {
	c, tc := deadlockedNodes(t, 1, "rbac-bootstrap-fatal.log", role.Operator)
	r, err := diagnose.Run(t.Context(), tc, nil, diagnose.Options{EtcdError: fmt.Errorf("etcd unreachable: https://%s:2379: connection refused", c.Nodes[0].IP)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != diagnose.AdmissionDeadlock {
		t.Fatalf("verdict %s: %s", r.Verdict, r.Summary)
	}
	if len(r.Culprits) != 1 || r.Culprits[0].Webhook != "validate.kyverno.svc-fail" || r.Culprits[0].Name != "" {
		t.Errorf("culprits %+v", r.Culprits)
	}
	if strings.Join(r.Next, "|") != "breakglass admission disable --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook" {
		t.Errorf("next %v", r.Next)
	}
	if !r.Evidence.Etcd.Asked || !strings.Contains(r.Evidence.Etcd.Error, "connection refused") {
		t.Errorf("etcd evidence %+v", r.Evidence.Etcd)
	}
}

func TestRunHealthyAndUnreachable(t *testing.T) {
	c := startCluster(t, 2, talostest.StandIn{ReadyAfter: 10 * time.Millisecond})
	tc := connect(t, c, role.Reader)
	for _, n := range c.Nodes {
		waitFor(t, "ready on "+n.IP, func() bool {
			st, err := tc.ReadAPIServerStatus(t.Context(), n.IP, n.Name)
			return err == nil && st.Ready
		})
	}
	// Running pods alone prove nothing (Talos sets no probes on kube-apiserver).
	r, err := diagnose.Run(t.Context(), tc, nil, diagnose.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != diagnose.Unknown || !strings.Contains(r.Summary, "readiness could not be checked") {
		t.Fatalf("without /readyz: verdict %s: %s, next %v", r.Verdict, r.Summary, r.Next)
	}
	// With /readyz answering ready on every node (the stand-in serves none:
	// its answer is given here), healthy.
	down := map[string]bool{}
	readyz := func(context.Context) ([]diagnose.Readyz, error) {
		var out []diagnose.Readyz
		for _, n := range c.Nodes {
			if down[n.IP] {
				out = append(out, diagnose.Readyz{Node: n.IP, Error: "connect: connection refused"})
				continue
			}
			out = append(out, diagnose.Readyz{Node: n.IP, Ready: true})
		}
		return out, nil
	}
	r, err = diagnose.Run(t.Context(), tc, nil, diagnose.Options{Health: readyz})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != diagnose.Healthy || len(r.Next) != 0 {
		t.Fatalf("verdict %s: %s, next %v", r.Verdict, r.Summary, r.Next)
	}

	// One node's Talos API goes away: never healthy, and it is named.
	c.Nodes[1].Stop()
	down[c.Nodes[1].IP] = true
	r, err = diagnose.Run(t.Context(), tc, nil, diagnose.Options{Health: readyz})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != diagnose.Unknown || !strings.Contains(r.Summary, c.Nodes[1].IP) {
		t.Fatalf("verdict %s: %s", r.Verdict, r.Summary)
	}
	if ne := r.Evidence.Nodes[1]; len(ne.Errors) == 0 || !strings.Contains(ne.Errors[0], "unreachable") {
		t.Errorf("errors of the stopped node: %v", ne.Errors)
	}
	if len(r.Next) != 1 || r.Next[0] != "talosctl -n "+c.Nodes[1].IP+" version" {
		t.Errorf("next %v; errors %v / %v", r.Next, r.Evidence.Nodes[0].Errors, r.Evidence.Nodes[1].Errors)
	}
}

func TestRunWithoutNodes(t *testing.T) {
	_, err := diagnose.Gather(t.Context(), noNodes{}, nil, diagnose.Options{})
	if err != diagnose.ErrNoNodes {
		t.Fatalf("err %v", err)
	}
}

// noNodes is a talosconfig context without nodes; nothing else is called.
type noNodes struct{}

func (noNodes) Nodes() []string { return nil }
func (noNodes) NodeName(context.Context, string) (string, error) {
	panic("not called")
}
func (noNodes) ReadAPIServerPod(context.Context, string) (talos.APIServerPod, error) {
	panic("not called")
}
func (noNodes) ReadAPIServerStatus(context.Context, string, string) (talos.PodStatus, error) {
	panic("not called")
}
func (noNodes) RunningAPIServerContainer(context.Context, string, string) (string, error) {
	panic("not called")
}
func (noNodes) APIServerLogs(context.Context, string, string, string, int) ([]string, error) {
	panic("not called")
}

// A plugin both enabled and disabled: kube-apiserver refuses to start
// (the stand-in answers as v1.34.4 does, testdata/logs/plugins-overlapped.log).
// diagnose sees it in the rendered flags and in the log.
func TestRunPluginsOverlapped(t *testing.T) {
	runner := talostest.StandIn{ReadyAfter: 10 * time.Millisecond, Crash: func(c talostest.ContainerConfig) string {
		if talostest.FlagHas(c, "enable-admission-plugins", "ValidatingAdmissionWebhook") && talostest.FlagHas(c, "disable-admission-plugins", "ValidatingAdmissionWebhook") {
			return `"command failed" err="[ValidatingAdmissionWebhook] in enable-admission-plugins and disable-admission-plugins overlapped"`
		}
		return ""
	}}
	c := startCluster(t, 1, runner)
	tc := connect(t, c, role.Admin)
	n := c.Nodes[0]
	cfg := string(n.RunningConfig())
	marker := "\n    apiServer:\n"
	if !strings.Contains(cfg, marker) {
		t.Fatal("no apiServer section in the generated config")
	}
	cfg = strings.Replace(cfg, marker, marker+"        extraArgs:\n            enable-admission-plugins: ValidatingAdmissionWebhook\n            disable-admission-plugins: ValidatingAdmissionWebhook\n", 1)
	if _, err := tc.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: []byte(cfg), Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	restartedTwice(t, tc, c)
	// Right after a restart the new container may not have logged its
	// refusal yet: look again, as an operator would, until it has.
	var r *diagnose.Report
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		if r, err = diagnose.Run(t.Context(), tc, nil, diagnose.Options{}); err != nil {
			t.Fatal(err)
		}
		if len(r.Findings) > 0 && len(r.Findings[0].Lines) > 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.Verdict != diagnose.OtherFailure {
		t.Fatalf("verdict %s: %s", r.Verdict, r.Summary)
	}
	f := r.Findings[0]
	if f.Signature != "admission-plugins-overlapped" || f.Subject != "ValidatingAdmissionWebhook" {
		t.Fatalf("first finding %+v", f)
	}
	sources := map[diagnose.Source]bool{}
	for _, l := range f.Lines {
		sources[l.Source] = true
	}
	if !sources[diagnose.SourceFlags] || !sources[diagnose.SourceLog] {
		t.Errorf("evidence sources %v, want flags and log: %+v", sources, f.Lines)
	}
	if ne := r.Evidence.Nodes[0]; strings.Join(ne.EnabledPlugins, ",") != "NodeRestriction,ValidatingAdmissionWebhook" || strings.Join(ne.DisabledPlugins, ",") != "ValidatingAdmissionWebhook" {
		t.Errorf("flags read: enabled %v disabled %v", ne.EnabledPlugins, ne.DisabledPlugins)
	}
	if len(r.Next) == 0 || r.Next[0] != "breakglass admission status" {
		t.Errorf("next %v", r.Next)
	}
}
