package encryption

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var (
	sbKey  = SecretOf(testKey("secretbox"))
	cbcKey = SecretOf(testKey("aescbc"))
)

// Talos's own expected file for its legacy rendering (the layout of
// internal/app/machined/pkg/controllers/k8s/etcd_encryption_config_test.go,
// v1.14.0-rc.1), with our keys.
var legacyBoth = `apiVersion: v1
kind: EncryptionConfig
resources:
- providers:
  - secretbox:
      keys:
      - name: key2
        secret: ` + sbKey.Reveal() + `
  - aescbc:
      keys:
      - name: key1
        secret: ` + cbcKey.Reveal() + `
  - identity: {}
  resources:
  - secrets
`

func TestLegacyFile(t *testing.T) {
	for _, tc := range []struct {
		name              string
		secretbox, aescbc Secret
		want              string
		describe          string
	}{
		{"both", sbKey, cbcKey, legacyBoth, "secrets: secretbox (key2), aescbc (key1), identity"},
		{"secretbox only", sbKey, Secret{}, "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- providers:\n  - secretbox:\n      keys:\n      - name: key2\n        secret: " + sbKey.Reveal() + "\n  - identity: {}\n  resources:\n  - secrets\n", "secrets: secretbox (key2), identity"},
		{"aescbc only", Secret{}, cbcKey, "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: " + cbcKey.Reveal() + "\n  - identity: {}\n  resources:\n  - secrets\n", "secrets: aescbc (key1), identity"},
		{"neither", Secret{}, Secret{}, "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- providers:\n  - identity: {}\n  resources:\n  - secrets\n", "secrets: identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Legacy(tc.secretbox.Reveal(), tc.aescbc.Reveal())
			f, err := c.File()
			if err != nil {
				t.Fatal(err)
			}
			if string(f) != tc.want {
				t.Errorf("file:\n%s\nwant:\n%s", f.reveal(), tc.want)
			}
			if c.String() != tc.describe {
				t.Errorf("String() = %q, want %q", c.String(), tc.describe)
			}
			back, err := Decode(f)
			if err != nil {
				t.Fatalf("Decode(File()): %v", err)
			}
			if back.String() != c.String() {
				t.Errorf("decoded back as %q", back)
			}
		})
	}
}

func (f File) reveal() string { return string(f) }

func TestDecode(t *testing.T) {
	good := func(header string) string {
		return header + `resources:
  - resources: [secrets, configmaps]
    providers:
      - aesgcm:
          keys:
            - name: gcm1
              secret: ` + SecretOf(testKey("gcm")[:16]).Reveal() + `
      - aescbc:
          keys: [{name: key1, secret: "` + cbcKey.Reveal() + `"}]
      - secretbox:
          keys: [{name: key2, secret: "` + sbKey.Reveal() + `"}]
      - kms:
          apiVersion: v2
          name: vault
          endpoint: unix:///var/run/kms.sock
          timeout: 3s
      - identity: {}
`
	}
	for _, tc := range []struct {
		name, text string
		want       string // the configuration's String, or the error's words
		fails      bool
	}{
		{"the API's header", good("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"),
			"secrets,configmaps: aesgcm (gcm1), aescbc (key1), secretbox (key2), kms v2 plugin vault, identity", false},
		{"Talos's header", good("apiVersion: v1\nkind: EncryptionConfig\n"),
			"secrets,configmaps: aesgcm (gcm1), aescbc (key1), secretbox (key2), kms v2 plugin vault, identity", false},
		{"another kind", good("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfig\n"), `kind "EncryptionConfig"`, true},
		{"no header", good(""), `apiVersion "" kind ""`, true},
		{"unknown field", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - secretbox:\n      keys: [{name: k, secret: " + sbKey.Reveal() + ", size: 32}]\n", "field size not found", true},
		{"duplicate key", "apiVersion: v1\nkind: EncryptionConfig\nkind: EncryptionConfig\nresources: []\n", "already defined", true},
		{"two providers in one element", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - {identity: {}, secretbox: {keys: [{name: k, secret: " + sbKey.Reveal() + "}]}}\n", "more than one provider", true},
		{"an empty element", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - {}\n", "does not contain any of the expected providers", true},
		{"no resources", "apiVersion: v1\nkind: EncryptionConfig\nresources: []\n", "at least one resources is required", true},
		{"no keys", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: []}\n", "at least one key is required", true},
		{"not base64", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: k, secret: 'not base64!'}]}\n", "secrets must be base64 encoded", true},
		{"secretbox key of 16 bytes", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: k, secret: " + SecretOf(testKey("x")[:16]).Reveal() + "}]}\n", "16 bytes, expected one of [32]", true},
		{"unnamed key", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: '', secret: " + sbKey.Reveal() + "}]}\n", "name: required", true},
		{"kms v2 name with a colon", "apiVersion: v1\nkind: EncryptionConfig\nresources:\n- resources: [secrets]\n  providers:\n  - kms: {apiVersion: v2, name: 'a:b', endpoint: unix:///s}\n", "must not contain ':'", true},
		{"two documents", legacyBoth + "---\n" + legacyBoth, "more than one YAML document", true},
		{"empty", "", "empty", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode([]byte(tc.text))
			if tc.fails {
				if err == nil {
					t.Fatalf("decoded %q, want an error with %q", c, tc.want)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q, want it to say %q", err, tc.want)
				}
				for _, s := range []Secret{sbKey, cbcKey} {
					if strings.Contains(err.Error(), s.Reveal()) {
						t.Errorf("the error shows a secret: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.String() != tc.want {
				t.Errorf("decoded as %q, want %q", c, tc.want)
			}
		})
	}
}

// TestRedacted: no way of printing or marshalling a configuration, a
// provider, a key, a secret or a file shows the key.
func TestRedacted(t *testing.T) {
	c := Legacy(sbKey.Reveal(), cbcKey.Reveal())
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	p := c.Resources[0].Providers[0]
	values := map[string]any{"config": c, "rule": c.Resources[0], "provider": p, "key": p.Keys[0], "secret": p.Keys[0].Secret,
		"file": f, "pointer": &c, "slice": c.Resources}
	for name, v := range values {
		var outs []string
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
		for _, marshal := range []func(any) ([]byte, error){json.Marshal, yaml.Marshal} {
			b, err := marshal(v)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			outs = append(outs, string(b))
		}
		for _, out := range outs {
			for _, s := range []Secret{sbKey, cbcKey} {
				for _, form := range []string{s.Reveal(), fmt.Sprintf("%x", s.Reveal()), fmt.Sprintf("%X", s.Reveal())} {
					if strings.Contains(out, form) {
						t.Errorf("%s printed its key: %s", name, out)
					}
				}
			}
		}
	}
	if got := fmt.Sprint(p.Keys[0]); !strings.Contains(got, "key2") || !strings.Contains(got, redacted) {
		t.Errorf("a key prints as %q: want its name and %s", got, redacted)
	}
}
