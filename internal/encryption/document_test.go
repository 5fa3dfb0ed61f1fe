package encryption

import (
	"errors"
	"strings"
	"testing"
)

const v1alpha1Doc = "version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  clusterName: lab\n"

// machineConfigWith is a machine config whose encryption configuration is
// c as Talos 1.14's document, after a v1alpha1 document.
func machineConfigWith(t *testing.T, c Config) []byte {
	t.Helper()
	doc, err := c.Document()
	if err != nil {
		t.Fatal(err)
	}
	return []byte(v1alpha1Doc + "---\n" + string(doc))
}

// The 1.14.0-beta.0 generator's config (secretbox key1, no identity) gets
// key2 back for reading, after key1; the v1alpha1 document's bytes stay;
// taking it out gives the same configuration back.
func TestAddReadKeyAndRemove(t *testing.T) {
	key := RecordingKey("a")
	renamed := Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: []Provider{{Type: Secretbox, Keys: []Key{{Name: "key1", Secret: key}}}}}}}
	mc := machineConfigWith(t, renamed)
	out, changed, err := AddReadKey(mc, "secrets", Secretbox, Key{Name: "key2", Secret: key})
	if err != nil || !changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	if !strings.HasPrefix(string(out), v1alpha1Doc+"---\n") {
		t.Fatalf("the v1alpha1 document changed:\n%s", out)
	}
	c, src, err := FromMachineConfig(out)
	if err != nil || src != FromDocument {
		t.Fatal(src, err)
	}
	if got := c.String(); got != "secrets: secretbox (key1, key2)" {
		t.Errorf("after the add: %s", got)
	}
	// Added again: nothing to do.
	if _, changed, err := AddReadKey(out, "secrets", Secretbox, Key{Name: "key2", Secret: key}); err != nil || changed {
		t.Errorf("again: changed %v, %v", changed, err)
	}
	back, changed, err := RemoveKey(out, "secrets", Secretbox, "key2")
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if c, _, _ := FromMachineConfig(back); c.String() != renamed.String() {
		t.Errorf("after the removal: %s", c)
	}
	// The key it writes with is never taken out.
	if _, _, err := RemoveKey(back, "secrets", Secretbox, "key1"); err == nil {
		t.Error("the write key was taken out")
	}
}

// A provider missing (data under aescbc, the config secretbox only) comes
// back as a provider of its own after the one written with.
func TestAddReadKeyProviderDropped(t *testing.T) {
	c := Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: []Provider{{Type: Secretbox, Keys: []Key{{Name: "key2", Secret: RecordingKey("a")}}}, {Type: Identity}}}}}
	out, changed, err := AddReadKey(machineConfigWith(t, c), "secrets", AESCBC, Key{Name: "key1", Secret: RecordingKey("c")})
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	got, _, _ := FromMachineConfig(out)
	if got.String() != "secrets: secretbox (key2), aescbc (key1), identity" {
		t.Errorf("%s", got)
	}
}

// The legacy cluster secrets cannot name another key: said, with what to do.
func TestAddReadKeyLegacy(t *testing.T) {
	mc := []byte("version: v1alpha1\ncluster:\n  secretboxEncryptionSecret: " + RecordingKey("a").Reveal() + "\n")
	if _, _, err := AddReadKey(mc, "secrets", Secretbox, Key{Name: "key1", Secret: RecordingKey("a")}); err != ErrLegacyNames {
		t.Errorf("%v", err)
	}
	// A legacy config that renders the key already (a control plane the
	// drift did not reach) needs nothing: not refused (seen on the lab's
	// encryption-secret-regenerated, where add-key failed on that node).
	out, changed, err := AddReadKey(mc, "secrets", Secretbox, Key{Name: "key2", Secret: RecordingKey("a")})
	if err != nil || changed || string(out) != string(mc) {
		t.Errorf("key2 rendered already: changed %v, %v", changed, err)
	}
}

// FindKey finds, among candidates, the secret that opens a value under the
// name the value carries; a candidate of another secret does not.
func TestFindKey(t *testing.T) {
	v := seal(t, Secretbox, "key2", testKey("a"), "/registry/secrets/default/s0", object)
	cands := []Candidate{{Source: "node b", Secret: SecretOf(testKey("b"))}, {Source: "node a", Secret: SecretOf(testKey("a"))}}
	c, ok := FindKey(v, "/registry/secrets/default/s0", cands)
	if !ok || c.Source != "node a" {
		t.Errorf("%v %v", c.Source, ok)
	}
	if _, ok := FindKey(v, "/registry/secrets/default/s0", cands[:1]); ok {
		t.Error("another secret found")
	}
	bundle := []byte("cluster:\n  id: x\nsecrets:\n  bootstraptoken: abc.def\n  secretboxencryptionsecret: " + SecretOf(testKey("a")).Reveal() + "\n")
	bc, err := BundleCandidates(bundle, "secrets.yaml")
	if err != nil || len(bc) != 1 {
		t.Fatal(bc, err)
	}
	if c, ok := FindKey(v, "/registry/secrets/default/s0", bc); !ok || !strings.HasPrefix(c.Source, "secrets.yaml") {
		t.Errorf("bundle: %v %v", c.Source, ok)
	}
}

// A secrets bundle regenerated under the same name (secretbox key2, another
// secret): the old secret comes back as a second secretbox provider after
// the first, holding key2 too, which kube-apiserver tries when the first
// fails to decrypt a value; its revert takes that second one out, never the
// key written with.
func TestAddReadKeySameNameAnotherSecret(t *testing.T) {
	regenerated, old := RecordingKey("regenerated"), SecretOf(testKey("old"))
	c := Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: []Provider{{Type: Secretbox, Keys: []Key{{Name: "key2", Secret: regenerated}}}, {Type: Identity}}}}}
	mc := machineConfigWith(t, c)
	out, changed, err := AddReadKey(mc, "secrets", Secretbox, Key{Name: "key2", Secret: old})
	if err != nil || !changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	got, _, _ := FromMachineConfig(out)
	if got.String() != "secrets: secretbox (key2), secretbox (key2), identity" {
		t.Fatalf("after the add: %s", got)
	}
	if p := got.Resources[0].Providers; !p[0].Keys[0].Secret.Equal(regenerated) || !p[1].Keys[0].Secret.Equal(old) {
		t.Error("the regenerated key is not first, or the old one not second")
	}
	if err := got.Validate(); err != nil {
		t.Errorf("kube-apiserver's checks: %v", err)
	}
	// A value written with the old secret reads through the second provider.
	const etcdKey = "/registry/secrets/default/s1"
	if tr := got.Read("secrets", etcdKey, seal(t, Secretbox, "key2", testKey("old"), etcdKey, object)); tr.Outcome != Decrypts {
		t.Errorf("a value under the old key2: %s", tr.Outcome)
	}
	if _, changed, err := AddReadKey(out, "secrets", Secretbox, Key{Name: "key2", Secret: old}); err != nil || changed {
		t.Errorf("again: changed %v, %v", changed, err)
	}
	back, changed, err := RemoveKey(out, "secrets", Secretbox, "key2")
	if err != nil || !changed {
		t.Fatal(changed, err)
	}
	if c2, _, _ := FromMachineConfig(back); c2.String() != c.String() || !c2.Resources[0].Providers[0].Keys[0].Secret.Equal(regenerated) {
		t.Errorf("after the removal: %s", c2)
	}
}

// An AES-CBC key regenerated under the same name is refused, not added
// as a second aescbc provider: AES-CBC authenticates nothing, so about one
// value in 256 opens as garbage with the first key and kube-apiserver
// never tries the second (an adversarial review measured 17 of 4,000).
func TestAddReadKeySameNameAESCBCRefused(t *testing.T) {
	c := Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: []Provider{{Type: AESCBC, Keys: []Key{{Name: "key1", Secret: RecordingKey("aescbc regenerated")}}}, {Type: Identity}}}}}
	mc := machineConfigWith(t, c)
	_, changed, err := AddReadKey(mc, "secrets", AESCBC, Key{Name: "key1", Secret: RecordingKey("aescbc")})
	if !errors.Is(err, ErrCBCNameTaken) || changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	if strings.Contains(err.Error(), RecordingKey("aescbc").Reveal()) || strings.Contains(err.Error(), RecordingKey("aescbc regenerated").Reveal()) {
		t.Error("key material in the error")
	}
}
