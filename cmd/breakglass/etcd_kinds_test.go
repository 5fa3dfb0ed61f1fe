package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

// What a value under an admission key must be (issue 21, cases 8 and 11):
// of the kind that belongs under the key, and named as the key names it.

const mwcPrefix = "/registry/mutatingwebhookconfigurations/"

func mutatingWebhookValue(t *testing.T, name string) []byte {
	t.Helper()
	v, err := etcdtest.EncodeProtobuf(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}, admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func validatingWebhookValue(t *testing.T, name string) []byte {
	t.Helper()
	v, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook(name, "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Case 8: an edited backup moves a mutating webhook configuration's value
// under a validating webhook configuration's key (key, resource and name
// made to agree, the sha256 untouched). On main the check compared names
// only, the value was restored, exit 0, and etcd webhooks then listed the
// key as not decodable. Now the file is refused as edited (exit 10) and
// nothing is written.
func TestEtcdRestoreRefusesValueOfAnotherKind(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	kv := srv.TestClient(t)
	conn := []string{"--etcd-endpoints", srv.Endpoints[0], "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}
	with := func(args ...string) []string { return append(args, conn...) }
	if _, err := kv.Put(context.Background(), mwcPrefix+"inject", string(mutatingWebhookValue(t, "inject"))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "b.json")
	if code, out, errOut := runArgs(t, with("etcd", "backup", "inject", "--out", file)...); code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", code, out, errOut)
	}
	// The edit: the same value, under the other kind's key.
	var doc map[string]any
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	key := doc["keys"].([]any)[0].(map[string]any)
	key["key"], key["resource"] = vwcPrefix+"inject", "validatingwebhookconfigurations"
	edited, _ := json.Marshal(doc)
	if err := os.WriteFile(file, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	before := etcdDump(t, kv)

	code, out, errOut := runArgs(t, with("--yes", "etcd", "restore", file)...)
	if code != 10 {
		t.Errorf("restore of the kind-swapped backup: exit %d, want 10\n%s%s", code, out, errOut)
	}
	mustContain(t, "the refusal", errOut, "its value is a MutatingWebhookConfiguration, which does not belong under /registry/validatingwebhookconfigurations/", "hint: the file is corrupt or was edited")
	if etcdDump(t, kv) != before {
		t.Error("etcd changed")
	}
}

// Case 11: a key whose value names the object otherwise (written with
// etcdctl, or copied by hand). On main its backup failed its own read-back
// as "corrupt or edited", so it could be neither backed up nor deleted.
// It is backed up and removed by its key now, the plan saying what is odd
// and how to look at it with etcdctl, and a restore puts it back as it was.
// A value of another kind found in etcd is backed up and removed the same
// way, but not put back (exit 9), with the etcdctl command that would.
func TestEtcdKeyAndValueDisagree(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	kv := srv.TestClient(t)
	conn := []string{"--etcd-endpoints", srv.Endpoints[0], "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}
	with := func(args ...string) []string { return append(args, conn...) }
	renamed := validatingWebhookValue(t, "stored-name")
	ctx := context.Background()
	if _, err := kv.Put(ctx, vwcPrefix+"key-name", string(renamed)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, vwcPrefix+"other-kind", string(mutatingWebhookValue(t, "other-kind"))); err != nil {
		t.Fatal(err)
	}
	const look = "etcdctl get " + vwcPrefix

	t.Run("listed", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("etcd", "webhooks")...)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		mustContain(t, "the listing", out, "NOTE: its value names the object stored-name", "NOTE: its value is a MutatingWebhookConfiguration", look+"key-name", look+"other-kind")
	})

	backup := filepath.Join(t.TempDir(), "b.json")
	t.Run("backup", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("etcd", "backup", "key-name", "--out", backup)...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
		}
	})

	dir := t.TempDir()
	t.Run("delete", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("--yes", "etcd", "delete", "key-name", "other-kind", "--backup-dir", dir)...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
		}
		mustContain(t, "the plan", out, "NOTE: its value names the object stored-name: kube-apiserver lists it by that name but keeps it under this key",
			"deleted "+vwcPrefix+"key-name\n", "deleted "+vwcPrefix+"other-kind\n", look+"key-name")
		if strings.Contains(out+errOut, "corrupt") {
			t.Errorf("blamed on a corrupt file:\n%s%s", out, errOut)
		}
	})

	t.Run("restore", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("--yes", "etcd", "restore", backup)...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
		}
		resp, err := kv.Get(ctx, vwcPrefix+"key-name")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != string(renamed) {
			t.Errorf("not put back as it was: %v %v", resp, err)
		}
	})

	t.Run("restore of the other kind", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(dir, "etcd-backup-*.json"))
		if len(files) != 1 {
			t.Fatalf("backups in %s: %v", dir, files)
		}
		if _, err := kv.Delete(ctx, vwcPrefix+"key-name"); err != nil {
			t.Fatal(err)
		}
		before := etcdDump(t, kv)
		code, out, errOut := runArgs(t, with("--yes", "etcd", "restore", files[0])...)
		if code != 9 {
			t.Errorf("exit %d, want 9\n%s%s", code, out, errOut)
		}
		mustContain(t, "the refusal", errOut, "the backup holds under "+vwcPrefix+"other-kind a MutatingWebhookConfiguration, as etcd held it",
			"nothing was restored", "| base64 -d | etcdctl put "+vwcPrefix+"other-kind")
		if etcdDump(t, kv) != before {
			t.Error("etcd changed")
		}
	})
}
