package encryption

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"strings"
	"testing"
)

func TestTryKey(t *testing.T) {
	const etcdKey = "/registry/secrets/kube-system/bootstrap-token-abc"
	right, other := testKey("right"), testKey("other")
	key := func(name string, raw []byte) Key { return Key{Name: name, Secret: SecretOf(raw)} }
	for _, tc := range []struct {
		name     string
		provider ProviderType
		key      Key
		value    []byte
		want     Outcome
		says     string
		kube     string
	}{
		{"secretbox, right key", Secretbox, key("key2", right), seal(t, Secretbox, "key2", right, etcdKey, object), Decrypts, "secretbox key key2 decrypts it", ""},
		{"secretbox, another secret under the same name", Secretbox, key("key2", other), seal(t, Secretbox, "key2", right, etcdKey, object), DoesNotDecrypt,
			"the secret of secretbox key key2 does not open it: it was encrypted with another secret under the same name", errSecretboxOpen},
		{"secretbox, another name", Secretbox, key("key2", right), seal(t, Secretbox, "key1", right, etcdKey, object), DoesNotDecrypt,
			"stored under secretbox key key1, not key key2", errNoSecretboxKey},
		{"secretbox, a name that begins like another", Secretbox, key("key", right), seal(t, Secretbox, "key2", right, etcdKey, object), DoesNotDecrypt,
			"stored under secretbox key key2, not key key", errNoSecretboxKey},
		{"secretbox, a name with a colon", Secretbox, key("a:b", right), seal(t, Secretbox, "a:b", right, etcdKey, object), Decrypts, "secretbox key a:b decrypts it", ""},
		{"secretbox key for aescbc data", Secretbox, key("key1", right), seal(t, AESCBC, "key1", right, etcdKey, object), DoesNotDecrypt,
			"it is aescbc key key1, not written by secretbox", errNoPrefix},
		{"secretbox, cut short", Secretbox, key("key2", right), seal(t, Secretbox, "key2", right, etcdKey, object)[:40], DoesNotDecrypt, "cut short or damaged", errShort},
		{"secretbox, a 16-byte key", Secretbox, key("key2", right[:16]), seal(t, Secretbox, "key2", right, etcdKey, object), CannotTry, "expected key size 32 for secretbox provider, got 16", ""},
		{"aescbc, right key", AESCBC, key("key1", right), seal(t, AESCBC, "key1", right, etcdKey, object), Decrypts, "aescbc key key1 decrypts it", ""},
		{"aescbc, another secret", AESCBC, key("key1", wrongCBCKey(t, false, right, etcdKey)), cbcValue, DoesNotDecrypt, "encrypted with another secret under the same name", errPKCS7Padding},
		{"aescbc, another secret that passes the padding check", AESCBC, key("key1", wrongCBCKey(t, true, right, etcdKey)), cbcValue, DoesNotDecrypt,
			"decrypts it to bytes that are not an object", ""},
		{"aescbc, not whole blocks", AESCBC, key("key1", right), seal(t, AESCBC, "key1", right, etcdKey, object)[:40], DoesNotDecrypt, "cut short or damaged", errBlockSize},
		{"aescbc, another name", AESCBC, key("key2", right), seal(t, AESCBC, "key1", right, etcdKey, object), DoesNotDecrypt, "stored under aescbc key key1, not key key2", errNoAESKey},
		{"aesgcm, right key", AESGCM, key("k", right), seal(t, AESGCM, "k", right, etcdKey, object), Decrypts, "aesgcm key k decrypts it", ""},
		{"aesgcm, 16-byte key", AESGCM, key("k", right[:16]), seal(t, AESGCM, "k", right[:16], etcdKey, object), Decrypts, "aesgcm key k decrypts it", ""},
		{"aesgcm, another secret", AESGCM, key("k", other), seal(t, AESGCM, "k", right, etcdKey, object), DoesNotDecrypt, "another secret under the same name, or written under another etcd key", errGCMOpen},
		{"aesgcm, moved from another etcd key", AESGCM, key("k", right), seal(t, AESGCM, "k", right, "/registry/secrets/default/elsewhere", object), DoesNotDecrypt,
			"written under another etcd key", errGCMOpen},
		{"identity, unencrypted", Identity, Key{}, object, Decrypts, "identity reads it", ""},
		{"identity, encrypted", Identity, Key{}, seal(t, Secretbox, "key2", right, etcdKey, object), DoesNotDecrypt, "identity reads only unencrypted values", errIdentity},
		{"secretbox, unencrypted", Secretbox, key("key2", right), object, DoesNotDecrypt, "it is unencrypted (protobuf), not written by secretbox", errNoPrefix},
		{"KMS data", Secretbox, key("key2", right), []byte("k8s:enc:kms:v2:vault:\x0a\x01x"), CannotTry, "KMS v2 plugin vault: only the plugin holds its key", ""},
		{"a KMS provider", KMS, Key{}, seal(t, Secretbox, "key2", right, etcdKey, object), CannotTry, "in its plugin", ""},
		{"a secret that is not base64", Secretbox, Key{Name: "key2", Secret: NewSecret("not base64!")}, seal(t, Secretbox, "key2", right, etcdKey, object), CannotTry, "not base64", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TryKey(tc.provider, tc.key, etcdKey, tc.value)
			if got.Outcome != tc.want || !strings.Contains(got.Why, tc.says) || got.APIServer != tc.kube {
				t.Errorf("TryKey: %s: %s (kube-apiserver: %q)\nwant %s: ...%s... (kube-apiserver: %q)", got.Outcome, got.Why, got.APIServer, tc.want, tc.says, tc.kube)
			}
			for _, s := range []string{tc.key.Secret.Reveal(), SecretOf(right).Reveal(), SecretOf(other).Reveal()} {
				if s != "" && strings.Contains(fmt.Sprintf("%+v", got), s) {
					t.Errorf("the trial shows a key: %+v", got)
				}
			}
		})
	}
}

// cbcValue is one AES-CBC value, for the wrong keys wrongCBCKey finds.
var cbcValue []byte

// wrongCBCKey is a key other than right under which cbcValue's last block
// decrypts with (passing) or without (!passing) a valid PKCS#7 padding.
func wrongCBCKey(t *testing.T, passing bool, right []byte, etcdKey string) []byte {
	t.Helper()
	if cbcValue == nil {
		cbcValue = seal(t, AESCBC, "key1", right, etcdKey, object)
	}
	data := cbcValue[len("k8s:enc:aescbc:v1:key1:"):]
	for i := range 100000 {
		k := testKey(fmt.Sprintf("wrong %d", i))
		block, _ := aes.NewCipher(k)
		out := make([]byte, len(data)-aes.BlockSize)
		cipher.NewCBCDecrypter(block, data[:aes.BlockSize]).CryptBlocks(out, data[aes.BlockSize:])
		pad := int(out[len(out)-1])
		valid := pad > 0 && pad <= len(out) && bytes.Equal(out[len(out)-pad:], bytes.Repeat([]byte{byte(pad)}, pad))
		if valid == passing && !(pad == 0 || pad > len(out)) {
			return k
		}
	}
	t.Fatal("no such key")
	return nil
}

// TestRead: how kube-apiserver with a configuration reads a value, for the
// shapes of issue 37.
func TestRead(t *testing.T) {
	const etcdKey = "/registry/secrets/default/app"
	k1, k2, k3 := testKey("1"), testKey("2"), testKey("3")
	p := func(typ ProviderType, name string, raw []byte) Provider {
		return Provider{Type: typ, Keys: []Key{{Name: name, Secret: SecretOf(raw)}}}
	}
	cfg := func(ps ...Provider) Config {
		return Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: ps}}}
	}
	identity := Provider{Type: Identity}
	for _, tc := range []struct {
		name     string
		config   Config
		resource string
		value    []byte
		want     Outcome
		by       string // provider and key that read it
		says     string
		kube     string
	}{
		{"written and read with the first provider", cfg(p(Secretbox, "key2", k1), identity), "secrets", seal(t, Secretbox, "key2", k1, etcdKey, object), Decrypts, "secretbox/key2", "decrypts it", ""},
		{"read by a later provider (a rotation)", cfg(p(Secretbox, "key2", k1), p(AESCBC, "key1", k2), identity), "secrets", seal(t, AESCBC, "key1", k2, etcdKey, object), Decrypts, "aescbc/key1", "decrypts it", ""},
		{"read by the second key of a provider", cfg(Provider{Type: Secretbox, Keys: []Key{{Name: "new", Secret: SecretOf(k3)}, {Name: "old", Secret: SecretOf(k1)}}}), "secrets", seal(t, Secretbox, "old", k1, etcdKey, object), Decrypts, "secretbox/old", "decrypts it", ""},
		{"a key name missing", cfg(p(Secretbox, "key2", k1), identity), "secrets", seal(t, Secretbox, "key1", k1, etcdKey, object), DoesNotDecrypt, "",
			"stored under secretbox key key1; the configuration's secretbox provider has no key of that name (it has key2)", errNoSecretboxKey},
		{"the same name with another secret", cfg(p(Secretbox, "key2", k2), identity), "secrets", seal(t, Secretbox, "key2", k1, etcdKey, object), DoesNotDecrypt, "",
			"the secret of secretbox key key2 does not open it", errSecretboxOpen},
		{"a provider dropped", cfg(p(Secretbox, "key2", k1), identity), "secrets", seal(t, AESCBC, "key1", k2, etcdKey, object), DoesNotDecrypt, "",
			"stored with aescbc key key1, and the configuration for secrets has no aescbc provider (it has secretbox (key2), identity)", errNoPrefix},
		{"identity missing", cfg(p(Secretbox, "key2", k1)), "secrets", object, DoesNotDecrypt, "",
			"stored unencrypted, and the configuration for secrets has no identity provider to read it (it has secretbox (key2))", errNoPrefix},
		{"identity present", cfg(p(Secretbox, "key2", k1), identity), "secrets", object, Decrypts, "identity/", "identity reads it", ""},
		{"a resource no rule names is unencrypted", cfg(p(Secretbox, "key2", k1)), "configmaps", object, Decrypts, "identity/", "identity reads it", ""},
		{"encrypted data of a resource no rule names", cfg(p(Secretbox, "key2", k1)), "configmaps", seal(t, Secretbox, "key2", k1, "/registry/configmaps/default/app", object), DoesNotDecrypt, "",
			"the configuration for configmaps has no secretbox provider (it has identity)", errNoPrefix},
		{"a group wildcard", Config{Resources: []Rule{{Resources: []string{"*.apps"}, Providers: []Provider{p(AESGCM, "g", k1)}}}}, "deployments.apps",
			seal(t, AESGCM, "g", k1, "/registry/deployments/default/app", object), DoesNotDecrypt, "", "written under another etcd key", errGCMOpen},
		{"everything", Config{Resources: []Rule{{Resources: []string{"*.*"}, Providers: []Provider{p(AESGCM, "g", k1)}}}}, "deployments.apps",
			seal(t, AESGCM, "g", k1, etcdKey, object), Decrypts, "aesgcm/g", "decrypts it", ""},
		{"KMS", cfg(Provider{Type: KMS, KMS: &KMSPlugin{APIVersion: "v2", Name: "vault", Endpoint: "unix:///kms.sock"}}, identity), "secrets", []byte("k8s:enc:kms:v2:vault:\x0a\x02xy"), CannotTry, "", "only the plugin holds its key", ""},
		{"KMS of a plugin not configured", cfg(p(Secretbox, "key2", k1), identity), "secrets", []byte("k8s:enc:kms:v2:vault:\x0a\x02xy"), DoesNotDecrypt, "",
			"encrypted by the KMS v2 plugin vault, and the configuration for secrets names no such plugin", errNoPrefix},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.config.Read(tc.resource, etcdKey, tc.value)
			by := ""
			if got.Outcome == Decrypts {
				by = string(got.Provider) + "/" + got.Key
			}
			if got.Outcome != tc.want || by != tc.by || !strings.Contains(got.Why, tc.says) || got.APIServer != tc.kube {
				t.Errorf("Read: %s by %q: %s (kube-apiserver: %q)\nwant %s by %q: ...%s... (kube-apiserver: %q)", got.Outcome, by, got.Why, got.APIServer, tc.want, tc.by, tc.says, tc.kube)
			}
		})
	}
}
