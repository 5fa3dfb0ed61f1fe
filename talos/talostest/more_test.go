package talostest_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	secretres "github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

func TestWorkerNode(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 1, Workers: 1})
	cl := newClient(t, c, role.Admin)
	w := c.Nodes[1]

	mt, err := safe.StateGet[*config.MachineType](client.WithNode(ctx, w.IP), cl.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineTypeType, config.MachineTypeID, resource.VersionUndefined))
	if err != nil || mt.MachineType().String() != "worker" {
		t.Fatalf("machine type: %v %v", mt, err)
	}

	_, err = safe.StateGet[*k8s.StaticPod](client.WithNode(ctx, w.IP), cl.COSI,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodType, k8s.APIServerID, resource.VersionUndefined))
	if !state.IsNotFoundError(err) {
		t.Errorf("worker static pod: %v", err)
	}

	_, err = cl.Kubeconfig(client.WithNode(ctx, w.IP))
	wantCode(t, err, codes.Unimplemented)

	if !bytes.Equal(w.RunningConfig(), c.WorkerConfig) {
		t.Error("worker runs the wrong config")
	}
}

func TestKubeconfigAndSecrets(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{})
	admin := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	kc, err := admin.Kubeconfig(client.WithNode(ctx, n.IP))
	if err != nil {
		t.Fatal(err)
	}

	var doc struct {
		Clusters []struct {
			Cluster map[string]string `yaml:"cluster"`
		} `yaml:"clusters"`
		Users []struct {
			User map[string]string `yaml:"user"`
		} `yaml:"users"`
	}

	if err := yaml.Unmarshal(kc, &doc); err != nil || len(doc.Clusters) != 1 || len(doc.Users) != 1 {
		t.Fatalf("kubeconfig: %v\n%s", err, kc)
	}

	if got := doc.Clusters[0].Cluster["server"]; got != "https://127.0.0.11:6443" {
		t.Errorf("server %q", got)
	}

	crtPEM, _ := base64.StdEncoding.DecodeString(doc.Users[0].User["client-certificate-data"])
	block, _ := pem.Decode(crtPEM)

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	caBlock, _ := pem.Decode(c.KubernetesCA().Crt)
	ca, _ := x509.ParseCertificate(caBlock.Bytes)
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate not signed by the cluster CA: %v", err)
	}

	if len(crt.Subject.Organization) != 1 || crt.Subject.Organization[0] != "system:masters" {
		t.Errorf("organization %v", crt.Subject.Organization)
	}

	root, err := safe.StateGet[*secretres.EtcdRoot](client.WithNode(ctx, n.IP), admin.COSI,
		resource.NewMetadata(secretres.NamespaceName, secretres.EtcdRootType, secretres.EtcdRootID, resource.VersionUndefined))
	if err != nil || !bytes.Equal(root.TypedSpec().EtcdCA.Crt, c.EtcdCA().Crt) {
		t.Fatalf("etcd root: %v", err)
	}

	etcd, err := safe.StateGet[*secretres.Etcd](client.WithNode(ctx, n.IP), admin.COSI,
		resource.NewMetadata(secretres.NamespaceName, secretres.EtcdType, secretres.EtcdID, resource.VersionUndefined))
	if err != nil {
		t.Fatal(err)
	}

	etcdBlock, _ := pem.Decode(etcd.TypedSpec().EtcdAdmin.Crt)
	etcdAdmin, _ := x509.ParseCertificate(etcdBlock.Bytes)
	etcdCABlock, _ := pem.Decode(c.EtcdCA().Crt)
	etcdCA, _ := x509.ParseCertificate(etcdCABlock.Bytes)
	etcdPool := x509.NewCertPool()
	etcdPool.AddCert(etcdCA)

	if _, err := etcdAdmin.Verify(x509.VerifyOptions{Roots: etcdPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("etcd admin certificate: %v", err)
	}

	reader := newClient(t, c, role.Reader)

	_, err = safe.StateGet[*secretres.Etcd](client.WithNode(ctx, n.IP), reader.COSI,
		resource.NewMetadata(secretres.NamespaceName, secretres.EtcdType, secretres.EtcdID, resource.VersionUndefined))
	wantCode(t, err, codes.PermissionDenied)

	_, err = safe.StateGet[*secretres.EtcdRoot](client.WithNode(ctx, n.IP), reader.COSI,
		resource.NewMetadata(secretres.NamespaceName, secretres.EtcdRootType, secretres.EtcdRootID, resource.VersionUndefined))
	wantCode(t, err, codes.PermissionDenied)
}

func TestEtcdSnapshot(t *testing.T) {
	ctx := t.Context()

	// without a hook there is no etcd to read
	c := newCluster(t, talostest.ClusterOptions{})
	_, err := readSnapshot(ctx, newClient(t, c, role.EtcdBackup), c.Nodes[0].IP)
	wantCode(t, err, codes.Unavailable)

	want := bytes.Repeat([]byte("snap"), 700000)
	c = newCluster(t, talostest.ClusterOptions{
		EtcdSnapshot: func(_ context.Context, _ *talostest.Node, w io.Writer) error {
			_, err := w.Write(want)

			return err
		},
	})

	got, err := readSnapshot(ctx, newClient(t, c, role.Operator), c.Nodes[0].IP)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("snapshot: %d bytes, %v", len(got), err)
	}

	_, err = readSnapshot(ctx, newClient(t, c, role.Reader), c.Nodes[0].IP)
	wantCode(t, err, codes.PermissionDenied)
}

func readSnapshot(ctx context.Context, cl *client.Client, node string) ([]byte, error) {
	r, err := cl.EtcdSnapshot(client.WithNode(ctx, node), &machine.EtcdSnapshotRequest{})
	if err != nil {
		return nil, err
	}

	b, err := io.ReadAll(r)

	return b, errors.Join(err, r.Close())
}

func TestConcurrentApply(t *testing.T) {
	ctx := t.Context()
	inside := make(chan struct{})
	release := make(chan struct{})

	opts := talostest.ClusterOptions{}
	talostest.SetApplyHook(&opts, func(*talostest.Node) {
		select {
		case inside <- struct{}{}:
			<-release
		default:
		}
	})

	c := newCluster(t, opts)
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	done := make(chan error, 1)

	go func() {
		_, err := apply(ctx, cl, n.IP, n.RunningConfig(), machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
		done <- err
	}()

	<-inside

	_, err := apply(ctx, cl, n.IP, n.RunningConfig(), machine.ApplyConfigurationRequest_NO_REBOOT, false, 0)
	wantCode(t, err, codes.FailedPrecondition)

	close(release)

	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestStagedAutoReboot(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 2, RebootDuration: 200 * time.Millisecond})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[0]
	orig := n.RunningConfig()

	staged := withExtraArg(t, orig, "disable-admission-plugins", "ValidatingAdmissionWebhook")

	resp, err := apply(ctx, cl, n.IP, staged, machine.ApplyConfigurationRequest_STAGED, false, 0)
	if err != nil || resp.Messages[0].ModeDetails != "Staged configuration to be applied after the next reboot" {
		t.Fatalf("staged: %v %v", resp, err)
	}

	if !bytes.Equal(n.RunningConfig(), orig) || !bytes.Equal(rawConfig(t, ctx, cl, n.IP, config.PersistentID), staged) {
		t.Error("STAGED must change the persistent config only")
	}

	// AUTO picks NO_REBOOT for a .cluster change
	resp, err = apply(ctx, cl, n.IP, staged, machine.ApplyConfigurationRequest_AUTO, false, 0)
	if err != nil || resp.Messages[0].Mode != machine.ApplyConfigurationRequest_NO_REBOOT {
		t.Fatalf("auto: %v %v", resp, err)
	}

	// and REBOOT for a machine change: the node goes away and comes back with it
	reboot := bytes.Replace(staged, []byte("machine:\n"), []byte("machine:\n    env:\n        FOO: bar\n"), 1)

	resp, err = apply(ctx, cl, n.IP, reboot, machine.ApplyConfigurationRequest_AUTO, false, 0)
	if err != nil || resp.Messages[0].Mode != machine.ApplyConfigurationRequest_REBOOT || !strings.HasPrefix(resp.Messages[0].ModeDetails, "Applied configuration with a reboot: this config change can't be applied in immediate mode") {
		t.Fatalf("auto reboot: %v %v", resp, err)
	}

	waitFor(t, "rebooted", func() bool { return bytes.Equal(n.RunningConfig(), reboot) })

	waitFor(t, "API back", func() bool {
		_, err := cl.Version(client.WithNode(ctx, n.IP))

		return err == nil
	})
}

func TestOneToMany(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 2})
	cl := newClient(t, c, role.Admin)

	c.Nodes[1].Stop()

	resp, err := cl.MachineClient.Version(client.WithNodes(ctx, c.Nodes[0].IP, c.Nodes[1].IP), nil)
	if err != nil {
		t.Fatal(err)
	}

	if len(resp.Messages) != 2 || resp.Messages[1].Metadata.GetError() == "" || resp.Messages[0].Metadata.GetError() != "" {
		t.Fatalf("messages: %v", resp.Messages)
	}

	// the client turns per-node errors into an error naming the node
	_, err = cl.Version(client.WithNodes(ctx, c.Nodes[0].IP, c.Nodes[1].IP))
	if err == nil || !strings.Contains(err.Error(), c.Nodes[1].IP) {
		t.Errorf("filtered error: %v", err)
	}

	// COSI is one node at a time
	_, err = safe.StateGet[*k8s.StaticPod](client.WithNodes(ctx, c.Nodes[0].IP, c.Nodes[1].IP), cl.COSI,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodType, k8s.APIServerID, resource.VersionUndefined))
	wantCode(t, err, codes.InvalidArgument)
}

func TestPodIPExpanded(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, talostest.ClusterOptions{ControlPlanes: 2})
	cl := newClient(t, c, role.Admin)
	n := c.Nodes[1]

	if !hasArg(staticPodCommand(t, ctx, cl, n.IP), "--advertise-address=$(POD_IP)") {
		t.Error("static pod should carry $(POD_IP) like Talos renders it")
	}

	waitFor(t, "running", func() bool { return n.Pod().Running })

	if v, _ := n.Pod().Config.Flag("advertise-address"); v != n.IP {
		t.Errorf("container runs with --advertise-address=%s, want %s", v, n.IP)
	}
}

func TestForeignClientCertificateRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	c := newCluster(t, talostest.ClusterOptions{})
	otherSecrets, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	if err != nil {
		t.Fatal(err)
	}

	other := newCluster(t, talostest.ClusterOptions{IPs: []string{"127.0.0.21"}, Secrets: otherSecrets})

	// other's OS CA signs the client certificate; the CA to trust is c's, so the
	// client accepts the server, and the server must refuse the client
	cfg, err := other.TalosconfigWith(role.MakeSet(role.Admin), []string{c.Nodes[0].Addr}, []string{c.Nodes[0].IP})
	if err != nil {
		t.Fatal(err)
	}

	cfg.Contexts[cfg.Context].CA = base64.StdEncoding.EncodeToString(c.OSCA().Crt)

	cl, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() //nolint:errcheck

	// The server's "unknown certificate authority" alert may reach the client
	// or not (TLS 1.3: the client may see a broken pipe or EOF first); what is
	// certain is that the call fails at the transport, before any handler.
	_, err = cl.Version(client.WithNode(ctx, c.Nodes[0].IP))
	if code := status.Code(err); err == nil || (code != codes.Unavailable && code != codes.DeadlineExceeded) {
		t.Fatalf("a client certificate from another CA: %v (code %s), want a transport failure", err, code)
	}
}

func TestWatchStaticPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	c := newCluster(t, talostest.ClusterOptions{})
	cl := newClient(t, c, role.Reader)
	admin := newClient(t, c, role.Admin)
	n := c.Nodes[0]

	events := make(chan safe.WrappedStateEvent[*k8s.StaticPod])

	if err := safe.StateWatch(client.WithNode(ctx, n.IP), cl.COSI,
		resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodType, k8s.APIServerID, resource.VersionUndefined), events); err != nil {
		t.Fatal(err)
	}

	first := <-events
	if first.Type() != state.Created {
		t.Fatalf("first event %v", first.Type())
	}

	edited := withExtraArg(t, n.RunningConfig(), "disable-admission-plugins", "ValidatingAdmissionWebhook")
	if _, err := apply(ctx, admin, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
		t.Fatal(err)
	}

	ev := <-events
	if ev.Type() != state.Updated {
		t.Fatalf("event %v: %v", ev.Type(), ev.Error())
	}

	sp, err := ev.Resource()
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(fmt.Sprint(sp.TypedSpec().Pod["spec"]), "--disable-admission-plugins=ValidatingAdmissionWebhook") {
		t.Error("updated pod lacks the flag")
	}
}
