package encryption

import (
	"bytes"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	const etcdKey = "/registry/secrets/default/x"
	for _, tc := range []struct {
		name  string
		value []byte
		want  Stored
		says  string
	}{
		{"protobuf", object, Stored{Form: Protobuf}, "unencrypted (protobuf)"},
		{"json", []byte(` {"apiVersion":"v1","kind":"Secret"}`), Stored{Form: JSON}, "unencrypted (json)"},
		{"cbor", []byte{0xd9, 0xd9, 0xf7, 0xa1}, Stored{Form: CBOR}, "unencrypted (cbor)"},
		{"secretbox", seal(t, Secretbox, "key2", testKey("a"), etcdKey, object), Stored{Form: Encrypted, Provider: Secretbox, Version: "v1", Key: "key2"}, "secretbox key key2"},
		{"aescbc", seal(t, AESCBC, "key1", testKey("a"), etcdKey, object), Stored{Form: Encrypted, Provider: AESCBC, Version: "v1", Key: "key1"}, "aescbc key key1"},
		{"aesgcm", seal(t, AESGCM, "2026-rotation", testKey("a"), etcdKey, object), Stored{Form: Encrypted, Provider: AESGCM, Version: "v1", Key: "2026-rotation"}, "aesgcm key 2026-rotation"},
		{"kms v2", []byte("k8s:enc:kms:v2:vault:\n\x10ciphertext"), Stored{Form: KMSForm, Provider: KMS, Version: "v2", Key: "vault"}, "KMS v2 plugin vault"},
		{"kms v1", []byte("k8s:enc:kms:v1:aws-kms:\x00\x20dek"), Stored{Form: KMSForm, Provider: KMS, Version: "v1", Key: "aws-kms"}, "KMS v1 plugin aws-kms"},
		{"a provider it does not know", []byte("k8s:enc:rot13:v1:k:xyz"), Stored{Form: Encrypted, Provider: "rot13", Version: "v1", Key: "k"}, "rot13 key k"},
		{"prefix cut before the key", []byte("k8s:enc:secretbox:v1:"), Stored{Form: Unknown}, "not a value kube-apiserver wrote"},
		{"no key name end", []byte("k8s:enc:secretbox:v1:" + strings.Repeat("k", 300) + ":x"), Stored{Form: Unknown}, "not a value kube-apiserver wrote"},
		{"binary in the key name", []byte("k8s:enc:aescbc:v1:k\x00y:x"), Stored{Form: Unknown}, "not a value kube-apiserver wrote"},
		{"upper case provider", []byte("k8s:enc:AESCBC:v1:k:x"), Stored{Form: Unknown}, "not a value kube-apiserver wrote"},
		{"empty", nil, Stored{Form: Unknown}, "not a value kube-apiserver wrote"},
		{"garbage", []byte("\x00\x01garbage"), Stored{Form: Unknown}, "not a value kube-apiserver wrote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.value)
			if got != tc.want || got.String() != tc.says {
				t.Errorf("Classify = %+v (%s), want %+v (%s)", got, got, tc.want, tc.says)
			}
		})
	}
}

// FuzzClassify: whatever the bytes, Classify does not panic, and what it
// says holds of them.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"k8s\x00\n\x02v1", `{"a":1}`, "\xd9\xd9\xf7", "k8s:enc:secretbox:v1:key2:\x01\x02", "k8s:enc:kms:v2:vault:\x0a",
		"k8s:enc:aescbc:v1::x", "k8s:enc:", "k8s:enc:a:b:c", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		s := Classify(value)
		switch s.Form {
		case Protobuf, JSON, CBOR, Unknown:
			if s.Provider != "" || s.Version != "" || s.Key != "" || s.Prefix() != "" {
				t.Fatalf("%q: %+v names an encryption", value, s)
			}
		case Encrypted, KMSForm:
			if !bytes.HasPrefix(value, []byte(s.Prefix())) {
				t.Fatalf("%q: its prefix %q is not where it starts", value, s.Prefix())
			}
			if s.Key == "" || strings.ContainsAny(s.Key, ": \x00") || len(s.Key) > maxField || (s.Form == KMSForm) != (s.Provider == KMS) {
				t.Fatalf("%q: %+v", value, s)
			}
		default:
			t.Fatalf("%q: form %q", value, s.Form)
		}
		if s.Unencrypted() == bytes.HasPrefix(value, []byte(EncryptedPrefix)) && s.Unencrypted() {
			t.Fatalf("%q: unencrypted yet k8s:enc:", value)
		}
		if bytes.HasPrefix(value, protobufMagic) && s.Form != Protobuf {
			t.Fatalf("%q: protobuf's magic, classified %s", value, s.Form)
		}
	})
}
