package recovery_test

// The encryption-drift incident on the engine's stand-in cluster: Secrets
// a real kube-apiserver v1.34.4 stored under secretbox key2 (Talos 1.13's
// legacy rendering), control planes whose machine config was regenerated
// for the 1.14 contract by v1.14.0-beta.0's generator (a
// KubeEtcdEncryptionConfig document naming the same secret key1,
// siderolabs/talos#13885): kube-apiserver cannot read a Secret and is
// never ready.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// recordedShape is a shape the real v1.34.4 binary was recorded in.
func recordedShape(t *testing.T, name string) encryption.Shape {
	t.Helper()
	b, err := os.ReadFile("../internal/encryption/testdata/recorded/v1.34.4.json")
	if err != nil {
		t.Fatal(err)
	}
	var r encryption.Recording
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Shapes {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no recorded shape %s", name)
	return encryption.Shape{}
}

// storedKey2 is a Secret the real binary wrote under secretbox key2 with
// the public recording key "secretbox".
func storedKey2(t *testing.T) (string, []byte) {
	sh := recordedShape(t, "secret-regenerated") // written under secretbox key2 (label secretbox)
	if st := encryption.Classify(sh.StoredValue); st.Provider != encryption.Secretbox || st.Key != "key2" {
		t.Fatalf("recorded value stored as %s", st)
	}
	return sh.StoredKey, sh.StoredValue
}

var secretboxSecretLine = regexp.MustCompile(`(?m)^(\s*)secretboxEncryptionSecret:.*\n`)

// withDocument is a node's config for the 1.14 contract: the v1alpha1
// secret out, a KubeEtcdEncryptionConfig document in.
func withDocument(t *testing.T, cfg []byte, c encryption.Config) []byte {
	t.Helper()
	doc, err := c.Document()
	if err != nil {
		t.Fatal(err)
	}
	cfg = secretboxSecretLine.ReplaceAll(cfg, nil)
	return append(append(bytes.TrimRight(cfg, "\n"), []byte("\n---\n")...), doc...)
}

// newEncryptionEnv is the incident on Talos 1.14 control planes: the
// stored Secrets under secretbox key2, the configs naming the same secret
// key1. The stand-in kube-apiserver reads every stored Secret with the
// configuration its node renders, and logs the real binary's lines for
// what it cannot.
func newEncryptionEnv(t *testing.T, controlPlanes int) *engineEnv {
	t.Helper()
	env := newEngineEnv(t, envOptions{controlPlanes: controlPlanes, talosVersion: "v1.14.0"})
	etcdKey, value := storedKey2(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, k := range []string{etcdKey, "/registry/secrets/kube-system/bootstrap-token-abcdef", "/registry/secrets/default/s1"} {
		if _, err := env.kv.Put(ctx, k, string(value)); err != nil { // one recorded value under each key: secretbox authenticates no key
			t.Fatal(err)
		}
	}
	lines := recordedShape(t, "key-renamed").Lines
	env.mu.Lock()
	env.unreadable = func(n *talostest.Node) []string {
		c, _, err := encryption.FromMachineConfig(n.RunningConfig())
		if err != nil {
			return []string{"E run.go:72] \"command failed\" err=\"error while parsing file: " + err.Error() + "\""}
		}
		resp, err := env.kv.Get(context.Background(), "/registry/secrets/", clientv3.WithPrefix())
		if err != nil {
			return nil
		}
		for _, kv := range resp.Kvs {
			if c.Read("secrets", string(kv.Key), kv.Value).Outcome != encryption.Decrypts {
				return lines
			}
		}
		return nil
	}
	env.mu.Unlock()
	renamed := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"},
		Providers: []encryption.Provider{{Type: encryption.Secretbox, Keys: []encryption.Key{{Name: "key1", Secret: encryption.RecordingKey("secretbox")}}}}}}}
	for _, n := range env.cluster.ControlPlanes() {
		cfg := withDocument(t, n.RunningConfig(), renamed)
		if _, err := env.tc.Apply(ctx, n.IP, talos.ApplyRequest{Config: cfg, Mode: talos.NoReboot}); err != nil {
			t.Fatal(err)
		}
		env.original[n.IP], env.originalDisk[n.IP] = n.RunningConfig(), n.PersistentConfig()
	}
	env.waitReadyOrNot(false)
	return env
}

// noKeyMaterial fails when any output holds the recording key.
func noKeyMaterial(t *testing.T, env *engineEnv, texts ...string) {
	t.Helper()
	secret := encryption.RecordingKey("secretbox").Reveal()
	for _, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("key material in the output")
		}
	}
	_ = env
}

// stateFiles is every file the state directory holds, concatenated.
func stateFiles(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepathWalk(dir, func(data []byte) { b.Write(data) })
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// recover with no flag on Talos 1.14's renamed key: diagnosed
// encryption-drift naming secretbox key2; key2 added back, read-only, after
// key1, on every control plane, with the material found in their own
// configs; kube-apiserver ready. No key material in the output, the
// journal or anything in the state directory. revert refuses to take key2
// out while Secrets are stored under it, and takes it out, by name, once
// they are written again under key1: the configs are as before, byte for
// byte.
func TestEngineRecoverEncryptionDrift(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	for _, s := range []string{"preflight", "diagnose", "add-key", "wait-apiserver"} {
		wantStep(t, res, s, "ok")
	}
	if m := res.step("diagnose").Message; !strings.Contains(m, "verdict encryption-drift") || !strings.Contains(m, "secretbox key key2") {
		t.Errorf("diagnose: %s", m)
	}
	if m := res.step("add-key").Message; !strings.Contains(m, "added secretbox key key2, read-only, on 2 control plane(s)") {
		t.Errorf("add-key: %s", m)
	}
	for _, n := range env.cluster.ControlPlanes() {
		c, src, err := encryption.FromMachineConfig(n.RunningConfig())
		if err != nil || src != encryption.FromDocument || c.String() != "secrets: secretbox (key1, key2)" {
			t.Errorf("node %s: %s %s %v", n.IP, src, c, err)
		}
	}
	env.waitReadyOrNot(true)
	noKeyMaterial(t, env, fmt.Sprintf("%+v", res), stateFiles(t, env.stateDir))

	// Revert: Secrets are still stored under key2.
	rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
	if err == nil || !strings.Contains(err.Error(), "secretbox key key2 stays: 3 secrets are still stored under it") {
		t.Fatalf("revert with Secrets under key2: %v (%s)", err, rev.Outcome)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if c, _, _ := encryption.FromMachineConfig(n.RunningConfig()); c.String() != "secrets: secretbox (key1, key2)" {
			t.Errorf("node %s: key2 taken out while in use: %s", n.IP, c)
		}
	}
	env.rewriteSecretsUnderKey1()
	rev, err = revertRun(t, env, res.Incident, false, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	wantStep(t, rev, "revert-encryption-keys", "ok")
	env.assertConfigsOriginal()
	noKeyMaterial(t, env, fmt.Sprintf("%+v", rev), stateFiles(t, env.stateDir))
}

func filepathWalk(dir string, each func([]byte)) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		each(b)
		return nil
	})
}

// rewriteSecretsUnderKey1 writes every stored Secret again under secretbox
// key1, as kube-apiserver does on kubectl replace (the real binary's value).
func (e *engineEnv) rewriteSecretsUnderKey1() {
	e.t.Helper()
	written := recordedShape(e.t, "key-renamed").StoredValue // under secretbox key1, label secretbox
	resp, err := e.kv.Get(e.t.Context(), "/registry/secrets/", clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if _, err := e.kv.Put(e.t.Context(), string(kv.Key), string(written)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// newDroppedEnv is a provider dropped: Secrets a real kube-apiserver
// stored under aescbc key1 (a cluster created before Talos 1.3), control
// planes whose document renders secretbox key2 only. No machine config
// holds the AES-CBC secret: only the operator's secrets bundle does.
func newDroppedEnv(t *testing.T) *engineEnv {
	t.Helper()
	env := newEngineEnv(t, envOptions{controlPlanes: 2, talosVersion: "v1.14.0"})
	sh := recordedShape(t, "provider-dropped")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, k := range []string{sh.StoredKey, "/registry/secrets/default/s1"} {
		if _, err := env.kv.Put(ctx, k, string(sh.StoredValue)); err != nil {
			t.Fatal(err)
		}
	}
	env.mu.Lock()
	env.unreadable = func(n *talostest.Node) []string {
		c, _, err := encryption.FromMachineConfig(n.RunningConfig())
		if err != nil {
			return []string{err.Error()}
		}
		resp, err := env.kv.Get(context.Background(), "/registry/secrets/", clientv3.WithPrefix())
		if err != nil {
			return nil
		}
		for _, kv := range resp.Kvs {
			if c.Read("secrets", string(kv.Key), kv.Value).Outcome != encryption.Decrypts {
				return sh.Lines
			}
		}
		return nil
	}
	env.mu.Unlock()
	cfg := encryption.Specs(sh.After) // secretbox key2, identity
	for _, n := range env.cluster.ControlPlanes() {
		if _, err := env.tc.Apply(ctx, n.IP, talos.ApplyRequest{Config: withDocument(t, n.RunningConfig(), cfg), Mode: talos.NoReboot}); err != nil {
			t.Fatal(err)
		}
		env.original[n.IP], env.originalDisk[n.IP] = n.RunningConfig(), n.PersistentConfig()
	}
	env.waitReadyOrNot(false)
	return env
}

// bundleFile writes a secrets bundle holding an AES-CBC secret.
func bundleFile(t *testing.T, secret encryption.Secret) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	text := "cluster:\n  id: another\n  secret: x\nsecrets:\n  bootstraptoken: abcdef.0123456789abcdef\n  aescbcencryptionsecret: " + secret.Reveal() + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// driftRun is recover on a copy of the encryption-drift runbook whose
// add-key step names the bundle.
func driftRun(t *testing.T, env *engineEnv, bundle string, hooks engineHooks) (runOutcome, error) {
	t.Helper()
	rb, err := runbooks.Resolve("encryption-drift")
	if err != nil {
		t.Fatal(err)
	}
	steps := recovery.StepsOf(rb)
	for i, s := range steps {
		if p, ok := s.Params.(*runbooks.EncryptionKeyAddParams); ok {
			steps[i].Params = &runbooks.EncryptionKeyAddParams{Keys: p.Keys, Bundle: bundle}
		}
	}
	opts := recovery.RecoverOptions{Runbook: rb.Metadata.Name, Steps: steps, RunbookExplicit: true, Etcd: env.etcdOptions(), ToolVersion: "engine-test", Command: "recover"}
	ui := newTestUI(t, hooks)
	res, err := recovery.Recover(t.Context(), env.tc, env.state(), env.effects(false), ui, opts)
	return outcomeOf(res, ui), err
}

// The AES-CBC key is in no machine config: without a bundle, and with
// another cluster's, the run names what it tried and changes nothing (an
// AES-CBC key that passes the padding check by chance still does not give
// an object); with this cluster's bundle, aescbc key1 comes back after
// secretbox key2 and kube-apiserver is ready; the bundle's secret is in no
// output and no file breakglass wrote.
func TestEngineRecoverEncryptionFromBundle(t *testing.T) {
	env := newDroppedEnv(t)
	res, err := recoverRun(t, env, recoverRequest{})
	if err == nil || !strings.Contains(err.Error(), "no key material breakglass can read decrypts the 2 secrets stored under aescbc key key1") {
		t.Fatalf("without a bundle: %v (%s)", err, res.Outcome)
	}
	env.assertConfigsOriginal()

	other := bundleFile(t, encryption.RecordingKey("another cluster's aescbc"))
	res, err = driftRun(t, env, other, engineHooks{})
	if err == nil || !strings.Contains(err.Error(), "the secrets bundle "+other) {
		t.Fatalf("another cluster's bundle: %v (%s)", err, res.Outcome)
	}
	env.assertConfigsOriginal()

	mine := bundleFile(t, encryption.RecordingKey("aescbc"))
	res, err = recoverRun(t, env, recoverRequest{Bundle: mine}) // recover --secrets-bundle
	wantOutcome(t, res, err, "completed", false)
	for _, n := range env.cluster.ControlPlanes() {
		if c, _, _ := encryption.FromMachineConfig(n.RunningConfig()); c.String() != "secrets: secretbox (key2), aescbc (key1), identity" {
			t.Errorf("node %s: %s", n.IP, c)
		}
	}
	env.waitReadyOrNot(true)
	secret := encryption.RecordingKey("aescbc").Reveal()
	if s := fmt.Sprintf("%+v", res) + stateFiles(t, env.stateDir); strings.Contains(s, secret) {
		t.Error("the bundle's secret is in the output or the state directory")
	}
}

// The bundle is replaced by another cluster's while the operator confirms:
// the key the plan found no longer decrypts what is stored; nothing is
// applied.
func TestEngineRecoverEncryptionBundleChangedBeforeAct(t *testing.T) {
	env := newDroppedEnv(t)
	mine := bundleFile(t, encryption.RecordingKey("aescbc"))
	swap := func() {
		text := "secrets:\n  aescbcencryptionsecret: " + encryption.RecordingKey("another cluster's aescbc").Reveal() + "\n"
		if err := os.WriteFile(mine, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	res, err := driftRun(t, env, mine, engineHooks{
		confirm:     func(string) error { swap(); return nil },
		confirmText: func(string, string) error { swap(); return nil },
	})
	if err == nil || res.Outcome == "completed" || !strings.Contains(err.Error(), "nothing was done") {
		t.Fatalf("the key changed between plan and act: %v (%s)", err, res.Outcome)
	}
	if got := appliedSteps(t, env, res.Incident); slices.Contains(got, "add-key") {
		t.Errorf("add-key applied: %q", got)
	}
	env.assertConfigsOriginal()
}

// replaceDocument is cfg with its KubeEtcdEncryptionConfig document
// replaced by c's, as an operator's patch would leave it.
func replaceDocument(t *testing.T, cfg []byte, c encryption.Config) []byte {
	t.Helper()
	doc, err := c.Document()
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, part := range strings.Split(string(cfg), "\n---\n") {
		if !strings.Contains(part, "kind: "+encryption.DocumentKind) {
			kept = append(kept, strings.TrimRight(part, "\n"))
		}
	}
	return []byte(strings.Join(append(kept, string(doc)), "\n---\n"))
}

// applyEverywhere applies cfg(node's running config) on every control plane.
func (e *engineEnv) applyEverywhere(cfg func(n *talostest.Node) []byte) {
	e.t.Helper()
	for _, n := range e.cluster.ControlPlanes() {
		if _, err := e.tc.Apply(e.t.Context(), n.IP, talos.ApplyRequest{Config: cfg(n), Mode: talos.NoReboot}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func secretboxKeys(names ...string) encryption.Provider {
	p := encryption.Provider{Type: encryption.Secretbox}
	for _, name := range names {
		p.Keys = append(p.Keys, encryption.Key{Name: name, Secret: encryption.RecordingKey("secretbox")})
	}
	return p
}

// The revert of an added key reads what every resource stores under it,
// not only the resource it was added for: the key leaves a rule that names
// several. With the Secrets written again under key1 and a ConfigMap still
// under key2 (one rule for both), the key stays, and says why.
func TestEngineRevertEncryptionKeyUsedByAnotherResource(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	shared := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets", "configmaps"}, Providers: []encryption.Provider{secretboxKeys("key1", "key2")}}}}
	env.applyEverywhere(func(n *talostest.Node) []byte { return replaceDocument(t, n.RunningConfig(), shared) })
	env.rewriteSecretsUnderKey1()
	_, value := storedKey2(t)
	if _, err := env.kv.Put(t.Context(), "/registry/configmaps/default/c1", string(value)); err != nil {
		t.Fatal(err)
	}
	_, err = revertRun(t, env, res.Incident, false, false, engineHooks{})
	if err == nil || !strings.Contains(err.Error(), "secretbox key key2 stays: 1 configmaps are still stored under it") {
		t.Fatalf("revert with a ConfigMap under key2: %v", err)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if c, _, _ := encryption.FromMachineConfig(n.RunningConfig()); c.String() != "secrets,configmaps: secretbox (key1, key2)" {
			t.Errorf("node %s: %s", n.IP, c)
		}
	}
}

// A key a control plane still writes with stays: with the Secrets written
// again under key1, a node whose configuration writes with key2 (its first
// key) would store new Secrets the others could not read.
func TestEngineRevertEncryptionKeyAControlPlaneWritesWith(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	writer := env.cluster.ControlPlanes()[1]
	writesKey2 := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"}, Providers: []encryption.Provider{secretboxKeys("key2", "key1")}}}}
	if _, err := env.tc.Apply(t.Context(), writer.IP, talos.ApplyRequest{Config: replaceDocument(t, writer.RunningConfig(), writesKey2), Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	env.rewriteSecretsUnderKey1()
	_, err = revertRun(t, env, res.Incident, false, false, engineHooks{})
	if err == nil || !strings.Contains(err.Error(), "secretbox key key2 stays: "+writer.IP+" still write(s) with it") {
		t.Fatalf("revert while %s writes with key2: %v", writer.IP, err)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if c, _, _ := encryption.FromMachineConfig(n.RunningConfig()); !strings.Contains(c.String(), "key2") {
			t.Errorf("node %s: key2 taken out while %s writes with it: %s", n.IP, writer.IP, c)
		}
	}
}

// A value written under the added key while the operator confirms the
// revert: the fact the plan relied on (nothing stored under it) is read
// again after the confirmation, and the key stays on every node.
func TestEngineRevertEncryptionKeyBackInUseBeforeAct(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	env.rewriteSecretsUnderKey1()
	_, value := storedKey2(t)
	written := false
	writeUnderKey2 := func() {
		if written {
			return
		}
		written = true
		if _, err := env.kv.Put(t.Context(), "/registry/secrets/default/written-meanwhile", string(value)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := revertRun(t, env, res.Incident, false, false, engineHooks{
		confirm:     func(string) error { writeUnderKey2(); return nil },
		confirmText: func(string, string) error { writeUnderKey2(); return nil },
	})
	if !written {
		t.Fatal("the revert asked nothing: no moment between plan and act")
	}
	if err == nil || out.Outcome == "completed" || !strings.Contains(err.Error(), "secretbox key key2") {
		t.Fatalf("revert with a Secret written under key2 after the plan: %v (%s)", err, out.Outcome)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if c, _, _ := encryption.FromMachineConfig(n.RunningConfig()); !strings.Contains(c.String(), "key2") {
			t.Errorf("node %s: key2 taken out while a Secret is stored under it: %s", n.IP, c)
		}
	}
}

// A secrets bundle regenerated under the same name on one control plane
// (its secretbox key2 another secret; the other keeps the old): the value
// under key2 reads nowhere on it. A flagless recover finds the old secret
// in the other's config and adds it as a second secretbox provider, key2
// too, after the first: kube-apiserver tries each provider whose prefix
// matches. New writes keep the regenerated key; revert takes the second
// one out, never the first.
func TestEngineRecoverEncryptionSecretRegenerated(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	regenerated := env.cluster.ControlPlanes()[0]
	old := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"}, Providers: []encryption.Provider{secretboxKeys("key2"), {Type: encryption.Identity}}}}}
	regen := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"}, Providers: []encryption.Provider{
		{Type: encryption.Secretbox, Keys: []encryption.Key{{Name: "key2", Secret: encryption.RecordingKey("secretbox regenerated")}}}, {Type: encryption.Identity}}}}}
	res := env.recoverRegenerated(regenerated, regen, old)
	wantStep(t, res, "add-key", "ok")
	c, _, _ := encryption.FromMachineConfig(regenerated.RunningConfig())
	if c.String() != "secrets: secretbox (key2), secretbox (key2), identity" || !c.Resources[0].Providers[0].Keys[0].Secret.Equal(encryption.RecordingKey("secretbox regenerated")) {
		t.Fatalf("node %s: %s", regenerated.IP, c)
	}
	if other := env.cluster.ControlPlanes()[1]; !bytes.Equal(other.RunningConfig(), env.original[other.IP]) {
		t.Errorf("node %s, which read everything, was changed", other.IP)
	}
	env.waitReadyOrNot(true)
	noKeyMaterial(t, env, fmt.Sprintf("%+v", res), stateFiles(t, env.stateDir))

	// Revert: the prefix secretbox:v1:key2: is both keys', so a writer is
	// told by the added key's secret, and what is stored under it by trial
	// decryption. First the control plane that still writes with the old
	// secret: values written again through it would carry it again.
	other := env.cluster.ControlPlanes()[1]
	rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
	if err == nil || !strings.Contains(err.Error(), "the second secretbox key key2 (the one added beside the key of that name kube-apiserver writes with) stays: "+other.IP+" still write(s) with its secret") {
		t.Fatalf("revert while %s writes with the old secret: %v (%s)", other.IP, err, rev.Outcome)
	}
	// Every control plane on the regenerated bundle: the three values
	// written with the old secret keep it.
	if _, err := env.tc.Apply(t.Context(), other.IP, talos.ApplyRequest{Config: replaceDocument(t, other.RunningConfig(), regen), Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	rev, err = revertRun(t, env, res.Incident, false, false, engineHooks{})
	if err == nil || !strings.Contains(err.Error(), "stays: 3 values are still written with its secret") {
		t.Fatalf("revert with values written with the old secret: %v (%s)", err, rev.Outcome)
	}
	// Gone (deleted, or written again with the regenerated key): the added
	// key goes, the regenerated one stays first.
	if _, err := env.kv.Delete(t.Context(), "/registry/secrets/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	rev, err = revertRun(t, env, res.Incident, false, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	c, _, _ = encryption.FromMachineConfig(regenerated.RunningConfig())
	if c.String() != regen.String() || !c.Resources[0].Providers[0].Keys[0].Secret.Equal(encryption.RecordingKey("secretbox regenerated")) {
		t.Errorf("node %s after the revert: %s", regenerated.IP, c)
	}
}

// recoverRegenerated gives regenerated the config regen (a secrets bundle
// regenerated under the same key name) and the other control planes old,
// records them as the configs before the incident, and recovers flagless.
func (e *engineEnv) recoverRegenerated(regenerated *talostest.Node, regen, old encryption.Config) runOutcome {
	t := e.t
	t.Helper()
	e.applyEverywhere(func(n *talostest.Node) []byte {
		if n == regenerated {
			return replaceDocument(t, n.RunningConfig(), regen)
		}
		return replaceDocument(t, n.RunningConfig(), old)
	})
	for _, n := range e.cluster.ControlPlanes() {
		e.original[n.IP], e.originalDisk[n.IP] = n.RunningConfig(), n.PersistentConfig()
	}
	res, err := recoverRun(t, e, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	return res
}

// The operator fixed the source: every control plane has its old
// configuration back, writing with key2. The key the incident added is
// no longer an added read key anywhere, so the revert has nothing to take
// out and ends; it never takes out the key the nodes write with (it
// refused for ever before: "a control plane still writes with it").
func TestEngineRevertEncryptionAfterTheOldConfigIsBack(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	fixed := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"}, Providers: []encryption.Provider{secretboxKeys("key2"), {Type: encryption.Identity}}}}}
	env.applyEverywhere(func(n *talostest.Node) []byte { return replaceDocument(t, n.RunningConfig(), fixed) })
	out, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
	if err != nil {
		t.Fatalf("revert after the old configuration is back: %v (%s)", err, out.Outcome)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if c, _, _ := encryption.FromMachineConfig(n.RunningConfig()); c.String() != fixed.String() {
			t.Errorf("node %s: %s, want %s", n.IP, c, fixed)
		}
	}
}
