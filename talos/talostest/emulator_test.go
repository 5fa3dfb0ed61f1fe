package talostest_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	cosiprotobuf "github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"gopkg.in/yaml.v3"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// fastKubelet is the kubelet's and Talos's real times, a hundred times faster:
// poll 200ms, status 150ms, grace 300ms, back-off 100ms to 3s.
func fastKubelet() talostest.KubeletOptions {
	return talostest.KubeletOptions{TimeScale: 0.01}
}

// sharedSecrets is one secrets bundle for the tests' clusters (key generation is slow).
var sharedSecrets = sync.OnceValues(func() (*secrets.Bundle, error) {
	return secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
})

func newCluster(t *testing.T, opts talostest.ClusterOptions) *talostest.Cluster {
	t.Helper()

	if opts.Secrets == nil {
		b, err := sharedSecrets()
		if err != nil {
			t.Fatal(err)
		}

		opts.Secrets = b
	}

	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}

	if opts.Kubelet == (talostest.KubeletOptions{}) {
		opts.Kubelet = fastKubelet()
	}

	c, err := talostest.NewCluster(t.Context(), opts)
	if err != nil {
		t.Fatalf("NewCluster: %v", err)
	}

	t.Cleanup(c.Close)

	return c
}

// polledByHand is a one-node cluster whose kubelet polls only when the test
// says (kubelet's PollInterval an hour, its TimeScale 0.01), its pods run by
// runner (nil: the cluster's default), with an admin client and the node.
func polledByHand(t *testing.T, runner talostest.PodRunner, kubelet talostest.KubeletOptions) (*client.Client, *talostest.Node) {
	t.Helper()

	kubelet.TimeScale, kubelet.PollInterval = 0.01, time.Hour
	c := newCluster(t, talostest.ClusterOptions{Runner: runner, Kubelet: kubelet})

	return newClient(t, c, role.Admin), c.Nodes[0]
}

func newClient(t testing.TB, c *talostest.Cluster, r role.Role) *client.Client {
	t.Helper()

	path, err := c.Talosconfig(r)
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := clientconfig.Open(path)
	if err != nil {
		t.Fatal(err)
	}

	return connect(t, cfg)
}

// connect is a client of cfg, closed at the test's end.
func connect(t testing.TB, cfg *clientconfig.Config) *client.Client {
	t.Helper()

	cl, err := client.New(t.Context(), client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { cl.Close() }) //nolint:errcheck

	return cl
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()

	if status.Code(err) != code {
		t.Fatalf("want %s, got %v", code, err)
	}
}

func machineConfig(t *testing.T, ctx context.Context, cl *client.Client, node string) []byte {
	t.Helper()

	mc, err := safe.StateGet[*config.MachineConfig](client.WithNode(ctx, node), cl.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined))
	if err != nil {
		t.Fatalf("get MachineConfig from %s: %v", node, err)
	}

	b, err := mc.Container().Bytes()
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func staticPodCommand(t *testing.T, ctx context.Context, cl *client.Client, node string) []string {
	t.Helper()

	sp, err := safe.StateGet[*k8s.StaticPod](client.WithNode(ctx, node), cl.COSI,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodType, k8s.APIServerID, resource.VersionUndefined))
	if err != nil {
		t.Fatalf("get StaticPod from %s: %v", node, err)
	}

	spec, _ := sp.TypedSpec().Pod["spec"].(map[string]any)
	ctrs, _ := spec["containers"].([]any)

	if len(ctrs) != 1 {
		t.Fatalf("static pod has %d containers", len(ctrs))
	}

	var out []string

	for _, a := range ctrs[0].(map[string]any)["command"].([]any) {
		out = append(out, a.(string))
	}

	return out
}

func hasArg(cmd []string, arg string) bool {
	for _, a := range cmd {
		if a == arg {
			return true
		}
	}

	return false
}

// withExtraArg returns the config with cluster.apiServer.extraArgs[key] = value added
// by a plain text edit (the generated config has no extraArgs).
func withExtraArg(t testing.TB, cfg []byte, key, value string) []byte {
	t.Helper()

	const anchor = "    apiServer:\n"

	i := bytes.Index(cfg, []byte(anchor))
	if i < 0 {
		t.Fatal("no apiServer section in config")
	}

	i += len(anchor)

	return bytes.Join([][]byte{cfg[:i], []byte("        extraArgs:\n            " + key + ": " + value + "\n"), cfg[i:]}, nil)
}

func apply(ctx context.Context, cl *client.Client, node string, data []byte, mode machine.ApplyConfigurationRequest_Mode, dryRun bool, try time.Duration) (*machine.ApplyConfigurationResponse, error) {
	req := &machine.ApplyConfigurationRequest{Data: data, Mode: mode, DryRun: dryRun}
	if try > 0 {
		req.TryModeTimeout = durationpb.New(try)
	}

	return cl.ApplyConfiguration(client.WithNode(ctx, node), req)
}

func TestVersionAndConfigRead(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 3, Nodes: []talostest.NodeOptions{{}, {TalosVersion: "v1.12.4"}}})
	cl := newClient(t, c, role.Admin)

	for i, n := range c.Nodes {
		resp, err := cl.Version(client.WithNode(ctx, n.IP))
		if err != nil {
			t.Fatalf("version %s: %v", n.IP, err)
		}

		want := "v1.13.8"
		if i == 1 {
			want = "v1.12.4"
		}

		if got := resp.Messages[0].Version.Tag; got != want {
			t.Errorf("node %s: version %s, want %s", n.IP, got, want)
		}

		if got := machineConfig(t, ctx, cl, n.IP); !bytes.Equal(got, c.ControlPlaneConfig) {
			t.Errorf("node %s: running config differs from the generated one", n.IP)
		}
	}

	// one-to-many: every node answers, stamped with its name
	resp, err := cl.Version(client.WithNodes(ctx, c.Nodes[0].IP, c.Nodes[2].IP))
	if err != nil {
		t.Fatal(err)
	}

	if len(resp.Messages) != 2 || resp.Messages[0].Metadata.GetHostname() != c.Nodes[0].IP || resp.Messages[1].Metadata.GetHostname() != c.Nodes[2].IP {
		t.Errorf("one-to-many version: %v", resp.Messages)
	}

	// raw read, as talosctl edit does
	if raw := rawConfig(t, ctx, cl, c.Nodes[1].IP, config.PersistentID); !bytes.Equal(raw, c.ControlPlaneConfig) {
		t.Error("raw persistent config differs from the generated one")
	}
}

func TestUnknownDocumentKind(t *testing.T) {
	ctx := t.Context()
	future := "apiVersion: v1alpha1\nkind: FutureConfig\nfutureField: 42\n"
	c := newCluster(t, talostest.ClusterOptions{Nodes: []talostest.NodeOptions{{ExtraDocuments: future}}})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	_, err := safe.StateGet[*config.MachineConfig](client.WithNode(ctx, n.IP), cl.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined))
	if err == nil {
		t.Fatal("typed read of a config with an unknown kind succeeded")
	}

	raw := rawConfig(t, ctx, cl, n.IP, config.ActiveID)
	if !bytes.Equal(raw, n.RunningConfig()) || !strings.Contains(string(raw), "kind: FutureConfig") {
		t.Error("raw config is not the node's config with the FutureConfig document")
	}

	// the node accepts its own config back with a .cluster change
	edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatalf("apply: %v", err)
	}

	if !bytes.Equal(n.RunningConfig(), edited) {
		t.Error("running config is not the submitted bytes")
	}
}

// rawConfig reads a MachineConfig without decoding it, the way talosctl edit/patch do.
func rawConfig(t *testing.T, ctx context.Context, cl *client.Client, node string, id resource.ID) []byte {
	t.Helper()

	r, err := cl.COSI.Get(client.WithNode(ctx, node),
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, id, resource.VersionUndefined),
		state.WithGetUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
	if err != nil {
		t.Fatalf("raw read from %s: %v", node, err)
	}

	if _, ok := r.Metadata().Annotations().Get("talos.dev/yaml-spec"); !ok {
		t.Error("MachineConfig lacks the talos.dev/yaml-spec annotation")
	}

	// The YAML spec, which talosctl edit/patch print: the config's text as a YAML string.
	raw, ok := r.(*cosiprotobuf.Resource)
	if !ok {
		t.Fatalf("raw read from %s: got %T", node, r)
	}

	msg, err := raw.Marshal()
	if err != nil {
		t.Fatal(err)
	}

	var body string
	if err := yaml.Unmarshal([]byte(msg.GetSpec().GetYamlSpec()), &body); err != nil {
		t.Fatal(err)
	}

	return []byte(body)
}

func TestRoles(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 1})
	n := c.Nodes[0]

	for _, r := range []role.Role{role.Reader, role.Operator} {
		cl := newClient(t, c, r)

		if _, err := cl.Version(client.WithNode(ctx, n.IP)); err != nil {
			t.Errorf("%s: version: %v", r, err)
		}

		_, err := safe.StateGet[*config.MachineConfig](client.WithNode(ctx, n.IP), cl.COSI,
			resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined))
		wantCode(t, err, codes.PermissionDenied)

		_, err = safe.StateGet[*k8s.APIServerConfig](client.WithNode(ctx, n.IP), cl.COSI,
			resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.APIServerConfigType, k8s.APIServerConfigID, resource.VersionUndefined))
		wantCode(t, err, codes.PermissionDenied)

		// the static pod is not sensitive
		if cmd := staticPodCommand(t, ctx, cl, n.IP); len(cmd) == 0 {
			t.Errorf("%s: empty static pod command", r)
		}

		_, err = apply(ctx, cl, n.IP, n.RunningConfig(), machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
		wantCode(t, err, codes.PermissionDenied)

		_, err = cl.Kubeconfig(client.WithNode(ctx, n.IP))
		wantCode(t, err, codes.PermissionDenied)
	}
}

func TestApplyNoRebootRendersPod(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 3})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[1]

	before := n.Pod()
	waitFor(t, "pod ready", func() bool { return n.Pod().Ready })

	edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")

	// invalid config
	_, err := apply(ctx, cl, n.IP, []byte("version: v1alpha1\nmachine: [\n"), machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.InvalidArgument)

	// dry run: a diff, nothing applied
	resp, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, true, 0)
	if err != nil {
		t.Fatal(err)
	}

	details := resp.Messages[0].ModeDetails
	if !strings.Contains(details, "Dry run summary") || !strings.Contains(details, "+            disable-admission-plugins: ValidatingAdmissionWebhook") {
		t.Errorf("dry run details:\n%s", details)
	}

	if !bytes.Equal(n.RunningConfig(), c.ControlPlaneConfig) || hasArg(staticPodCommand(t, ctx, cl, n.IP), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Fatal("dry run changed the node")
	}

	resp, err = apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	if err != nil {
		t.Fatal(err)
	}

	if m := resp.Messages[0]; m.Mode != machine.ApplyConfigurationRequest_NO_REBOOT || m.ModeDetails != "Applied configuration without a reboot" {
		t.Errorf("reply: %v %q", m.Mode, m.ModeDetails)
	}

	if !bytes.Equal(n.RunningConfig(), edited) || !bytes.Equal(n.PersistentConfig(), edited) {
		t.Error("configs are not the submitted bytes")
	}

	if !hasArg(staticPodCommand(t, ctx, cl, n.IP), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Error("static pod lacks the flag")
	}

	// the other nodes are untouched
	if hasArg(staticPodCommand(t, ctx, cl, c.Nodes[0].IP), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Error("node 0 changed")
	}

	waitFor(t, "new container", func() bool {
		p := n.Pod()

		return p.Ready && p.ContainerID != before.ContainerID && hasArg(p.Config.Command, "--disable-admission-plugins=ValidatingAdmissionWebhook")
	})

	// a change outside .cluster needs a reboot
	reboot := bytes.Replace(edited, []byte("    type: controlplane\n"), []byte("    type: controlplane\n    nodeLabels:\n        x: y\n"), 1)
	reboot = bytes.Replace(reboot, []byte("machine:\n"), []byte("machine:\n    env:\n        FOO: bar\n"), 1)

	_, err = apply(ctx, cl, n.IP, reboot, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.InvalidArgument)

	if !strings.Contains(status.Convert(err).Message(), "this config change can't be applied in immediate mode") {
		t.Errorf("message: %v", err)
	}

	if !bytes.Equal(n.RunningConfig(), edited) {
		t.Error("refused apply changed the config")
	}
}

func TestTryRollback(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]
	orig := n.RunningConfig()

	edited := withExtraArg(t, orig, "disable-admission-plugins", "ValidatingAdmissionWebhook")

	resp, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_TRY, false, time.Second)
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(resp.Messages[0].ModeDetails, "automatically reverted back in 1s") {
		t.Errorf("details: %q", resp.Messages[0].ModeDetails)
	}

	if pending, _ := n.RollbackPending(); !pending {
		t.Error("no rollback pending")
	}

	if !bytes.Equal(machineConfig(t, ctx, cl, n.IP), edited) || !bytes.Equal(n.PersistentConfig(), orig) {
		t.Error("TRY must change the running config only")
	}

	waitFor(t, "rollback", func() bool { return bytes.Equal(machineConfig(t, ctx, cl, n.IP), orig) })

	if hasArg(staticPodCommand(t, ctx, cl, n.IP), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Error("static pod not re-rendered after rollback")
	}

	// a later non-TRY apply cancels the rollback
	if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_TRY, false, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}

	if _, err := apply(ctx, cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	if pending, _ := n.RollbackPending(); pending {
		t.Error("rollback still pending after NO_REBOOT apply")
	}

	time.Sleep(700 * time.Millisecond) //nolint:forbidigo // the cancelled timer's deadline must pass

	if !bytes.Equal(n.RunningConfig(), edited) {
		t.Error("cancelled rollback happened anyway")
	}
}

func TestStringOnlyNode(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{Nodes: []talostest.NodeOptions{{TalosVersion: "v1.12.6"}}})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	list := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "\n                - ValidatingAdmissionWebhook")

	_, err := apply(ctx, cl, n.IP, list, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.InvalidArgument)

	str := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, str, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	if !hasArg(staticPodCommand(t, ctx, cl, n.IP), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Error("static pod lacks the flag")
	}

	// a v1.13 client reads no extraArgs from an older node's APIServerConfig
	asc, err := safe.StateGet[*k8s.APIServerConfig](client.WithNode(ctx, n.IP), cl.COSI,
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.APIServerConfigType, k8s.APIServerConfigID, resource.VersionUndefined))
	if err != nil || len(asc.TypedSpec().ExtraArgs) != 0 || asc.TypedSpec().Image == "" {
		t.Errorf("APIServerConfig from a v1.12 node: %v %v", asc, err)
	}
}

func TestAPIServerConfigExtraArgs(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	list := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "\n                - ValidatingAdmissionWebhook\n                - MutatingAdmissionWebhook")
	if _, err := apply(ctx, cl, n.IP, list, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	asc, err := safe.StateGet[*k8s.APIServerConfig](client.WithNode(ctx, n.IP), cl.COSI,
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.APIServerConfigType, k8s.APIServerConfigID, resource.VersionUndefined))
	if err != nil {
		t.Fatal(err)
	}

	if got := asc.TypedSpec().ExtraArgs["disable-admission-plugins"].Values; len(got) != 2 || got[0] != "ValidatingAdmissionWebhook" {
		t.Errorf("extraArgs: %v", got)
	}

	// a list value gives the flag once per item, as Talos' argsbuilder does
	cmd := staticPodCommand(t, ctx, cl, n.IP)
	if !hasArg(cmd, "--disable-admission-plugins=ValidatingAdmissionWebhook") || !hasArg(cmd, "--disable-admission-plugins=MutatingAdmissionWebhook") {
		t.Errorf("command: %v", cmd)
	}

	// machined's own log tells what happened
	logs, err := readAll(cl.Logs(client.WithNode(ctx, n.IP), "system", common.ContainerDriver_CONTAINERD, "machined", false, -1))
	if err != nil || !strings.Contains(string(logs), "apply config request: mode no_reboot") {
		t.Errorf("machined log: %v\n%s", err, logs)
	}

	// a flag Talos manages itself is refused when rendering: the pod stays as it was
	denied := withExtraArg(t, c.ControlPlaneConfig, "etcd-servers", "https://10.0.0.1:2379")
	if _, err := apply(ctx, cl, n.IP, denied, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	if _, err := n.Rendered(); err == nil || !strings.Contains(err.Error(), `extra arg "etcd-servers" is not allowed`) {
		t.Errorf("render error: %v", err)
	}

	if got := staticPodCommand(t, ctx, cl, n.IP); !slices.Equal(got, cmd) {
		t.Error("static pod changed although rendering failed")
	}
}

func TestUnreachableNode(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 2})
	cl := newClient(t, c, role.Admin)

	c.Nodes[1].Stop()

	_, err := cl.Version(client.WithNode(ctx, c.Nodes[1].IP))
	wantCode(t, err, codes.Unavailable)

	// refused, as a node whose apid is down, and still the node's: nobody else can listen there
	if conn, err := net.Dial("tcp", c.Nodes[1].Addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close() //nolint:errcheck
		}

		t.Fatalf("dialing a stopped node: %v, want connection refused", err)
	}

	if lis, err := net.Listen("tcp", c.Nodes[1].Addr); err == nil {
		lis.Close() //nolint:errcheck
		t.Fatal("a stopped node's address was free to take")
	}

	if _, err := cl.Version(client.WithNode(ctx, c.Nodes[0].IP)); err != nil {
		t.Fatalf("healthy node: %v", err)
	}

	if err := c.Nodes[1].Start(); err != nil {
		t.Fatal(err)
	}

	if _, err := cl.Version(client.WithNode(ctx, c.Nodes[1].IP)); err != nil {
		t.Fatalf("restarted node: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()

	deadline := time.Now().Add(10 * time.Second)

	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}

		time.Sleep(10 * time.Millisecond) //nolint:forbidigo
	}
}

var _ = emptypb.Empty{}

// A cluster created before Talos 1.3: its configs hold the AES-CBC secret,
// rendered aescbc key1 then identity; the bundle it was made from is not
// changed.
func TestAESCBCEncryptionSecret(t *testing.T) {
	secret := encryption.SecretOf(bytes.Repeat([]byte{7}, 32))
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 2, AESCBCEncryptionSecret: secret.Reveal()})
	for _, n := range c.Nodes {
		cfg, src, err := encryption.FromMachineConfig(n.RunningConfig())
		if err != nil {
			t.Fatal(err)
		}

		if cfg.String() != "secrets: aescbc (key1), identity" || src != encryption.FromClusterSecrets {
			t.Errorf("node %s renders %s from %s", n.IP, cfg, src)
		}

		if k := cfg.Resources[0].Providers[0].Keys[0]; !k.Secret.Equal(secret) {
			t.Errorf("node %s: aescbc key1 is not the secret given", n.IP)
		}
	}

	if c.Secrets.Secrets.AESCBCEncryptionSecret != secret.Reveal() || c.Secrets.Secrets.SecretboxEncryptionSecret != "" {
		t.Error("the cluster's bundle does not hold the AES-CBC secret alone")
	}

	if shared, _ := sharedSecrets(); shared.Secrets.SecretboxEncryptionSecret == "" || shared.Secrets.AESCBCEncryptionSecret != "" {
		t.Error("the bundle the cluster was made from changed")
	}
}
