package etcd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var ctx = context.Background()

func TestConnectTLSFromFilesAndPEM(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	for name, cfg := range map[string]etcd.Config{
		"files": {Endpoints: srv.Endpoints, CACertFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile},
		"pem":   {Endpoints: srv.Endpoints, CACertPEM: srv.CACertPEM, CertPEM: srv.CertPEM, KeyPEM: srv.KeyPEM},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := etcd.Connect(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			info, err := c.Cluster(ctx)
			if err != nil || info.ClusterID == 0 || info.MemberID == 0 {
				t.Fatalf("cluster info %+v, %v", info, err)
			}
			if c.Prefix() != "/registry" {
				t.Fatalf("default prefix %q", c.Prefix())
			}
		})
	}
}

func TestConnectPlainHTTP(t *testing.T) {
	srv := etcdtest.StartPlain(t)
	if !strings.HasPrefix(srv.Endpoints[0], "http://") {
		t.Fatalf("plain endpoint %s", srv.Endpoints[0])
	}
	c, err := etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, Prefix: "custom/"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Prefix() != "/custom" {
		t.Fatalf("prefix normalized to %q, want /custom", c.Prefix())
	}
}

func TestConnectRefusesWithoutClientCertificate(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	// Client certificate from another CA: etcd rejects the handshake.
	other, err := etcdtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := other.IssueClient("intruder", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, err = etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertPEM: srv.CACertPEM, CertPEM: cert, KeyPEM: key, DialTimeout: 2 * time.Second})
	var ue *etcd.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("foreign client certificate: got %v, want *UnreachableError", err)
	}
	if !ue.TLS || !strings.Contains(ue.Error(), "tls") {
		t.Fatalf("foreign client certificate: the error should say TLS refused it: %v", ue)
	}
	if len(ue.Hints()) == 0 {
		t.Fatal("no hints")
	}
	// Server certificate from an unknown CA.
	_, err = etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertPEM: other.CertPEM, CertPEM: srv.CertPEM, KeyPEM: srv.KeyPEM, DialTimeout: 2 * time.Second})
	if !errors.As(err, &ue) || !ue.TLS || !strings.Contains(ue.Error(), "x509") {
		t.Fatalf("unknown server CA: %v", err)
	}
	// http:// to a TLS etcd.
	_, err = etcd.Connect(ctx, etcd.Config{Endpoints: []string{strings.Replace(srv.Endpoints[0], "https", "http", 1)}, DialTimeout: time.Second})
	if !errors.As(err, &ue) || !strings.Contains(ue.Error(), "speaks TLS") {
		t.Fatalf("http to a TLS etcd: %v", err)
	}
	// No certificate at all: refused before dialing.
	_, err = etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertFile: srv.CAFile})
	var ce *etcd.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("no client cert: got %v, want *ConfigError", err)
	}
}

func TestConnectUnreachable(t *testing.T) {
	srv := etcdtest.StartPlain(t)
	ep := srv.Endpoints[0]
	srv.Close()
	_, err := etcd.Connect(ctx, etcd.Config{Endpoints: []string{ep}, DialTimeout: time.Second})
	var ue *etcd.UnreachableError
	if !errors.As(err, &ue) || ue.TLS {
		t.Fatalf("got %v, want a non-TLS *UnreachableError", err)
	}
	if !strings.Contains(ue.Error(), ep) || !strings.Contains(ue.Error(), "connection refused") || !strings.Contains(strings.Join(ue.Hints(), "\n"), "2379") {
		t.Fatalf("error %q / hints %q should name the endpoint and the Talos port", ue.Error(), ue.Hints())
	}
}

func TestMintClientCertConnects(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	certPEM, keyPEM, err := etcd.MintClientCert(srv.CA.CertPEM, srv.CA.KeyPEM, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints, CACertPEM: srv.CACertPEM, CertPEM: certPEM, KeyPEM: keyPEM})
	if err != nil {
		t.Fatalf("minted certificate refused: %v", err)
	}
	c.Close()
	cert := parseCert(t, certPEM)
	if d := cert.NotAfter.Sub(cert.NotBefore); d > time.Hour {
		t.Fatalf("minted certificate valid for %s", d)
	}
	if _, _, err := etcd.MintClientCert(srv.CA.CertPEM, srv.CA.KeyPEM, 2*time.Hour); err == nil {
		t.Fatal("a two-hour certificate was minted")
	}
	other, _ := etcdtest.NewCA()
	if _, _, err := etcd.MintClientCert(srv.CA.CertPEM, other.KeyPEM, time.Hour); err == nil {
		t.Fatal("minted with a key that does not match the CA")
	}
}

func TestListDecodesEveryKind(t *testing.T) {
	cl := newCluster(t)
	vals := cl.seedIncident(t)
	l, err := cl.c.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]etcd.Object{}
	for _, o := range l.Objects {
		byKey[o.Key] = o
		if want, ok := vals[o.Key]; !ok {
			t.Errorf("listed an unrelated key %s", o.Key)
		} else if !bytes.Equal(o.Value, want) {
			t.Errorf("%s: value not byte-exact", o.Key)
		}
	}
	if len(byKey) != len(vals) {
		t.Fatalf("listed %d objects, want %d (none dropped)", len(byKey), len(vals))
	}

	vwc := byKey["/registry/validatingwebhookconfigurations/"+vwcName]
	if vwc.Encoding != etcd.EncodingProtobuf || !vwc.Decodable() || vwc.Kind != "ValidatingWebhookConfiguration" || vwc.APIVersion != "admissionregistration.k8s.io/v1" {
		t.Fatalf("validating webhook: %+v", vwc)
	}
	if vwc.ModRevision == 0 || vwc.CreateRevision == 0 || vwc.Version != 1 {
		t.Errorf("revisions not reported: %+v", vwc)
	}
	w := vwc.Webhooks[0]
	if w.Name != "validate.kyverno.svc-fail" || w.FailurePolicy != "Fail" || w.TimeoutSeconds != 10 ||
		w.Target() != "https://127.0.0.1:9443/validate/fail" || len(w.Rules) != 1 || w.Rules[0].Resources[0] != "*" ||
		w.NamespaceSelector == nil || len(w.NamespaceSelector.MatchExpressions) != 1 || w.ObjectSelector == nil ||
		len(w.MatchConditions) != 1 || w.MatchConditions[0].Name != "not-servicecidr" {
		t.Errorf("validating webhook fields: %+v", w)
	}

	mwc := byKey["/registry/mutatingwebhookconfigurations/"+mwcName]
	if len(mwc.Webhooks) != 1 || mwc.Webhooks[0].FailurePolicy != "Ignore" || mwc.Webhooks[0].Target() != "service kyverno/kyverno-svc:443/mutate" ||
		mwc.Webhooks[0].ReinvocationPolicy != "IfNeeded" || mwc.Webhooks[0].TimeoutSeconds != 5 {
		t.Errorf("mutating webhook: %+v", mwc.Webhooks)
	}

	vap := byKey["/registry/validatingadmissionpolicies/replica-limit"]
	if vap.Policy == nil || vap.Policy.FailurePolicy != "Fail" || vap.Policy.Validations != 1 || vap.Policy.MatchConstraints == nil {
		t.Errorf("validating policy: %+v", vap.Policy)
	}
	vapb := byKey["/registry/validatingadmissionpolicybindings/replica-limit"]
	if vapb.Policy == nil || vapb.Policy.PolicyName != "replica-limit" || !slices.Equal(vapb.Policy.ValidationActions, []string{"Deny"}) {
		t.Errorf("validating binding: %+v", vapb.Policy)
	}
	mapol := byKey["/registry/mutatingadmissionpolicies/add-label"]
	if mapol.APIVersion != "admissionregistration.k8s.io/v1alpha1" || mapol.Policy == nil || mapol.Policy.Mutations != 1 {
		t.Errorf("mutating policy (v1alpha1, the 1.34 storage version): %+v", mapol)
	}
	if b := byKey["/registry/mutatingadmissionpolicybindings/add-label"]; b.Policy == nil || b.Policy.PolicyName != "add-label" {
		t.Errorf("mutating binding: %+v", b)
	}

	js := byKey["/registry/validatingwebhookconfigurations/json-stored"]
	if js.Encoding != etcd.EncodingJSON || !js.Decodable() || js.Webhooks[0].FailurePolicy != "Fail" {
		t.Errorf("json value: %+v", js)
	}
	enc := byKey["/registry/validatingwebhookconfigurations/encrypted-one"]
	if enc.Encoding != etcd.EncodingEncrypt || enc.Decodable() || enc.EncryptionProvider != "aescbc:v1:key1" {
		t.Errorf("encrypted value: %+v", enc)
	}
	bad := byKey["/registry/validatingwebhookconfigurations/garbage"]
	if bad.Encoding != etcd.EncodingUnknown || bad.DecodeError == "" || bad.Name != "garbage" {
		t.Errorf("garbage value: %+v", bad)
	}

	// --kind narrows with range requests on the exact prefix.
	l, err = cl.c.List(ctx, []kinds.Kind{kinds.MutatingWebhookConfigurations})
	if err != nil || len(l.Objects) != 1 || l.Objects[0].Name != mwcName {
		t.Fatalf("mutating only: %+v, %v", l, err)
	}

	// JSON output carries the full decoded object.
	out, err := json.Marshal(vwc)
	if err != nil || !bytes.Contains(out, []byte(`"object":{"kind":"ValidatingWebhookConfiguration"`)) {
		t.Errorf("json output: %s %v", out, err)
	}

	// As a manifest: every decoded object with its kind, the rest named.
	all, err := cl.c.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, unreadable, err := all.Manifest()
	var list struct {
		Kind  string
		Items []struct{ Kind, APIVersion string }
	}
	if err != nil || json.Unmarshal(data, &list) != nil || list.Kind != "List" || len(list.Items)+len(unreadable) != len(vals) || len(unreadable) != 2 {
		t.Fatalf("manifest: %d items, %d unreadable, %v", len(list.Items), len(unreadable), err)
	}
	for _, it := range list.Items {
		if it.Kind == "" || it.APIVersion == "" {
			t.Errorf("manifest item without kind or apiVersion: %+v", it)
		}
	}
}

func TestListHonoursPrefix(t *testing.T) {
	cl := newCluster(t)
	cl.put(t, "/custom/validatingwebhookconfigurations/a", mustProtobuf(t, validatingWebhook("a")))
	cl.seedIncident(t)
	c, err := etcd.Connect(ctx, etcd.Config{Endpoints: cl.srv.Endpoints, CACertFile: cl.srv.CAFile, CertFile: cl.srv.CertFile, KeyFile: cl.srv.KeyFile, Prefix: "/custom"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.List(ctx, nil)
	if err != nil || len(l.Objects) != 1 || l.Objects[0].Key != "/custom/validatingwebhookconfigurations/a" {
		t.Fatalf("custom prefix listing: %+v %v", l, err)
	}
}

func TestDeleteBackupRestoreRoundTrip(t *testing.T) {
	cl := newCluster(t)
	vals := cl.seedIncident(t)
	dir := t.TempDir()
	names := []string{vwcName, "encrypted-one", mwcName}

	plan, err := cl.c.PlanDelete(ctx, names, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Objects) != 3 {
		t.Fatalf("plan has %d objects", len(plan.Objects))
	}
	stateDir := filepath.Join(t.TempDir(), "state", "etcd")
	res, err := cl.c.Execute(ctx, plan, etcd.RealWriter(cl.c), etcd.ExecuteOptions{BackupDir: dir, ToolVersion: "v0.0.0-test", RecordDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	// The state directory records what was deleted and where the backup is.
	recBytes, err := os.ReadFile(res.RecordPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec etcd.DeleteRecord
	if err := json.Unmarshal(recBytes, &rec); err != nil || len(rec.Keys) != 3 || !filepath.IsAbs(rec.BackupPath) || filepath.Base(rec.BackupPath) != filepath.Base(res.BackupPath) {
		t.Fatalf("deletion record %s: %v", recBytes, err)
	}
	if st, _ := os.Stat(res.RecordPath); st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v", st.Mode().Perm())
	}
	if len(res.Deleted) != 3 || res.DryRun {
		t.Fatalf("result %+v", res)
	}
	for _, o := range plan.Objects {
		if _, ok := cl.get(t, o.Key); ok {
			t.Errorf("%s still present", o.Key)
		}
	}
	// Unrelated keys untouched.
	if v, ok := cl.get(t, "/registry/admissionregistration.k8s.io/validatingwebhookconfigurations/"+vwcName); !ok || string(v) != "guessed key" {
		t.Error("an unrelated key was touched")
	}
	if _, ok := cl.get(t, "/registry/validatingwebhookconfigurations/json-stored"); !ok {
		t.Error("an unnamed webhook configuration was deleted")
	}

	// The backup: mode 0600, nothing left as .part, verified, byte-exact.
	st, err := os.Stat(res.BackupPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("backup mode %v, want 0600", st.Mode().Perm())
	}
	if filepath.Dir(res.BackupPath) != dir {
		t.Errorf("backup at %s, not in %s", res.BackupPath, dir)
	}
	if parts, _ := filepath.Glob(filepath.Join(dir, "*.part")); len(parts) > 0 {
		t.Errorf("left %v", parts)
	}
	b, err := etcd.ReadBackup(res.BackupPath)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := cl.c.Cluster(ctx)
	if b.ClusterID != info.ClusterID || b.MemberID == 0 || b.ToolVersion != "v0.0.0-test" || b.Revision != plan.Cluster.Revision {
		t.Errorf("backup header %+v", b)
	}
	for _, k := range b.Keys {
		raw, _ := k.RawValue()
		if !bytes.Equal(raw, vals[k.Key]) {
			t.Errorf("backup of %s not byte-exact", k.Key)
		}
		if k.Resource == kinds.ValidatingWebhookConfigurations && k.Name == vwcName && !bytes.Contains(k.Object, []byte("validate.kyverno.svc-fail")) {
			t.Errorf("backup lacks the decoded object for human eyes")
		}
		if k.Name == "encrypted-one" && k.Object != nil {
			t.Errorf("encrypted value decoded in backup")
		}
	}

	// Restore: every key back, byte for byte.
	rres, err := cl.c.RestoreFile(ctx, res.BackupPath, etcd.RealWriter(cl.c), etcd.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range rres.Items {
		if it.Status != etcd.Restored {
			t.Errorf("%s: %s", it.Key, it.Status)
		}
		if v, ok := cl.get(t, it.Key); !ok || !bytes.Equal(v, vals[it.Key]) {
			t.Errorf("%s not restored byte for byte", it.Key)
		}
	}
	// Restored objects decode again.
	l, _ := cl.c.List(ctx, []kinds.Kind{kinds.ValidatingWebhookConfigurations})
	for _, o := range l.Objects {
		if o.Name == vwcName && (!o.Decodable() || o.Webhooks[0].Name != "validate.kyverno.svc-fail") {
			t.Errorf("restored object does not decode: %+v", o)
		}
	}

	// Again: already present and identical, nothing written.
	rev := cl.revision(t)
	rres, err = cl.c.RestoreFile(ctx, res.BackupPath, etcd.RealWriter(cl.c), etcd.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range rres.Items {
		if it.Status != etcd.AlreadyPresent {
			t.Errorf("second restore %s: %s", it.Key, it.Status)
		}
	}
	if cl.revision(t) != rev {
		t.Error("an idempotent restore wrote to etcd")
	}

	// Re-created with another value: conflict, left alone, error says so.
	changed := mustProtobuf(t, validatingWebhook("changed"))
	cl.put(t, "/registry/validatingwebhookconfigurations/"+vwcName, changed)
	rres, err = cl.c.RestoreFile(ctx, res.BackupPath, etcd.RealWriter(cl.c), etcd.RestoreOptions{})
	var conflict *etcd.ConflictError
	if !errors.As(err, &conflict) || len(conflict.Keys) != 1 || rres == nil {
		t.Fatalf("conflict: %v", err)
	}
	if v, _ := cl.get(t, "/registry/validatingwebhookconfigurations/"+vwcName); !bytes.Equal(v, changed) {
		t.Error("restore overwrote a present key")
	}
}

// racingWriter writes to a key after the backup has been verified and
// before the guarded delete: the concurrent update the guard exists for.
type racingWriter struct {
	etcd.Writer
	race func()
}

func (w racingWriter) Txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	w.race()
	return w.Writer.Txn(ctx, cmps, then, els)
}

func TestDeleteGuardRefusesConcurrentUpdate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		race   func(cl *cluster, key string) error
		actual func(int64) bool
	}{
		{"updated", func(cl *cluster, key string) error {
			_, err := cl.c.KV().Put(ctx, key, string(mustProtobuf(t, validatingWebhook(vwcName+"-v2"))))
			return err
		}, func(a int64) bool { return a > 0 }},
		{"deleted", func(cl *cluster, key string) error {
			_, err := cl.c.KV().Delete(ctx, key)
			return err
		}, func(a int64) bool { return a == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCluster(t)
			vals := cl.seedIncident(t)
			key := "/registry/validatingwebhookconfigurations/" + vwcName
			other := "/registry/mutatingwebhookconfigurations/" + mwcName
			plan, err := cl.c.PlanDelete(ctx, []string{vwcName, mwcName}, nil)
			if err != nil {
				t.Fatal(err)
			}
			backup := filepath.Join(t.TempDir(), "b.json")
			w := racingWriter{Writer: etcd.RealWriter(cl.c), race: func() {
				if _, err := os.Stat(backup); err != nil {
					t.Errorf("race ran before the backup existed: %v", err)
				}
				if err := tc.race(cl, key); err != nil {
					t.Error(err)
				}
			}}
			res, err := cl.c.Execute(ctx, plan, w, etcd.ExecuteOptions{BackupPath: backup})
			var ce *etcd.ChangedError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want *ChangedError", err)
			}
			if len(ce.Changes) != 1 || ce.Changes[0].Key != key || !tc.actual(ce.Changes[0].Actual) || !strings.Contains(err.Error(), key) {
				t.Fatalf("changes %+v", ce.Changes)
			}
			if len(res.Deleted) != 0 {
				t.Fatalf("deleted %v", res.Deleted)
			}
			if v, ok := cl.get(t, other); !ok || !bytes.Equal(v, vals[other]) {
				t.Fatal("the unchanged key was deleted although the guard failed")
			}
			if _, err := etcd.ReadBackup(backup); err != nil {
				t.Fatalf("backup not kept: %v", err)
			}
		})
	}
}

func TestPlanDeleteUnknownAndAmbiguousNames(t *testing.T) {
	cl := newCluster(t)
	cl.seedIncident(t)
	_, err := cl.c.PlanDelete(ctx, []string{"kyverno-resource-validating-webhok-cfg"}, nil)
	var nf *etcd.NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("got %v, want *NotFoundError", err)
	}
	if nf.Missing[0].Closest != vwcName || !slices.Contains(nf.Present, mwcName) {
		t.Fatalf("not found: %+v", nf)
	}
	if !strings.Contains(strings.Join(nf.Hints(), "\n"), vwcName) || !strings.Contains(err.Error(), "add-label") {
		t.Fatalf("error %q / hints %q should list names and suggest the closest", err, nf.Hints())
	}
	// The right name under the wrong kind is not found either.
	if _, err := cl.c.PlanDelete(ctx, []string{vwcName}, []kinds.Kind{kinds.MutatingWebhookConfigurations}); !errors.As(err, &nf) {
		t.Fatalf("wrong kind: %v", err)
	}
	// replica-limit is both a policy and a binding.
	_, err = cl.c.PlanDelete(ctx, []string{"replica-limit"}, nil)
	var amb *etcd.AmbiguousNameError
	if !errors.As(err, &amb) || len(amb.Resources) != 2 {
		t.Fatalf("got %v, want *AmbiguousNameError", err)
	}
	p, err := cl.c.PlanDelete(ctx, []string{"replica-limit"}, []kinds.Kind{kinds.ValidatingAdmissionPolicies})
	if err != nil || len(p.Objects) != 1 {
		t.Fatalf("with kind: %+v %v", p, err)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	cl := newCluster(t)
	vals := cl.seedIncident(t)
	dir := t.TempDir()
	dry := etcd.DryRunWriter(cl.c)
	rev := cl.revision(t)

	res, err := cl.c.Delete(ctx, []string{vwcName}, nil, dry, etcd.ExecuteOptions{BackupDir: filepath.Join(dir, "new"), Snapshot: true, RecordDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || len(res.Deleted) != 1 || res.BackupPath == "" || res.Snapshot == nil || !res.Snapshot.DryRun {
		t.Fatalf("dry-run result %+v", res)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("dry run wrote %v", entries)
	}
	if cl.revision(t) != rev {
		t.Fatal("dry run wrote to etcd")
	}

	// The dry run still evaluates the guard against the live etcd.
	plan, _ := cl.c.PlanDelete(ctx, []string{vwcName}, nil)
	cl.put(t, plan.Objects[0].Key, vals[plan.Objects[0].Key]) // same bytes, new mod revision
	rev = cl.revision(t)
	_, err = cl.c.Execute(ctx, plan, dry, etcd.ExecuteOptions{BackupDir: dir})
	var ce *etcd.ChangedError
	if !errors.As(err, &ce) {
		t.Fatalf("dry run with a stale plan: %v", err)
	}

	// Restore dry run: would restore what is absent, writes nothing.
	real, err := cl.c.Delete(ctx, []string{vwcName}, nil, etcd.RealWriter(cl.c), etcd.ExecuteOptions{BackupDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	rev = cl.revision(t)
	rres, err := cl.c.RestoreFile(ctx, real.BackupPath, dry, etcd.RestoreOptions{})
	if err != nil || !rres.DryRun || rres.Items[0].Status != etcd.WouldRestore {
		t.Fatalf("dry restore %+v %v", rres, err)
	}
	if _, ok := cl.get(t, real.Plan.Objects[0].Key); ok || cl.revision(t) != rev {
		t.Fatal("dry restore wrote to etcd")
	}
	// A dry backup names the file but does not create it.
	br, err := cl.c.BackupObjects(ctx, nil, nil, filepath.Join(dir, "dry.json"), "v", dry)
	if err != nil || !br.DryRun {
		t.Fatalf("dry backup %+v %v", br, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dry.json")); !os.IsNotExist(err) {
		t.Fatal("dry backup created the file")
	}
}

func TestBackupNeverOverwrites(t *testing.T) {
	cl := newCluster(t)
	cl.seedIncident(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "backup.json")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, w := range []etcd.Writer{etcd.RealWriter(cl.c), etcd.DryRunWriter(cl.c)} {
		_, err := cl.c.BackupObjects(ctx, []string{vwcName}, nil, path, "v", w)
		var fe *etcd.FileExistsError
		if !errors.As(err, &fe) {
			t.Fatalf("dry=%v: got %v, want *FileExistsError", w.DryRun(), err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("existing file changed")
	}
	// A delete whose backup cannot be written deletes nothing.
	_, err := cl.c.Delete(ctx, []string{vwcName}, nil, etcd.RealWriter(cl.c), etcd.ExecuteOptions{BackupPath: path})
	if err == nil {
		t.Fatal("delete went on without a backup")
	}
	if _, ok := cl.get(t, "/registry/validatingwebhookconfigurations/"+vwcName); !ok {
		t.Fatal("deleted without a backup")
	}
	// A .part left by an interrupted run is not clobbered either.
	part := filepath.Join(dir, "other.json.part")
	os.WriteFile(part, []byte("half"), 0o600)
	if _, err := cl.c.BackupObjects(ctx, []string{vwcName}, nil, filepath.Join(dir, "other.json"), "v", etcd.RealWriter(cl.c)); err == nil {
		t.Fatal("wrote over a leftover .part")
	}
	if b, _ := os.ReadFile(part); string(b) != "half" {
		t.Fatal("leftover .part changed")
	}
	// All objects when no names.
	br, err := cl.c.BackupObjects(ctx, nil, nil, filepath.Join(dir, "all.json"), "v", etcd.RealWriter(cl.c))
	if err != nil || len(br.Backup.Keys) != 9 {
		t.Fatalf("backup of everything: %v keys, %v", br, err)
	}
}

// validBackup returns the bytes of a verified backup file from a real etcd.
func validBackup(t *testing.T, cl *cluster) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.json")
	if _, err := cl.c.BackupObjects(ctx, []string{vwcName, mwcName}, nil, path, "v", etcd.RealWriter(cl.c)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestReadBackupRefusesDamage(t *testing.T) {
	cl := newCluster(t)
	cl.seedIncident(t)
	_, data := validBackup(t, cl)
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		out, _ := json.Marshal(m)
		return out
	}
	key0 := func(m map[string]any) map[string]any { return m["keys"].([]any)[0].(map[string]any) }
	for name, tc := range map[string]struct {
		data []byte
		want error
	}{
		"truncated":        {data[:len(data)/2], etcd.ErrMalformedBackup},
		"not json":         {[]byte("hello"), etcd.ErrMalformedBackup},
		"trailing data":    {append(append([]byte{}, data...), []byte(`{"x":1}`)...), etcd.ErrMalformedBackup},
		"future version":   {edit(func(m map[string]any) { m["apiVersion"] = "breakglass.dev/v2" }), etcd.ErrUnsupportedBackupVersion},
		"wrong kind":       {edit(func(m map[string]any) { m["kind"] = "Backup" }), etcd.ErrUnsupportedBackupVersion},
		"unknown field":    {edit(func(m map[string]any) { m["extra"] = true }), etcd.ErrMalformedBackup},
		"tampered value":   {edit(func(m map[string]any) { key0(m)["value"] = "azhzAGV2aWw=" }), etcd.ErrChecksumMismatch},
		"tampered sha256":  {edit(func(m map[string]any) { key0(m)["sha256"] = strings.Repeat("0", 64) }), etcd.ErrChecksumMismatch},
		"not base64":       {edit(func(m map[string]any) { key0(m)["value"] = "***" }), etcd.ErrMalformedBackup},
		"foreign key":      {edit(func(m map[string]any) { key0(m)["key"] = "/registry/secrets/kube-system/x" }), etcd.ErrMalformedBackup},
		"renamed key":      {edit(func(m map[string]any) { key0(m)["name"] = "other" }), etcd.ErrMalformedBackup},
		"duplicate key":    {edit(func(m map[string]any) { m["keys"] = append(m["keys"].([]any), key0(m)) }), etcd.ErrMalformedBackup},
		"no keys":          {edit(func(m map[string]any) { m["keys"] = []any{} }), etcd.ErrMalformedBackup},
		"bad revisions":    {edit(func(m map[string]any) { key0(m)["modRevision"] = 0 }), etcd.ErrMalformedBackup},
		"no cluster id":    {edit(func(m map[string]any) { delete(m, "clusterID") }), etcd.ErrMalformedBackup},
		"prefix not clean": {edit(func(m map[string]any) { m["prefix"] = "/registry/" }), etcd.ErrMalformedBackup},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "b.json")
			os.WriteFile(path, tc.data, 0o600)
			_, err := etcd.ReadBackup(path)
			var bf *etcd.BackupFileError
			if !errors.As(err, &bf) || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if bf.Path != path {
				t.Errorf("error names %q, not the file", bf.Path)
			}
			// Restore refuses it too, and writes nothing.
			rev := cl.revision(t)
			if _, err := cl.c.RestoreFile(ctx, path, etcd.RealWriter(cl.c), etcd.RestoreOptions{ForceCluster: true}); !errors.Is(err, tc.want) {
				t.Fatalf("restore: %v", err)
			}
			if cl.revision(t) != rev {
				t.Fatal("restore of a damaged file wrote")
			}
		})
	}
}

func TestRestoreRefusesForeignClusterUnlessForced(t *testing.T) {
	a := newCluster(t)
	a.seedIncident(t)
	path, _ := validBackup(t, a)
	b := newCluster(t) // another cluster, other ID
	_, err := b.c.RestoreFile(ctx, path, etcd.RealWriter(b.c), etcd.RestoreOptions{})
	var fc *etcd.ForeignClusterError
	if !errors.As(err, &fc) || len(fc.Hints()) == 0 {
		t.Fatalf("got %v, want *ForeignClusterError", err)
	}
	if l, _ := b.c.List(ctx, nil); len(l.Objects) != 0 {
		t.Fatal("foreign restore wrote")
	}
	res, err := b.c.RestoreFile(ctx, path, etcd.RealWriter(b.c), etcd.RestoreOptions{ForceCluster: true})
	if err != nil || len(res.Items) != 2 || res.Items[0].Status != etcd.Restored {
		t.Fatalf("forced: %+v %v", res, err)
	}
	// Another prefix: refused, hint names the backup's prefix.
	c, err := etcd.Connect(ctx, etcd.Config{Endpoints: a.srv.Endpoints, CACertFile: a.srv.CAFile, CertFile: a.srv.CertFile, KeyFile: a.srv.KeyFile, Prefix: "/other"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var pm *etcd.PrefixMismatchError
	if _, err := c.RestoreFile(ctx, path, etcd.RealWriter(c), etcd.RestoreOptions{}); !errors.As(err, &pm) || pm.Hints()[0] != "--etcd-prefix /registry" {
		t.Fatalf("prefix mismatch: %v", err)
	}
}

func TestSnapshot(t *testing.T) {
	cl := newCluster(t)
	cl.seedIncident(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "etcd.db")
	info, err := cl.c.Snapshot(ctx, path, etcd.RealWriter(cl.c))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() != info.Size || st.Mode().Perm() != 0o600 || info.Size%512 != 32 || len(info.SHA256) != 64 {
		t.Fatalf("snapshot %+v, stat %v %v", info, st, err)
	}
	if _, err := cl.c.Snapshot(ctx, path, etcd.RealWriter(cl.c)); !errors.As(err, new(*etcd.FileExistsError)) {
		t.Fatalf("second snapshot to the same file: %v", err)
	}
	good, _ := os.ReadFile(path)

	// The verified writer for other streams (the Talos API's EtcdSnapshot).
	info2, err := etcd.WriteSnapshot(bytes.NewReader(good), filepath.Join(dir, "copy.db"), etcd.RealWriter(cl.c))
	if err != nil || info2.SHA256 != info.SHA256 {
		t.Fatalf("copy: %+v %v", info2, err)
	}
	flipped := append([]byte{}, good...)
	flipped[len(flipped)/2] ^= 0xff
	for name, data := range map[string][]byte{
		"flipped byte": flipped,
		"truncated":    good[:len(good)-512],
		"no trailer":   good[:len(good)-32],
		"empty":        nil,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".db")
			_, err := etcd.WriteSnapshot(bytes.NewReader(data), p, etcd.RealWriter(cl.c))
			if !errors.As(err, new(*etcd.SnapshotError)) {
				t.Fatalf("got %v, want *SnapshotError", err)
			}
			for _, q := range []string{p, p + ".part"} {
				if _, err := os.Stat(q); !os.IsNotExist(err) {
					t.Fatalf("%s left behind", q)
				}
			}
		})
	}
	// A stream that breaks off is not kept either.
	p := filepath.Join(dir, "broken.db")
	if _, err := etcd.WriteSnapshot(io.MultiReader(bytes.NewReader(good[:4096]), errReader{}), p, etcd.RealWriter(cl.c)); err == nil {
		t.Fatal("broken stream accepted")
	}
	if _, err := os.Stat(p + ".part"); !os.IsNotExist(err) {
		t.Fatal(".part left behind")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("stream reset") }
