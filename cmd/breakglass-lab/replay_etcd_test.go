package main

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/lab"
)

// replay --from-etcd reads the cluster's admission objects with the
// certificates given, names what it cannot replay (an encrypted value,
// its name made safe to print), and only then needs the binaries.
func TestReplayFromEtcd(t *testing.T) {
	t.Setenv(lab.KubeBinDirEnv, t.TempDir()) // empty: no kube-apiserver built
	srv := etcdtest.StartTLS(t)
	ctx := context.Background()
	c, err := etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pb, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook("kyverno-like", "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"/registry/validatingwebhookconfigurations/kyverno-like":   string(pb),
		"/registry/validatingwebhookconfigurations/secret\x1b[31m": "k8s:enc:aescbc:v1:key1:ciphertext",
	} {
		if _, err := c.KV().Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"breakglass-lab", "replay", "--from", "v1.32.13", "--to", "v1.34.4", "--from-etcd",
		"--etcd-endpoints", srv.Endpoints[0], "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}
	code, _, stderr := runLab(t, args...)
	if code != int(failure.LabNoBinaries) || !strings.Contains(stderr, `WARNING: ValidatingWebhookConfiguration secret\x1b[31m is not replayed: its etcd value is encrypted`) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}

	code, _, stderr = runLab(t, "breakglass-lab", "replay", "--from", "v1.32.13", "--to", "v1.34.4", "--from-etcd")
	if code != 2 || !strings.Contains(stderr, "--from-etcd needs the cluster's etcd endpoints") || !strings.Contains(stderr, "hint: pass --etcd-endpoints") {
		t.Errorf("without endpoints: exit %d, stderr:\n%s", code, stderr)
	}
}
