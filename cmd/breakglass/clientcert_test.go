package main

import (
	"bytes"
	"context"
	stdx509 "crypto/x509"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	sidero "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// refusedCertRuns are, for every command that dials the Talos API, a run
// that reaches it (read-only or dry-run), with the exit it must give when
// apid refuses the talosconfig's client certificate, and where it says
// why: stderr (exit 3, credentials), or its report on stdout (diagnose
// cannot tell, 23; upgrade-check's talos-access is a no-go, 40).
var refusedCertRuns = map[string]struct {
	args   string
	code   int
	stdout bool
}{
	"admission disable": {"admission disable --dry-run", 3, false},
	"admission restore": {"admission restore --dry-run", 3, false},
	"admission status":  {"admission status", 3, false},
	"apiserver wait":    {"apiserver wait --timeout 30s", 3, false},
	"diagnose":          {"diagnose --no-etcd", 23, true},
	"etcd webhooks":     {"etcd webhooks", 3, false},
	"etcd backup":       {"etcd backup --out $DIR/backup.json", 3, false},
	"etcd delete":       {"etcd delete --dry-run some-webhook", 3, false},
	"etcd restore":      {"etcd restore --dry-run $DIR/good.json", 3, false}, // a backup of another etcd
	"etcd snapshot":     {"etcd snapshot --out $DIR/snap.db", 3, false},
	"etcd usage":        {"etcd usage", 3, false},
	"lock status":       {"lock status", 3, false},
	"lock break":        {"lock break --dry-run", 3, false},
	"recover":           {"recover --dry-run", 3, false},
	// interruptedJournal: its begun step needs no Talos call to finish, so
	// resume completes (0); the refused certificate is told in its lock
	// warning, without the ways to a new talosconfig (left for later).
	"resume":        {"resume 20260101-000000-eeee --yes", 0, false},
	"revert":        {"revert --dry-run", 3, false}, // an admission disable the admin talosconfig made
	"runbook run":   {"runbook run --dry-run etcd-nospace", 3, false},
	"upgrade-check": {"upgrade-check --to 1.34", 40, true},
}

// Every command that dials the Talos API, refused by apid for the
// talosconfig's client certificate (here expired, against the emulator's
// real gRPC with mTLS), says why (expired on DATE) and how to get a
// working talosconfig, with its documented exit; a command that dials the
// Talos API without a row here fails the test.
func TestRefusedClientCertificateOnEveryCommand(t *testing.T) {
	var dialing []string
	for path, spec := range commandSpecs {
		if spec.talos != talosNone {
			dialing = append(dialing, path)
		}
	}
	sort.Strings(dialing)
	for _, path := range dialing {
		if _, ok := refusedCertRuns[path]; !ok {
			t.Errorf("%s dials the Talos API and has no run in refusedCertRuns", path)
		}
	}
	for path := range refusedCertRuns {
		if !slices.Contains(dialing, path) {
			t.Errorf("refusedCertRuns names %s, which does not dial the Talos API", path)
		}
	}
	ctx := t.Context()
	cluster, admin := emulatedCluster(t, ctx, talostest.ClusterOptions{ControlPlanes: 1})
	node := cluster.Nodes[0]
	now := time.Now()
	expiredOn := now.Add(-3 * 24 * time.Hour)
	authority, err := sidero.NewCertificateAuthorityFromCertificateAndKey(cluster.OSCA())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := sidero.NewKeyPair(authority, sidero.CommonName("admin"), sidero.Organization("os:admin"),
		sidero.NotBefore(now.Add(-365*24*time.Hour)), sidero.NotAfter(expiredOn), sidero.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		t.Fatal(err)
	}
	// The admin talosconfig's context name: revert checks the incident's.
	cfg := clientconfig.NewConfig("breakglass", []string{node.Addr}, cluster.OSCA().Crt, &sidero.PEMEncodedCertificateAndKey{Crt: kp.CrtPEM, Key: kp.KeyPEM})
	cfg.Contexts["breakglass"].Nodes = []string{node.IP}
	tcPath := filepath.Join(t.TempDir(), "talosconfig")
	if err := cfg.Save(tcPath); err != nil {
		t.Fatal(err)
	}
	says := regexp.MustCompile(`expired on ` + regexp.QuoteMeta(expiredOn.UTC().Format("2006-01-02")))
	for _, path := range dialing {
		run1, ok := refusedCertRuns[path]
		if !ok {
			continue
		}
		t.Run(strings.ReplaceAll(path, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("HOME", dir)
			t.Setenv("XDG_STATE_HOME", "")
			t.Setenv("BREAKGLASS_STATE_DIR", filepath.Join(dir, "state"))
			switch path {
			case "etcd restore":
				srv := etcdtest.StartTLS(t)
				hook, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook("some-webhook", "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := srv.TestClient(t).Put(ctx, "/registry/validatingwebhookconfigurations/some-webhook", string(hook)); err != nil {
					t.Fatal(err)
				}
				var o, e bytes.Buffer
				if code := run(ctx, []string{"breakglass", "etcd", "backup", "--out", filepath.Join(dir, "good.json"), "--etcd-endpoints", srv.Endpoints[0],
					"--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}, streams{In: strings.NewReader(""), Out: &o, Err: &e}); code != 0 {
					t.Fatalf("the backup to restore: exit %d\n%s", code, e.String())
				}
			case "revert":
				t.Setenv("TALOSCONFIG", admin)
				var o, e bytes.Buffer
				if code := run(ctx, []string{"breakglass", "admission", "disable", "--yes"}, streams{In: strings.NewReader(""), Out: &o, Err: &e}); code != 0 {
					t.Fatalf("the change to revert, with the admin talosconfig: exit %d\n%s%s", code, o.String(), e.String())
				}
			case "resume":
				j := filepath.Join(dir, "state", "incidents", "20260101-000000-eeee", "journal.jsonl")
				if err := os.MkdirAll(filepath.Dir(j), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(j, []byte(strings.ReplaceAll(interruptedJournal, "$NODE1", node.IP)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("TALOSCONFIG", tcPath)
			args := append([]string{"breakglass", "--connect-timeout", "5s"}, strings.Fields(strings.ReplaceAll(run1.args, "$DIR", dir))...)
			var out, errOut bytes.Buffer
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			code := run(cctx, args, streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			where := errOut.String()
			if run1.stdout {
				where = out.String()
			}
			told := strings.Contains(where+errOut.String(), "talosctl gen config") || path == "resume"
			if code != run1.code || !says.MatchString(where) || !told {
				t.Errorf("exit %d (want %d); it must say %q and how to make a talosconfig (talosctl gen config)\nstderr:\n%s\nstdout:\n%s",
					code, run1.code, says, errOut.String(), out.String())
			}
		})
	}
}
