package encryption

import (
	"bytes"
	"fmt"
)

// Form is what a value stored in etcd is.
type Form string

// The forms. kube-apiserver stores built-in objects as protobuf (the magic
// k8s\x00), custom resources as JSON (or CBOR, the self-described tag
// d9d9f7, with the CBOR storage feature), and an encrypted value behind the
// prefix k8s:enc:PROVIDER:VERSION:NAME: (apiserver
// pkg/server/options/encryptionconfig/config.go).
const (
	Protobuf  Form = "protobuf"
	JSON      Form = "json"
	CBOR      Form = "cbor"
	Encrypted Form = "encrypted" // aescbc, aesgcm, secretbox (or a provider this package does not know)
	KMSForm   Form = "kms"       // envelope encryption: the key is in the plugin
	Unknown   Form = "unknown"   // none of these, or a k8s:enc: prefix cut short
)

// Stored is what Classify found in a value.
type Stored struct {
	Form Form
	// Provider, Version and Key name the encryption of an Encrypted or
	// KMSForm value: for KMS, Key is the plugin's name.
	Provider ProviderType
	Version  string
	Key      string
}

// EncryptedPrefix begins every value a provider other than identity wrote.
const EncryptedPrefix = "k8s:enc:"

var (
	protobufMagic = []byte("k8s\x00")
	cborMagic     = []byte{0xd9, 0xd9, 0xf7}
)

// maxField bounds a provider, version or key name read from a prefix: past
// it, the bytes are ciphertext, not a name.
const maxField = 253

// Classify tells what a stored value is, from its first bytes only; it
// never decrypts. A key name is read up to the first ':' after the version,
// as nothing marks where a name that contains ':' ends (Trial matches the
// configured names by prefix, as kube-apiserver does).
func Classify(value []byte) Stored {
	switch {
	case bytes.HasPrefix(value, []byte(EncryptedPrefix)):
		return classifyEncrypted(value[len(EncryptedPrefix):])
	case bytes.HasPrefix(value, protobufMagic):
		return Stored{Form: Protobuf}
	case bytes.HasPrefix(value, cborMagic):
		return Stored{Form: CBOR}
	case bytes.HasPrefix(bytes.TrimLeft(value, " \t\r\n"), []byte("{")):
		return Stored{Form: JSON}
	}
	return Stored{Form: Unknown}
}

func classifyEncrypted(rest []byte) Stored {
	provider, rest, ok := field(rest)
	if !ok || !isToken(provider) {
		return Stored{Form: Unknown}
	}
	version, rest, ok := field(rest)
	if !ok || !isToken(version) {
		return Stored{Form: Unknown}
	}
	key, _, ok := field(rest)
	if !ok || !printable(key) {
		return Stored{Form: Unknown}
	}
	s := Stored{Form: Encrypted, Provider: ProviderType(provider), Version: version, Key: key}
	if s.Provider == KMS {
		s.Form = KMSForm
	}
	return s
}

// field is the text before the next ':' within maxField bytes, and what
// follows that ':'.
func field(b []byte) (string, []byte, bool) {
	i := bytes.IndexByte(b[:min(len(b), maxField+1)], ':')
	if i <= 0 {
		return "", nil, false
	}
	return string(b[:i]), b[i+1:], true
}

// isToken: lower-case letters and digits, as provider and version names are.
func isToken(s string) bool {
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// printable: visible ASCII, what a key name read back can be shown as.
func printable(s string) bool {
	for _, c := range []byte(s) {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// Prefix is the prefix the value was stored under ("" when unencrypted).
func (s Stored) Prefix() string {
	if s.Form != Encrypted && s.Form != KMSForm {
		return ""
	}
	return fmt.Sprintf("%s%s:%s:%s:", EncryptedPrefix, s.Provider, s.Version, s.Key)
}

// Unencrypted tells a value identity reads.
func (s Stored) Unencrypted() bool { return s.Form == Protobuf || s.Form == JSON || s.Form == CBOR }

// String says it for an operator: "secretbox key key2", "KMS v2 plugin
// vault", "unencrypted (protobuf)".
func (s Stored) String() string {
	switch {
	case s.Unencrypted():
		return fmt.Sprintf("unencrypted (%s)", s.Form)
	case s.Form == KMSForm:
		return fmt.Sprintf("KMS %s plugin %s", s.Version, s.Key)
	case s.Form == Encrypted:
		return fmt.Sprintf("%s key %s", s.Provider, s.Key)
	}
	return "not a value kube-apiserver wrote"
}
