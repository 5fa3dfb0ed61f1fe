package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// The "outright wrong" answers of issue 13, each with its own test; the
// catalogue (catalogue_test.go) holds them too, among the other refusals.

// refusalCluster is one emulated control plane and an admin talosconfig.
func refusalCluster(t *testing.T) (*talostest.Cluster, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return emulatedCluster(t, ctx, talostest.ClusterOptions{ControlPlanes: 1, Kubelet: talostest.KubeletOptions{TimeScale: 0.005}})
}

// A negative, too short or too long --revert-after is refused before the
// node is touched: -5m used to be accepted and silently drop the revert.
// Runbooks take the same range.
func TestRevertAfterOutOfRangeRefused(t *testing.T) {
	cluster, admin := refusalCluster(t)
	before := nodeConfigs(cluster)
	for _, v := range []string{"-5m", "0s", "1m59s", "24h1m"} {
		t.Run(v, func(t *testing.T) {
			runCatalogueCase(t, catCase{args: "admission disable --revert-after " + v + " --yes", code: 2,
				msg: `--revert-after .* is out of range: from 2m0s to 24h0m0s`, hint: `--revert-after a value from 2m0s to 24h0m0s`}, admin, nil)
		})
	}
	if nodeConfigs(cluster) != before {
		t.Error("a refused --revert-after changed the node")
	}
	for _, v := range []string{"-5m", "1m", "25h"} {
		y := "apiVersion: breakglass.dev/v1alpha1\nkind: Runbook\nmetadata:\n  name: r\nspec:\n  steps:\n" +
			"  - name: disable\n    action: admission.disable\n    with:\n      revertAfter: " + v + "\n" +
			"  - name: restore\n    action: admission.restore\n"
		if _, err := runbooks.Load([]byte(y), "r.yaml"); err == nil || !strings.Contains(err.Error(), "out of range (2m to 24h)") {
			t.Errorf("runbook revertAfter %s: %v, want out of range (2m to 24h)", v, err)
		}
	}
}

// --wait-timeout -1s used to change the node, then fail the step: every
// flag value is checked before anything is dialled or journaled.
func TestWaitTimeoutRefusedBeforeAnything(t *testing.T) {
	cluster, admin := refusalCluster(t)
	before := nodeConfigs(cluster)
	for _, args := range []string{"admission disable --wait-timeout -1s --yes", "admission restore --wait-timeout 0s --yes", "admission disable --wait-timeout 25h --no-wait --yes"} {
		t.Run(args, func(t *testing.T) {
			code, _, stderr := runCLI(t, admin, args)
			if code != 2 || !strings.Contains(stderr, "--wait-timeout") || !strings.Contains(stderr, "is out of range: from 1s to 24h0m0s") {
				t.Errorf("exit %d, want 2 naming the range:\n%s", code, stderr)
			}
			if _, err := os.Stat(os.Getenv("BREAKGLASS_STATE_DIR")); !os.IsNotExist(err) {
				t.Errorf("the state directory was created: %v", err)
			}
		})
	}
	if nodeConfigs(cluster) != before {
		t.Error("a refused --wait-timeout changed the node")
	}
}

// A runbook file that is a bare scalar (a token, a password file given by
// mistake) is refused without echoing a byte of it.
func TestRunbookFileContentNeverEchoed(t *testing.T) {
	const secret = "s3cr3t-token-value"
	for name, content := range map[string]string{
		"scalar.yaml": secret + "\n", "quoted.yaml": "'" + secret + "'\n", "number.yaml": "12345678901234567890\n",
		"list.yaml": "- " + secret + "\n", "binary.yaml": "\x00" + secret,
	} {
		for _, cmd := range []string{"runbook show", "runbook run", "recover --runbook"} {
			t.Run(cmd+" "+name, func(t *testing.T) {
				dir := t.TempDir()
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				code, stdout, stderr := runCLI(t, filepath.Join(dir, "no-talosconfig"), cmd+" "+p+" --yes")
				if code != 2 || !strings.Contains(stderr, p) || !strings.Contains(stderr, "hint: ") {
					t.Errorf("exit %d, want 2 naming the file with a hint:\n%s", code, stderr)
				}
				if strings.Contains(stdout+stderr, "s3cr3t") || strings.Contains(stdout+stderr, "1234567890") {
					t.Errorf("the file's content was echoed:\n%s%s", stderr, stdout)
				}
			})
		}
	}
}

// resume on a failed standalone `admission disable` used to die with
// "cannot read its options: unexpected end of JSON input"; it now says
// plainly that there is nothing to resume and what to run instead.
func TestResumeStandaloneSaysWhatToDo(t *testing.T) {
	for _, j := range []string{standaloneFailed,
		// the same, as journaled since standalone changes record their options
		strings.Replace(standaloneFailed, `"toolVersion":"dev"`, `"toolVersion":"dev","options":{"runbook":"admission disable","steps":[]}`, 1),
		strings.Replace(standaloneFailed, `"toolVersion":"dev"`, `"toolVersion":"dev","options":null`, 1)} {
		state := filepath.Join(t.TempDir(), "state")
		jp := filepath.Join(state, "incidents", "20260101-000000-aaaa", "journal.jsonl")
		if err := os.MkdirAll(filepath.Dir(jp), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(jp, []byte(j), 0o600); err != nil {
			t.Fatal(err)
		}
		_, admin := refusalClusterOnce(t)
		t.Setenv("BREAKGLASS_STATE_DIR", state)
		code, _, stderr := runCLIIn(t, admin, "resume 20260101-000000-aaaa --yes")
		if code != 2 || !strings.Contains(stderr, "incident 20260101-000000-aaaa is a standalone admission disable: there is nothing to resume") ||
			!strings.Contains(stderr, "hint: run it again (it is idempotent): breakglass admission disable -n 127.0.0.11; or undo it: breakglass revert 20260101-000000-aaaa") {
			t.Errorf("exit %d:\n%s", code, stderr)
		}
		if strings.Contains(stderr, "JSON") {
			t.Errorf("a JSON error reached the operator:\n%s", stderr)
		}
		if got, _ := os.ReadFile(jp); string(got) != j {
			t.Error("the refused resume changed the journal")
		}
	}
}

// runbook show NAME -o yaml prints the runbook's own YAML, which the
// loader reads back to the same runbook; text and json are unchanged.
func TestRunbookShowYAMLRoundTrips(t *testing.T) {
	dir := t.TempDir()
	for _, name := range runbooks.BuiltinNames() {
		code, stdout, stderr := runCLI(t, filepath.Join(dir, "none"), "runbook show "+name+" -o yaml")
		if code != 0 {
			t.Fatalf("%s: exit %d:\n%s", name, code, stderr)
		}
		got, err := runbooks.Load([]byte(stdout), name+".yaml")
		if err != nil {
			t.Fatalf("%s: the -o yaml output does not load: %v\n%s", name, err, stdout)
		}
		want, _ := runbooks.Get(name)
		if a, b := mustJSON(t, got.Spec), mustJSON(t, want.Spec); a != b || got.Metadata != want.Metadata {
			t.Errorf("%s: -o yaml does not round-trip:\n%s\n%s", name, a, b)
		}
		// A file runbook is re-encoded from what was loaded, and loads again.
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, []byte(stdout), 0o600); err != nil {
			t.Fatal(err)
		}
		_, again, stderr := runCLI(t, filepath.Join(dir, "none"), "runbook show "+f+" -o yaml")
		if rb, err := runbooks.Load([]byte(again), f); err != nil || mustJSON(t, rb.Spec) != mustJSON(t, want.Spec) {
			t.Errorf("%s as a file: -o yaml gives %v\n%s%s", name, err, again, stderr)
		}
	}
	if code, _, stderr := runCLI(t, filepath.Join(dir, "none"), "runbook list -o yaml"); code != 2 || !strings.Contains(stderr, `unknown output format "yaml"`) {
		t.Errorf("runbook list -o yaml: exit %d:\n%s", code, stderr)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runCLI runs breakglass in-process with a fresh state directory.
func runCLI(t *testing.T, talosconfig, args string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("BREAKGLASS_STATE_DIR", filepath.Join(dir, "state"))
	return runCLIIn(t, talosconfig, args)
}

func runCLIIn(t *testing.T, talosconfig, args string) (int, string, string) {
	t.Helper()
	t.Setenv("TALOSCONFIG", talosconfig)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, append([]string{"breakglass"}, strings.Fields(args)...), streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

var onceCluster struct {
	c     *talostest.Cluster
	admin string
}

// refusalClusterOnce is refusalCluster shared by the calls of one test.
func refusalClusterOnce(t *testing.T) (*talostest.Cluster, string) {
	if onceCluster.c == nil {
		onceCluster.c, onceCluster.admin = refusalCluster(t)
		t.Cleanup(func() { onceCluster.c = nil })
	}
	return onceCluster.c, onceCluster.admin
}

// Names read from etcd cannot drive the terminal, and an empty one is
// shown as such.
func TestEtcdNamesPrintedSafely(t *testing.T) {
	l := &etcd.Listing{Prefix: "/registry", Objects: []etcd.Object{
		{Kind: "ValidatingWebhookConfiguration", Name: "evil\x1b[2J\x1b]0;owned\a", Key: "/registry/validatingwebhookconfigurations/evil\x1b[2J",
			Webhooks: []etcd.Webhook{{Name: "rtl\u202egnp.exe"}}},
		{Kind: "ValidatingWebhookConfiguration", Name: "", Key: "/registry/validatingwebhookconfigurations/"},
		{Kind: "ValidatingWebhookConfiguration", Name: "plain-name", Key: "/registry/validatingwebhookconfigurations/plain-name"},
	}}
	var b bytes.Buffer
	renderListing(&b, l)
	out := b.String()
	for _, bad := range []string{"\x1b", "\a", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("output holds %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{`evil\x1b[2J\x1b]0;owned\x07`, `rtl\u202egnp.exe`, "ValidatingWebhookConfiguration \"\"\n", "ValidatingWebhookConfiguration plain-name\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not show %q:\n%s", want, out)
		}
	}
}

// etcd restore refuses a backup whose key and object name disagree (a
// value moved to another key, the name field edited), before anything is
// written.
func TestRestoreRefusesKeyObjectNameMismatch(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	kv := srv.TestClient(t)
	hook, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook("deadlock-webhook", "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "/registry/validatingwebhookconfigurations/deadlock-webhook", string(hook)); err != nil {
		t.Fatal(err)
	}
	conn := " --etcd-endpoints " + srv.Endpoints[0] + " --etcd-cacert " + srv.CAFile + " --etcd-cert " + srv.CertFile + " --etcd-key " + srv.KeyFile
	dir := t.TempDir()
	backup := filepath.Join(dir, "b.json")
	if code, _, stderr := runCLI(t, filepath.Join(dir, "none"), "etcd backup deadlock-webhook --out "+backup+conn); code != 0 {
		t.Fatalf("etcd backup: exit %d\n%s", code, stderr)
	}
	orig, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(string) string{
		// the value, its sha256 intact, moved under another name
		"moved": func(s string) string {
			s = strings.ReplaceAll(s, `"/registry/validatingwebhookconfigurations/deadlock-webhook"`, `"/registry/validatingwebhookconfigurations/other"`)
			return strings.Replace(s, `"name": "deadlock-webhook"`, `"name": "other"`, 1)
		},
		// only the name field edited
		"renamed": func(s string) string { return strings.Replace(s, `"name": "deadlock-webhook"`, `"name": "other"`, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			edited := edit(string(orig))
			if edited == string(orig) {
				t.Fatalf("the edit changed nothing:\n%s", orig)
			}
			f := filepath.Join(dir, name+".json")
			if err := os.WriteFile(f, []byte(edited), 0o600); err != nil {
				t.Fatal(err)
			}
			before := etcdDump(t, kv)
			code, _, stderr := runCLI(t, filepath.Join(dir, "none"), "etcd restore "+f+" --yes"+conn)
			if code != 10 || !strings.Contains(stderr, "other") || !strings.Contains(stderr, "hint: ") {
				t.Errorf("exit %d, want 10 naming the key:\n%s", code, stderr)
			}
			if etcdDump(t, kv) != before {
				t.Error("the refused restore changed etcd")
			}
			if _, err := os.Stat(os.Getenv("BREAKGLASS_STATE_DIR")); !os.IsNotExist(err) {
				t.Error("the refused restore wrote to the state directory")
			}
		})
	}
}
