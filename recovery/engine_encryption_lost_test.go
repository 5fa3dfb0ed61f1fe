package recovery_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// No key breakglass can find reads two Secrets (a provider dropped, no
// bundle). recover --remove-unreadable lists each with what it is, backs
// up exactly those values and removes them; a Secret the nodes read stays;
// kube-apiserver is ready. The backup holds their exact bytes, and revert
// --objects puts them back byte for byte.
func TestEngineRecoverEncryptionRemoveUnreadable(t *testing.T) {
	env := newDroppedEnv(t)
	lostKeys := map[string][]byte{}
	for _, k := range []string{recordedShape(t, "provider-dropped").StoredKey, "/registry/secrets/default/s1"} {
		resp, err := env.kv.Get(t.Context(), k)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: %v", k, err)
		}
		lostKeys[k] = resp.Kvs[0].Value
	}
	keptKey, kept := storedKey2(t) // secretbox key2: what the nodes render
	keptKey = "/registry/secrets/default/sh.helm.release.v1.kept.v1"
	if _, err := env.kv.Put(t.Context(), keptKey, string(kept)); err != nil {
		t.Fatal(err)
	}

	var shown string
	res, err := recoverRun(t, env, recoverRequest{RemoveLost: true, Hooks: engineHooks{show: func(s string) { shown += s + "\n" }}})
	wantOutcome(t, res, err, "completed", false)
	if o := res.step("add-key"); o.Outcome != "skipped" || !strings.Contains(o.Message, "left to the removal step") {
		t.Errorf("add-key: %+v", o)
	}
	for k := range lostKeys {
		if got, _ := env.kv.Get(t.Context(), k); len(got.Kvs) != 0 {
			t.Errorf("%s still stored", k)
		}
		if !strings.Contains(shown, k) {
			t.Errorf("the plan does not list %s:\n%s", k, shown)
		}
	}
	if !strings.Contains(shown, "a Secret, stored as aescbc key key1") {
		t.Errorf("the plan does not say what each is:\n%s", shown)
	}
	if got, _ := env.kv.Get(t.Context(), keptKey); len(got.Kvs) != 1 || string(got.Kvs[0].Value) != string(kept) {
		t.Error("a Secret the nodes read was removed")
	}
	env.waitReadyOrNot(true)
	if next := strings.Join(res.Next, "\n"); !strings.Contains(next, "must write them again") || strings.Contains(next, "the next apply drops the key again") {
		t.Errorf("the advice after a removal with no key added:\n%s", next)
	}

	backups, _ := filepath.Glob(filepath.Join(env.stateDir, "incidents", res.Incident, "backup-remove-lost*.json"))
	if len(backups) != 1 {
		t.Fatalf("backups %v", backups)
	}
	b, err := etcd.ReadBackup(backups[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Keys) != len(lostKeys) {
		t.Fatalf("the backup holds %d keys", len(b.Keys))
	}
	for _, k := range b.Keys {
		raw, _ := k.RawValue()
		if want, ok := lostKeys[k.Key]; !ok || string(raw) != string(want) || !k.Unreadable {
			t.Errorf("backup key %s: not the value removed", k.Key)
		}
	}

	shown = ""
	res, err = revertRun(t, env, res.Incident, true, false, engineHooks{show: func(s string) { shown += s + "\n" }})
	if !strings.Contains(shown, "2 of these are values no key read") {
		t.Errorf("the restore does not warn that the values are unreadable:\n%s", shown)
	}
	if err != nil {
		t.Fatalf("revert --objects: %v (%+v)", err, res)
	}
	for k, v := range lostKeys {
		if got, _ := env.kv.Get(t.Context(), k); len(got.Kvs) != 1 || string(got.Kvs[0].Value) != string(v) {
			t.Errorf("%s not restored byte for byte", k)
		}
	}
}

// Without --remove-unreadable nothing is removed, and the error names it.
func TestEngineRecoverEncryptionLostNeedsConsent(t *testing.T) {
	env := newDroppedEnv(t)
	res, err := recoverRun(t, env, recoverRequest{})
	if err == nil || !strings.Contains(fmt.Sprint(failure.Hints(err)), "breakglass recover --remove-unreadable") {
		t.Fatalf("%v %v", err, failure.Hints(err))
	}
	_ = res
	if got, _ := env.kv.Get(context.Background(), "/registry/secrets/default/s1"); len(got.Kvs) != 1 {
		t.Error("removed without consent")
	}
	env.assertConfigsOriginal()
}

// A key that reads the values turns up while the operator confirms (the
// bundle is named in a copy of the runbook and filled meanwhile): nothing
// is removed.
func TestEngineRecoverEncryptionLostReadableBeforeAct(t *testing.T) {
	env := newDroppedEnv(t)
	bundle := bundleFile(t, encryption.RecordingKey("another cluster's aescbc"))
	found := func(string, string) error {
		return os.WriteFile(bundle, []byte("secrets:\n  aescbcencryptionsecret: "+encryption.RecordingKey("aescbc").Reveal()+"\n"), 0o600)
	}
	res, err := recoverRun(t, env, recoverRequest{RemoveLost: true, Bundle: bundle, Hooks: engineHooks{confirmText: found}})
	if err == nil || !strings.Contains(err.Error(), "no longer a value no key reads") {
		t.Fatalf("%v (%s)", err, res.Outcome)
	}
	if got, _ := env.kv.Get(context.Background(), "/registry/secrets/default/s1"); len(got.Kvs) != 1 {
		t.Error("removed though a key now reads it")
	}
}

// A kube-apiserver that serves may run with a key no machine config shows
// (its configuration changed, not restarted yet): nothing is removed while
// one is ready.
func TestEngineRecoverEncryptionLostNotWhileOneServes(t *testing.T) {
	env := newDroppedEnv(t)
	serving := env.cluster.ControlPlanes()[1].IP
	env.mu.Lock()
	judge := env.unreadable
	env.unreadable = func(n *talostest.Node) []string {
		if n.IP == serving {
			return nil // it reads them, with the key it started with
		}
		return judge(n)
	}
	env.mu.Unlock()
	res, err := recoverRun(t, env, recoverRequest{RemoveLost: true})
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver on "+serving+" is ready") {
		t.Fatalf("%v (%s)", err, res.Outcome)
	}
	if got, _ := env.kv.Get(context.Background(), "/registry/secrets/default/s1"); len(got.Kvs) != 1 {
		t.Error("removed while a kube-apiserver serves")
	}
}
