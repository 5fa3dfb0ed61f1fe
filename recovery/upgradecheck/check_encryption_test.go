package upgradecheck

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/encryption"
)

// encKey is a 32-byte secret derived from label: public, for tests only.
func encKey(label string) []byte {
	k := sha256.Sum256([]byte("breakglass gate test key " + label))
	return k[:]
}

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// sealSecretbox writes plain as kube-apiserver's secretbox provider does
// with key name and raw key: the prefix, a random nonce, the box.
func sealSecretbox(t *testing.T, name string, key, plain []byte) []byte {
	t.Helper()
	out, err := encryption.Seal(encryption.Secretbox, encryption.Key{Name: name, Secret: encryption.SecretOf(key)}, "", plain)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// legacyConfig is a Talos 1.13 control plane's machine config holding the
// secretbox secret (rendered as secretbox key2, then identity).
func legacyConfig(secret []byte) []byte {
	return []byte("version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  secretboxEncryptionSecret: " + b64(secret) + "\n")
}

// documentConfig is a Talos 1.14 machine config whose
// KubeEtcdEncryptionConfig document holds secretbox key name with secret,
// and identity last when identity is set.
func documentConfig(name string, secret []byte, identity bool) []byte {
	p := "            - secretbox:\n                keys:\n                    - name: " + name + "\n                      secret: " + b64(secret) + "\n"
	if identity {
		p += "            - identity: {}\n"
	}
	return []byte("version: v1alpha1\nmachine:\n  type: controlplane\ncluster: {}\n---\napiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\nconfig:\n    resources:\n        - providers:\n" + p + "          resources:\n            - secrets\n")
}

// kmsConfig is a 1.14 config: KMS v2 plugin vault, then secretbox key2.
func kmsConfig(secret []byte) []byte {
	p := "            - kms:\n                apiVersion: v2\n                name: vault\n                endpoint: unix:///run/kms.sock\n                timeout: 3s\n" +
		"            - secretbox:\n                keys:\n                    - name: key2\n                      secret: " + b64(secret) + "\n"
	return []byte("version: v1alpha1\nmachine:\n  type: controlplane\ncluster: {}\n---\napiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\nconfig:\n    resources:\n        - providers:\n" + p + "          resources:\n            - secrets\n")
}

// storedCluster is three control planes rendering configs, and etcd
// holding values (etcd key -> value), tallied as the gate tallies them.
func storedCluster(configs [][]byte, values map[string][]byte, o *Options) *facts {
	f := &facts{}
	for i, c := range configs {
		f.nodes = append(f.nodes, &nodeFacts{Addr: fmt.Sprintf("10.5.0.%d", 2+i), ControlPlane: true, Config: c, Found: foundByContext})
	}
	f.stored = newStoredTally("/registry", readersOf(f, o))
	for k, v := range values {
		f.stored.add([]byte(k), v)
	}
	return f
}

var protobufObject = []byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret")

// The encryption check catches what a comparison of names cannot: the
// same key name with another secret (a regenerated secrets bundle, another
// cluster's etcd), by decrypting one value of each (resource, provider,
// key) in memory; and names the control plane, resource, provider and key.
func TestJudgeEncryption(t *testing.T) {
	ours, theirs := encKey("ours"), encKey("theirs")
	secrets := func(name string, key []byte) map[string][]byte {
		return map[string][]byte{
			"/registry/secrets/default/s0":     sealSecretbox(t, name, key, protobufObject),
			"/registry/secrets/default/s1":     sealSecretbox(t, name, key, protobufObject),
			"/registry/configmaps/default/cm0": protobufObject,
		}
	}
	three := func(c []byte) [][]byte { return [][]byte{c, c, c} }
	withPlain := secrets("key2", ours)
	withPlain["/registry/secrets/default/old"] = protobufObject
	mixed := secrets("key2", ours)
	mixed["/registry/secrets/default/s2"] = sealSecretbox(t, "key2", theirs, protobufObject)
	kms := secrets("key2", ours)
	kms["/registry/secrets/kube-system/k0"] = []byte("k8s:enc:kms:v2:vault:\x0a\x10opaque")
	for _, tc := range []struct {
		name      string
		configs   [][]byte
		values    map[string][]byte
		candidate []byte
		want      Verdict
		says      []string
	}{
		{"as written", three(legacyConfig(ours)), secrets("key2", ours), nil, Go,
			[]string{"every stored value decrypts with the configuration of each of 3 control plane(s)"}},
		{"same name, another secret (a regenerated bundle)", three(legacyConfig(theirs)), secrets("key2", ours), nil, NoGo,
			[]string{"control plane 10.5.0.2: 2 of 2 secrets value(s) stored as secretbox key key2", "would not decrypt", "output array was not large enough for encryption", "another secret"}},
		{"another cluster's etcd (its values, the same names)", three(legacyConfig(ours)), secrets("key2", theirs), nil, NoGo,
			[]string{"secretbox key key2", "would not decrypt"}},
		{"key renamed (1.14.0-beta.0's generator)", three(documentConfig("key1", ours, false)), secrets("key2", ours), nil, NoGo,
			[]string{"stored as secretbox key key2", "no key of that name", "no matching key was found for the provided Secretbox transformer", "add secretbox key key2 back"}},
		{"identity missing, unencrypted secrets remain", three(documentConfig("key2", ours, false)), withPlain, nil, NoGo,
			[]string{"stored as unencrypted (protobuf)", "no identity provider", "no matching prefix found", "add identity (last)"}},
		{"one value of three under key2 with another secret", three(legacyConfig(ours)), mixed, nil, NoGo,
			[]string{"1 of 3 secrets value(s) stored as secretbox key key2 would not decrypt (the first: /registry/secrets/default/s2)"}},
		{"one control plane disagrees", [][]byte{legacyConfig(ours), legacyConfig(ours), legacyConfig(theirs)}, secrets("key2", ours), nil, NoGo,
			[]string{"control plane 10.5.0.4: 2 of 2 secrets value(s)", "would not decrypt"}},
		{"control planes disagree on a key nothing uses", [][]byte{legacyConfig(ours), legacyConfig(theirs), legacyConfig(ours)}, map[string][]byte{"/registry/configmaps/default/cm0": protobufObject}, nil, Warn,
			[]string{"render different encryption configurations", "10.5.0.2, 10.5.0.4: secrets: secretbox (key2), identity", "10.5.0.3: secrets: secretbox (key2), identity (the same names as another, with other secrets)"}},
		{"the candidate renames the key", three(legacyConfig(ours)), secrets("key2", ours), documentConfig("key1", ours, false), NoGo,
			[]string{"the candidate machine config candidate.yaml: 2 of 2 secrets value(s) stored as secretbox key key2", "no key of that name"}},
		{"the candidate keeps key2", three(legacyConfig(ours)), secrets("key2", ours), documentConfig("key2", ours, true), Go,
			[]string{"and of the candidate machine config"}},
		{"KMS values the plugin reads", three(kmsConfig(ours)), kms, nil, Warn, []string{"KMS v2 plugin vault: only the KMS plugin holds the key"}},
		{"KMS values no provider names", three(legacyConfig(ours)), kms, nil, NoGo, []string{"stored as KMS v2 plugin vault", "names no such plugin"}},
		{"a config kube-apiserver refuses", three(documentConfig("key2", []byte("short"), true)), secrets("key2", ours), nil, NoGo,
			[]string{"its encryption configuration cannot be rendered"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Options{Candidate: tc.candidate, CandidateName: "candidate.yaml"}
			c := judgeEncryption(storedCluster(tc.configs, tc.values, o), o)
			all := c.Summary + "\n" + strings.Join(c.Evidence, "\n") + "\n" + strings.Join(c.Fix, "\n")
			if c.Verdict != tc.want {
				t.Errorf("%s, want %s:\n%s", c.Verdict, tc.want, all)
			}
			for _, s := range tc.says {
				if !strings.Contains(all, s) {
					t.Errorf("does not say %q:\n%s", s, all)
				}
			}
			for _, k := range [][]byte{ours, theirs} {
				if strings.Contains(all, b64(k)) {
					t.Errorf("the key material is printed:\n%s", all)
				}
			}
		})
	}
}

// Through the table: encryption is not checked, never go, when etcd's
// keys were not read (quorum lost).
func TestEncryptionNotCheckedWithoutEtcd(t *testing.T) {
	f := storedCluster([][]byte{legacyConfig(encKey("ours"))}, nil, nil)
	f.quorumLost, f.quorumWhy = true, "no leader"
	c := encryptionCheck.judge(f, &Options{})
	if c.Verdict != NoGo || !c.NotChecked {
		t.Fatalf("%s (%s), want not checked", c.Verdict, c.Summary)
	}
	f = &facts{nodes: []*nodeFacts{{Addr: "10.5.0.2", ControlPlane: true, Config: legacyConfig(encKey("ours"))}}}
	if c := judgeEncryption(f, &Options{}); c.Verdict != NoGo || !c.NotChecked {
		t.Fatalf("etcd's values not read: %s (%s), want not checked", c.Verdict, c.Summary)
	}
}

// On the emulator, through the Talos API and etcd as the gate reads them:
// Secrets sealed under the key name the control planes render (secretbox
// key2) but with another secret, as a regenerated secrets bundle or
// another cluster's etcd leaves them, are a no-go naming the key; sealed
// with the cluster's own secret, a go.
func TestEncryptionOnTheCluster(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{controlPlanes: 1})
	own, err := base64.StdEncoding.DecodeString(testBundle.Secrets.SecretboxEncryptionSecret)
	if err != nil || len(own) != 32 {
		t.Fatalf("the test bundle's secretbox secret: %v", err)
	}
	tc.put(t, "/registry/secrets/default/s0", sealSecretbox(t, "key2", own, protobufObject))
	r := Run(t.Context(), tc.options("1.34"))
	if c := mustCheck(t, r, CheckEncryption); c.Verdict != Go {
		t.Fatalf("sealed with the cluster's own key: %s (%s)\n%s", c.Verdict, c.Summary, strings.Join(c.Evidence, "\n"))
	}
	tc.put(t, "/registry/secrets/default/s1", sealSecretbox(t, "key2", encKey("another bundle"), protobufObject))
	r = Run(t.Context(), tc.options("1.34"))
	c := mustCheck(t, r, CheckEncryption)
	if c.Verdict != NoGo || c.NotChecked || !strings.Contains(c.Summary, "1 of 2 secrets value(s) stored as secretbox key key2") || !strings.Contains(c.Summary, "would not decrypt") || r.Verdict != NoGo {
		t.Fatalf("same name, another secret: %s %s (%s)\n%s", r.Verdict, c.Verdict, c.Summary, strings.Join(c.Evidence, "\n"))
	}
	if strings.Contains(fmt.Sprint(r), testBundle.Secrets.SecretboxEncryptionSecret) {
		t.Error("the report holds the key")
	}
}
