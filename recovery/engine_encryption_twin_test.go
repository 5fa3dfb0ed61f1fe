package recovery_test

// Reverts of a second key of the same name, found by an adversarial review.

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/talos"
)

// sealSecretbox writes plain as kube-apiserver's secretbox provider does.
func sealSecretbox(t *testing.T, name string, s encryption.Secret, plain []byte) []byte {
	t.Helper()
	out, err := encryption.Seal(encryption.Secretbox, encryption.Key{Name: name, Secret: s}, "", plain)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func holdsSecret(c encryption.Config, s encryption.Secret) bool {
	for _, r := range c.Resources {
		for _, p := range r.Providers {
			for _, k := range p.Keys {
				if k.Secret.Equal(s) {
					return true
				}
			}
		}
	}
	return false
}

// The name twice in another rule (the operator's widgets rule, listed
// first, holds key2 in two providers): the revert tries the secret of the
// rule the key was added to, and keeps it while 3 Secrets are written
// with it (an adversarial review found it tried the first rule's).
func TestEngineRevertEncryptionSecondKeyOfItsOwnRule(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	regenerated := env.cluster.ControlPlanes()[0]
	regenKey := encryption.RecordingKey("secretbox regenerated")
	cmRule := encryption.Rule{Resources: []string{"widgets.example.com"}, Providers: []encryption.Provider{
		{Type: encryption.Secretbox, Keys: []encryption.Key{{Name: "key2", Secret: encryption.RecordingKey("operator p")}}},
		{Type: encryption.Secretbox, Keys: []encryption.Key{{Name: "key2", Secret: encryption.RecordingKey("operator q")}}},
		{Type: encryption.Identity}}}
	old := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"}, Providers: []encryption.Provider{secretboxKeys("key2"), {Type: encryption.Identity}}}}}
	regen := encryption.Config{Resources: []encryption.Rule{cmRule, {Resources: []string{"secrets"}, Providers: []encryption.Provider{
		{Type: encryption.Secretbox, Keys: []encryption.Key{{Name: "key2", Secret: regenKey}}}, {Type: encryption.Identity}}}}}
	res := env.recoverRegenerated(regenerated, regen, old)
	c, _, _ := encryption.FromMachineConfig(regenerated.RunningConfig())
	t.Logf("after recover, node %s: %s", regenerated.IP, c)
	if !holdsSecret(c, encryption.RecordingKey("secretbox")) {
		t.Fatalf("setup: the old secret was not added")
	}
	// The other control plane moves to the regenerated bundle too (as the
	// shipped test does), so no control plane writes with the old secret.
	other := env.cluster.ControlPlanes()[1]
	if _, err := env.tc.Apply(t.Context(), other.IP, talos.ApplyRequest{Config: replaceDocument(t, other.RunningConfig(), regen), Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
	t.Logf("revert: outcome %s, err %v", rev.Outcome, err)
	c, _, _ = encryption.FromMachineConfig(regenerated.RunningConfig())
	t.Logf("after revert, node %s: %s", regenerated.IP, c)
	if !holdsSecret(c, encryption.RecordingKey("secretbox")) {
		t.Errorf("the revert took the old secret out of the secrets rule while 3 Secrets are written with it (err %v)", err)
	}
	if err == nil || !strings.Contains(err.Error(), "3 values are still written") {
		t.Errorf("revert should refuse: %v", err)
	}
}

// A custom resource still written with the old secret keeps the added
// key: kube-apiserver stores it under /registry/GROUP/PLURAL/, not under
// its resource's name, so every value in etcd is tried (an adversarial
// review found /registry/widgets/ was read, and the key taken out).
func TestEngineRevertEncryptionSecondKeyCustomResource(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	regenerated := env.cluster.ControlPlanes()[0]
	regenKey := encryption.RecordingKey("secretbox regenerated")
	res2 := []string{"secrets", "widgets.example.com"}
	old := encryption.Config{Resources: []encryption.Rule{{Resources: res2, Providers: []encryption.Provider{secretboxKeys("key2"), {Type: encryption.Identity}}}}}
	regen := encryption.Config{Resources: []encryption.Rule{{Resources: res2, Providers: []encryption.Provider{
		{Type: encryption.Secretbox, Keys: []encryption.Key{{Name: "key2", Secret: regenKey}}}, {Type: encryption.Identity}}}}}
	res := env.recoverRegenerated(regenerated, regen, old)
	// Secrets written again (here: deleted); one Widget still under the old secret.
	if _, err := env.kv.Delete(t.Context(), "/registry/secrets/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := env.kv.Put(t.Context(), "/registry/example.com/widgets/default/w1", string(sealSecretbox(t, "key2", encryption.RecordingKey("secretbox"), []byte(`{"apiVersion":"example.com/v1","kind":"Widget"}`)))); err != nil {
		t.Fatal(err)
	}
	other := env.cluster.ControlPlanes()[1]
	if _, err := env.tc.Apply(t.Context(), other.IP, talos.ApplyRequest{Config: replaceDocument(t, other.RunningConfig(), regen), Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
	t.Logf("revert: outcome %s, err %v", rev.Outcome, err)
	c, _, _ := encryption.FromMachineConfig(regenerated.RunningConfig())
	if !holdsSecret(c, encryption.RecordingKey("secretbox")) {
		t.Errorf("the revert took the old secret out while a Widget (/registry/example.com/widgets/default/w1) is written with it: %s", c)
	}
}

// A custom resource under the added key keeps it when the name is held
// once too: what the rule names is read under its etcd path, and the rest
// of etcd as well (custom resources live under /registry/GROUP/PLURAL/).
func TestEngineRevertEncryptionKeyUsedByACustomResource(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "completed", false)
	env.rewriteSecretsUnderKey1()
	widget := sealSecretbox(t, "key2", encryption.RecordingKey("secretbox"), []byte(`{"apiVersion":"example.com/v1","kind":"Widget"}`))
	if _, err := env.kv.Put(t.Context(), "/registry/example.com/widgets/default/w1", string(widget)); err != nil {
		t.Fatal(err)
	}
	_, err = revertRun(t, env, res.Incident, false, false, engineHooks{})
	if err == nil || !strings.Contains(err.Error(), "secretbox key key2 stays: 1 values are still stored under it (e.g. /registry/example.com/widgets/default/w1)") {
		t.Fatalf("revert with a Widget under key2: %v", err)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if c, _, _ := encryption.FromMachineConfig(n.RunningConfig()); !strings.Contains(c.String(), "key2") {
			t.Errorf("node %s: key2 taken out while a Widget is stored under it: %s", n.IP, c)
		}
	}
}

// One prefix, two secrets: a control plane regenerated its key2 and wrote
// a Secret with it (listed first by etcd) beside those of the old key2.
// add-key tries every value, not the first of the prefix: each control
// plane gets the secret it lacks, so both read all four Secrets (the first
// value alone named only the regenerated secret, and the regenerated node
// was left unable to read the other three).
func TestEngineRecoverEncryptionMixedSecretsUnderOnePrefix(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	regenerated := env.cluster.ControlPlanes()[0]
	regenKey := encryption.RecordingKey("secretbox regenerated")
	old := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"}, Providers: []encryption.Provider{secretboxKeys("key2"), {Type: encryption.Identity}}}}}
	regen := encryption.Config{Resources: []encryption.Rule{{Resources: []string{"secrets"}, Providers: []encryption.Provider{
		{Type: encryption.Secretbox, Keys: []encryption.Key{{Name: "key2", Secret: regenKey}}}, {Type: encryption.Identity}}}}}
	if _, err := env.kv.Put(t.Context(), "/registry/secrets/default/a0", string(sealSecretbox(t, "key2", regenKey, []byte("k8s\x00written by the regenerated node")))); err != nil {
		t.Fatal(err)
	}
	env.recoverRegenerated(regenerated, regen, old)
	for _, n := range env.cluster.ControlPlanes() {
		c, _, _ := encryption.FromMachineConfig(n.RunningConfig())
		if !holdsSecret(c, encryption.RecordingKey("secretbox")) || !holdsSecret(c, regenKey) {
			t.Errorf("node %s does not hold both secrets of key2: %s", n.IP, c)
		}
		resp, err := env.kv.Get(t.Context(), "/registry/secrets/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if tr := c.Read("secrets", string(kv.Key), kv.Value); tr.Outcome != encryption.Decrypts {
				t.Errorf("node %s cannot read %s: %s", n.IP, kv.Key, tr.Why)
			}
		}
	}
}

// A Secret written under key2 with a third secret while the operator
// confirms: the plan's keys would leave it unreadable, so the fact read
// again after the confirmation fails and nothing is applied (an
// adversarial review: the fact looked for the planned key only).
func TestEngineRecoverEncryptionThirdSecretBeforeAct(t *testing.T) {
	env := newEncryptionEnv(t, 2)
	written := false
	write := func() {
		if written {
			return
		}
		written = true
		third := sealSecretbox(t, "key2", encryption.RecordingKey("a third secret"), []byte("k8s\x00written meanwhile"))
		if _, err := env.kv.Put(t.Context(), "/registry/secrets/default/a-written-meanwhile", string(third)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		confirm:     func(string) error { write(); return nil },
		confirmText: func(string, string) error { write(); return nil },
	}})
	if err == nil || res.Outcome == "completed" || !strings.Contains(err.Error(), "decrypt with no key the plan adds") {
		t.Fatalf("a third secret written between plan and act: %v (%s)", err, res.Outcome)
	}
	env.assertConfigsOriginal()
}
