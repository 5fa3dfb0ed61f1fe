package encryption

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

// generated is a control-plane config made by the machinery generator
// (v1.13.8) with the version contract, and its secrets bundle.
func generated(t *testing.T, contract *config.VersionContract) (string, *secrets.Bundle) {
	t.Helper()
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("enc", "https://127.0.0.1:6443", "1.34.4", generate.WithSecretsBundle(bundle), generate.WithVersionContract(contract))
	if err != nil {
		t.Fatal(err)
	}
	prov, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	text, err := prov.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return string(text), bundle
}

// document is a Talos 1.14 KubeEtcdEncryptionConfig document.
func document(providers string) string {
	return "---\napiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\nconfig:\n    resources:\n        - providers:\n" + providers + "          resources:\n            - secrets\n"
}

func secretboxProvider(name string, s Secret) string {
	return "            - secretbox:\n                keys:\n                    - name: " + name + "\n                      secret: " + s.Reveal() + "\n"
}

// withoutClusterSecrets drops the v1alpha1 document's encryption secret
// line, as a config regenerated with the 1.14 contract has none.
func withoutClusterSecrets(t *testing.T, text string) string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "EncryptionSecret:") {
			continue
		}
		out = append(out, l)
	}
	if len(out) == len(strings.Split(text, "\n")) {
		t.Fatal("the config has no encryption secret line")
	}
	return strings.Join(out, "\n")
}

func TestFromMachineConfig(t *testing.T) {
	cfg113, bundle113 := generated(t, config.TalosVersion1_13)
	cfg12, bundle12 := generated(t, config.TalosVersion1_2)
	sb := NewSecret(bundle113.Secrets.SecretboxEncryptionSecret)
	cbc := NewSecret(bundle12.Secrets.AESCBCEncryptionSecret)
	if sb.IsZero() || cbc.IsZero() {
		t.Fatalf("the bundles hold secretbox %v (1.13), aescbc %v (1.2): want both", !sb.IsZero(), !cbc.IsZero())
	}
	for _, tc := range []struct {
		name, text string
		want       string // File(), or the error's words
		source     Source
		fails      bool
	}{
		{"1.13 generated: secretbox key2, identity", cfg113, fileOf(t, Legacy(sb.Reveal(), "")), FromClusterSecrets, false},
		{"1.2 contract: aescbc key1, identity", cfg12, fileOf(t, Legacy("", cbc.Reveal())), FromClusterSecrets, false},
		{"1.14 document as rc.1 generates it: secretbox key2 alone", withoutClusterSecrets(t, cfg113) + document(secretboxProvider("key2", sb)),
			fileOf(t, Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: []Provider{{Type: Secretbox, Keys: []Key{{Name: "key2", Secret: sb}}}}}}}), FromDocument, false},
		{"1.14.0-beta.0's document: secretbox key1", withoutClusterSecrets(t, cfg113) + document(secretboxProvider("key1", sb)),
			fileOf(t, Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: []Provider{{Type: Secretbox, Keys: []Key{{Name: "key1", Secret: sb}}}}}}}), FromDocument, false},
		{"the document beside the cluster secrets", cfg113 + document(secretboxProvider("key2", sb)), "already set in v1alpha1 config", "", true},
		{"an unknown field in the document", withoutClusterSecrets(t, cfg113) + document(secretboxProvider("key2", sb)+"              size: 32\n"), "field size not found", "", true},
		{"an empty document", withoutClusterSecrets(t, cfg113) + "---\napiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\nconfig: {}\n", "etcd encryption config is required", "", true},
		{"two documents", withoutClusterSecrets(t, cfg113) + document(secretboxProvider("key2", sb)) + document(secretboxProvider("key2", sb)), "more than one KubeEtcdEncryptionConfig", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, src, err := FromMachineConfig([]byte(tc.text))
			if tc.fails {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one that says %q", err, tc.want)
				}
				if strings.Contains(err.Error(), sb.Reveal()) {
					t.Errorf("the error shows the secret")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fileOf(t, c); got != tc.want || src != tc.source {
				t.Errorf("from %s:\n%s\nwant from %s:\n%s", src, got, tc.source, tc.want)
			}
		})
	}
}

func fileOf(t *testing.T, c Config) string {
	t.Helper()
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	return string(f)
}

// TestTalos114Drift: a Secret written by a Talos 1.13 control plane (legacy
// secretbox key2) read under each 1.14 rendering of the same secrets
// bundle, as siderolabs/talos#13885 met it; and an AES-CBC cluster's Secret
// under the document the 1.14 generator makes from its bundle (rc.1 and
// main: the AES-CBC secret under secretbox key1, no identity).
func TestTalos114Drift(t *testing.T) {
	sb, cbc := SecretOf(testKey("bundle secretbox")), SecretOf(testKey("bundle aescbc"))
	const etcdKey = "/registry/secrets/default/db"
	secretboxData := seal(t, Secretbox, "key2", testKey("bundle secretbox"), etcdKey, object)
	cbcData := seal(t, AESCBC, "key1", testKey("bundle aescbc"), etcdKey, object)
	only := func(p Provider) Config {
		return Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: []Provider{p}}}}
	}
	for _, tc := range []struct {
		name   string
		config Config
		value  []byte
		want   Outcome
		says   string
		kube   string
	}{
		{"1.13 data, 1.13 rendering", Legacy(sb.Reveal(), ""), secretboxData, Decrypts, "secretbox key key2 decrypts it", ""},
		{"1.13 data, 1.14.0-beta.0's document (key1)", only(Provider{Type: Secretbox, Keys: []Key{{Name: "key1", Secret: sb}}}), secretboxData, DoesNotDecrypt,
			"stored under secretbox key key2; the configuration's secretbox provider has no key of that name (it has key1)", errNoSecretboxKey},
		{"1.13 data, rc.1's document (key2)", only(Provider{Type: Secretbox, Keys: []Key{{Name: "key2", Secret: sb}}}), secretboxData, Decrypts, "secretbox key key2 decrypts it", ""},
		{"aescbc data, its 1.13 rendering", Legacy("", cbc.Reveal()), cbcData, Decrypts, "aescbc key key1 decrypts it", ""},
		{"aescbc data, the 1.14 generator's document", only(Provider{Type: Secretbox, Keys: []Key{{Name: "key1", Secret: cbc}}}), cbcData, DoesNotDecrypt,
			"stored with aescbc key key1, and the configuration for secrets has no aescbc provider (it has secretbox (key1))", errNoPrefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.config.Read("secrets", etcdKey, tc.value)
			if got.Outcome != tc.want || !strings.Contains(got.Why, tc.says) || got.APIServer != tc.kube {
				t.Errorf("Read: %s: %s (kube-apiserver: %q)\nwant %s: %s (kube-apiserver: %q)", got.Outcome, got.Why, got.APIServer, tc.want, tc.says, tc.kube)
			}
		})
	}
}
