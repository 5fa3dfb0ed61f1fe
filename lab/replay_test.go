package lab

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/labflags"
)

// The replay installs params before policies and webhook configurations
// last, leaves out what is no admission object or param, and unrolls Lists.
func TestReplayObjectsOrderAndSelection(t *testing.T) {
	in := `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: vwc, resourceVersion: "42", uid: x}
webhooks: []
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: kyverno, namespace: kyverno}
---
apiVersion: v1
kind: List
items:
- apiVersion: admissionregistration.k8s.io/v1
  kind: ValidatingAdmissionPolicyBinding
  metadata: {name: b}
- apiVersion: admissionregistration.k8s.io/v1
  kind: ValidatingAdmissionPolicy
  metadata: {name: p}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: params, namespace: policy}
- apiVersion: v1
  kind: Namespace
  metadata: {name: policy}
`
	objs, err := parseReplayObjects([]ReplaySource{{Name: "in.yaml", Data: []byte(in)}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Kind)
	}
	want := "Namespace ConfigMap ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding ValidatingWebhookConfiguration"
	if strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
	md := objs[4].Data["metadata"].(map[string]any)
	if _, ok := md["resourceVersion"]; ok {
		t.Error("resourceVersion kept: the API server would refuse the create")
	}
}

// Every webhook is pointed at the closed loopback port, whatever it named:
// a service, or a URL elsewhere. Nothing the objects name is dialled.
func TestReplayRewritesEveryClientConfig(t *testing.T) {
	data, err := os.ReadFile("testdata/kyverno-like.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseReplayObjects([]ReplaySource{{Name: "kyverno-like.yaml", Data: append(data, []byte(`
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: elsewhere}
webhooks:
- name: a.example.com
  clientConfig: {url: "https://10.0.0.1/x", caBundle: Zm9v}
`)...)}})
	if err != nil {
		t.Fatal(err)
	}
	hooks := 0
	for _, o := range objs {
		pointAtClosedPort(o, "https://127.0.0.1:1")
		for _, h := range o.Data["webhooks"].([]any) {
			cc := h.(map[string]any)["clientConfig"].(map[string]any)
			if _, ok := cc["service"]; ok {
				t.Errorf("%s: service reference kept", o.Name)
			}
			if u, _ := cc["url"].(string); !strings.HasPrefix(u, "https://127.0.0.1:1/") {
				t.Errorf("%s: url %q", o.Name, u)
			}
			hooks++
		}
	}
	if hooks != 3 {
		t.Fatalf("%d webhooks rewritten, want 3", hooks)
	}
}

// Bad requests are refused before anything starts, with the next step.
func TestReplayRefusesBadRequests(t *testing.T) {
	src := []ReplaySource{{Name: "f", Data: []byte("kind: List\n")}}
	bin := t.TempDir()
	for _, c := range []struct {
		name string
		opts ReplayOptions
		want string
		code failure.Category
	}{
		{"no versions", ReplayOptions{Sources: src, KubeBinDir: bin}, "needs the version the cluster runs (--from)", failure.BadInput},
		{"bad version", ReplayOptions{From: "1.32", To: "v1.34.4", Sources: src, KubeBinDir: bin}, "not a Kubernetes release", failure.BadInput},
		{"same versions", ReplayOptions{From: "v1.34.4", To: "1.34.4", Sources: src, KubeBinDir: bin}, "not an upgrade", failure.BadInput},
		// Issue 21: a downgrade was not refused on main.
		{"downgrade", ReplayOptions{From: "v1.34.4", To: "v1.32.13", Sources: src, KubeBinDir: bin}, "--to v1.32.13 is older than --from v1.34.4: that is a downgrade", failure.BadInput},
		{"downgrade within a minor", ReplayOptions{From: "v1.34.10", To: "v1.34.4", Sources: src, KubeBinDir: bin}, "is older than --from v1.34.10", failure.BadInput},
		{"nothing to replay", ReplayOptions{From: "v1.32.13", To: "v1.34.4", KubeBinDir: bin}, "nothing to replay", failure.BadInput},
		{"timeout too short", ReplayOptions{From: "v1.32.13", To: "v1.34.4", Sources: src, KubeBinDir: bin, Timeout: time.Second}, "from 10s to 1h", failure.BadInput},
		{"binary missing", ReplayOptions{From: "v1.32.13", To: "v1.34.4", Sources: src, KubeBinDir: bin}, "no kube-apiserver binary for v1.32.13, v1.34.4", failure.LabNoBinaries},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Replay(t.Context(), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) || failure.Code(err) != int(c.code) {
				t.Fatalf("err %v (exit %d), want %q (exit %d)", err, failure.Code(err), c.want, c.code)
			}
			if c.code == failure.BadInput && len(failure.Hints(err)) == 0 {
				t.Error("no hint")
			}
		})
	}
}

// A binary whose version is not the one its directory names is never run.
func TestReplayRefusesBinaryOfAnotherVersion(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"v1.32.13", "v1.34.4"} {
		if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
		// v1.34.4's directory holds a 1.33 binary
		says := map[string]string{"v1.32.13": "v1.32.13", "v1.34.4": "v1.33.13"}[v]
		if err := os.WriteFile(filepath.Join(dir, v, "kube-apiserver"), []byte("#!/bin/sh\necho Kubernetes "+says+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Replay(t.Context(), ReplayOptions{From: "v1.32.13", To: "v1.34.4", KubeBinDir: dir,
		Sources: []ReplaySource{{Name: "f", Data: []byte("kind: List\n")}}})
	if !errors.Is(err, ErrWrongBinaryVersion) || !strings.Contains(err.Error(), `says "Kubernetes v1.33.13"`) {
		t.Fatalf("err %v", err)
	}
	if failure.Code(err) != int(failure.LabNoBinaries) {
		t.Errorf("exit %d, want %d", failure.Code(err), failure.LabNoBinaries)
	}
}

// The scenario's manifest holds the objects its constants name.
func TestMutatingPolicyManifest(t *testing.T) {
	objs, err := parseReplayObjects([]ReplaySource{{Name: "mutating-policy.yaml", Data: MutatingPolicyManifest}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Kind+" "+o.Name)
	}
	want := []string{"MutatingAdmissionPolicy " + MutatingPolicy, "MutatingAdmissionPolicyBinding " + MutatingPolicyBinding}
	if !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
}

// A lab's addresses: consecutive from the first, loopback only, within its /24.
func TestNodeIPs(t *testing.T) {
	for _, tc := range []struct {
		first string
		n     int
		want  []string
	}{
		{"", 3, []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}},
		{"127.0.4.11", 2, []string{"127.0.4.11", "127.0.4.12"}},
		{"127.9.9.254", 1, []string{"127.9.9.254"}},
		{"127.0.1.253", 3, nil},
		{"127.0.1.0", 1, nil},
		{"10.0.0.11", 1, nil},
		{"::1", 1, nil},
		{"localhost", 1, nil},
	} {
		got, err := NodeIPs(tc.first, tc.n)
		if !slices.Equal(got, tc.want) || (tc.want == nil) != errors.Is(err, failure.BadInput) {
			t.Errorf("NodeIPs(%q, %d) = %v, %v; want %v", tc.first, tc.n, got, err, tc.want)
		}
	}
}

// Every key a machine config carries is replayed, except those that name
// an address, port, file, certificate, key or etcd, or that the lab owns.
func TestReplayArgRefusal(t *testing.T) {
	for _, k := range []string{"feature-gates", "runtime-config", "cloud-provider", "enable-admission-plugins", "disable-admission-plugins",
		"emulated-version", "storage-media-type", "audit-log-maxage", "authorization-mode", "tls-min-version", "service-account-lookup",
		"kubelet-preferred-address-types", "service-node-port-range", "insecure-port", "runtime-config-emulation-forward-compatible", "v"} {
		if why := ReplayArgRefusal(k); why != "" {
			t.Errorf("%s refused: %s", k, why)
		}
	}
	for _, k := range []string{"etcd-servers", "etcd-prefix", "bind-address", "advertise-address", "secure-port", "tls-cert-file", "tls-private-key-file",
		"tls-sni-cert-key", "client-ca-file", "service-account-key-file", "service-account-issuer", "service-account-jwks-uri", "oidc-issuer-url",
		"oidc-client-id", "authentication-config", "authorization-config", "authorization-webhook-config-file", "audit-webhook-config-file",
		"audit-log-path", "audit-policy-file", "encryption-provider-config", "egress-selector-config-file", "tracing-config-file",
		"admission-control-config-file", "cloud-config", "kubelet-certificate-authority", "kubelet-client-key", "proxy-client-cert-file",
		"requestheader-client-ca-file", "cert-dir", "token-auth-file", "debug-socket-path", "peer-ca-file", "peer-advertise-ip",
		"service-cluster-ip-range", "endpoint-reconciler-type", "permit-port-sharing", "allow-metric-labels-manifest", "version", "help",
		"--feature-gates", "Feature-Gates", ""} {
		if ReplayArgRefusal(k) == "" {
			t.Errorf("%q accepted", k)
		}
	}
}

// A machine config among the sources gives the replay its extraArgs (list
// values comma-joined), leaves out the keys the replay does not set, and
// refuses a key given twice with different values.
func TestReplayTakesMachineConfigs(t *testing.T) {
	mc := []byte("version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  apiServer:\n    extraArgs:\n" +
		"      feature-gates: [MultiCIDRServiceAllocator=false, SidecarContainers=true]\n      cloud-provider: external\n      oidc-issuer-url: https://idp.example.com\n")
	o := ReplayOptions{Sources: []ReplaySource{{Name: "cp1.yaml", Data: mc}, {Name: "objs.yaml", Data: []byte("kind: List\n")}}}
	left, err := o.takeMachineConfigs()
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Sources) != 1 || o.Sources[0].Name != "objs.yaml" {
		t.Errorf("sources %+v", o.Sources)
	}
	if o.APIServerArgs["feature-gates"] != "MultiCIDRServiceAllocator=false,SidecarContainers=true" || o.APIServerArgs["cloud-provider"] != "external" || len(o.APIServerArgs) != 2 {
		t.Errorf("args %v", o.APIServerArgs)
	}
	if len(left) != 1 || !strings.Contains(left[0], `cp1.yaml: "oidc-issuer-url"`) {
		t.Errorf("left out %v", left)
	}
	o = ReplayOptions{Sources: []ReplaySource{{Name: "cp1.yaml", Data: mc}}, APIServerArgs: map[string]string{"cloud-provider": "aws"}}
	if _, err := o.takeMachineConfigs(); err == nil || failure.Code(err) != int(failure.BadInput) {
		t.Errorf("a key given twice: %v", err)
	}
	// FROM refusing a flag is refused before anything starts.
	err = fromAcceptsArgs(ReplayOptions{From: "v1.33.13", To: "v1.34.4", APIServerArgs: map[string]string{"cloud-provider": "external"}})
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver v1.33.13 refuses --cloud-provider itself (Error: unknown flag: --cloud-provider)") {
		t.Errorf("from refuses: %v", err)
	}
}

// A crashed container's log may be garbage-collected before the replay
// reads it: the process's own last lines still say why it exited.
func TestExitReasonFromLastLog(t *testing.T) {
	line := `E1202 06:00:42.064243   17564 run.go:72] "command failed" err="cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true"`
	for _, c := range []struct{ logs, last, want string }{
		{"", line + "\n", line},
		{line, "", line},
		{"", "Error: unknown flag: --cloud-provider\n", "Error: unknown flag: --cloud-provider"},
		{"", "", "exit status 1"},
	} {
		if got := exitReason(ContainerRun{ExitErr: "exit status 1", LastLog: c.last}, c.logs); got != c.want {
			t.Errorf("exitReason(%q, %q) = %q, want %q", c.logs, c.last, got, c.want)
		}
	}
}

// Issue 29: lab replay dropped extraArgs keys without naming them. Every
// key a machine config carries is replayed or named: an empty key, one of
// control characters (which would redraw the terminal, hiding itself), a
// key given twice in one config (the last won, the first went unsaid;
// Talos refuses such a config), and --apiserver-arg given twice after an
// empty value.
func TestReplayNamesEveryKeyItDoesNotSet(t *testing.T) {
	mc := func(args string) []byte {
		return []byte("version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  apiServer:\n    extraArgs:\n" + args)
	}
	o := ReplayOptions{Sources: []ReplaySource{{Name: "cp1.yaml", Data: mc("      \"\": x\n      \"\\e[2K\\rfeature-gates\": y\n      cloud-provider: external\n")}}}
	left, err := o.takeMachineConfigs()
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(left, "\n")
	if len(left) != 2 || !strings.Contains(joined, `cp1.yaml: "" (not a kube-apiserver flag name`) || !strings.Contains(joined, `cp1.yaml: "\x1b[2K\rfeature-gates" (`) {
		t.Errorf("left out, not named so one can read them:\n%s", joined)
	}
	if strings.ContainsAny(joined, "\x1b\r") {
		t.Errorf("a left-out key drives the terminal: %q", joined)
	}
	for _, data := range [][]byte{
		mc("      feature-gates: A=true\n      feature-gates: B=true\n"),
		append(mc("      feature-gates: A=true\n"), "---\n"+string(mc("      feature-gates: B=true\n"))...),
	} {
		o := ReplayOptions{Sources: []ReplaySource{{Name: "cp1.yaml", Data: data}}}
		_, err := o.takeMachineConfigs()
		if err == nil || failure.Code(err) != int(failure.BadInput) || !strings.Contains(err.Error(), "feature-gates") {
			t.Errorf("a key given twice in one config: %v, args %v", err, o.APIServerArgs)
		}
	}
	var a labflags.ArgList
	if err := a.Set("feature-gates="); err != nil {
		t.Fatal(err)
	}
	if err := a.Set("feature-gates=A=true"); err == nil {
		t.Errorf("--apiserver-arg feature-gates given twice: %v", a)
	}
}
