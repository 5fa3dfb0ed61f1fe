package encryption

import (
	"slices"
	"strings"
)

// Cause is why stored data does not decrypt, as kube-apiserver's words
// tell it.
type Cause string

// The causes.
const (
	// CauseKeyMissing: the stored value's provider is configured, but no
	// key of the name it was stored under.
	CauseKeyMissing Cause = "key-missing"
	// CauseWrongSecret: a key of that name, with another secret.
	CauseWrongSecret Cause = "wrong-secret"
	// CauseNoProvider: no provider reads the stored prefix: a provider was
	// dropped, or unencrypted data meets a configuration without identity
	// (kube-apiserver says the same of both; etcd tells them apart).
	CauseNoProvider Cause = "no-provider"
	// CauseUnreadable: a stored value does not decrypt; its cause is said
	// by another line.
	CauseUnreadable Cause = "unreadable"
)

// Wording is one thing kube-apiserver says when stored data does not
// decrypt.
type Wording struct {
	Text     string       // as its log says it
	Cause    Cause        // what it means
	Provider ProviderType // the provider that says it ("" when any)
	Source   string       // where k8s.io/apiserver says it
	// Versions are the kube-apiserver versions it was recorded from
	// (testdata/recorded/, lab/recordencryption).
	Versions []string
}

// Wordings are kube-apiserver's words for stored data that does not
// decrypt, the most telling first: a line that holds several is told by
// the first.
var Wordings = []Wording{
	{Text: errNoSecretboxKey, Cause: CauseKeyMissing, Provider: Secretbox, Source: "pkg/server/options/encryptionconfig/config.go (secretboxPrefixTransformer)",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	{Text: errNoAESKey, Cause: CauseKeyMissing, Source: "pkg/server/options/encryptionconfig/config.go (aesPrefixTransformer)",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	{Text: errSecretboxOpen, Cause: CauseWrongSecret, Provider: Secretbox, Source: "pkg/storage/value/encrypt/secretbox/secretbox.go (secretbox.Open failed)",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	{Text: errPKCS7Padding, Cause: CauseWrongSecret, Provider: AESCBC, Source: "pkg/storage/value/encrypt/aes/aes.go (cbc)",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	// a wrong AES-CBC key whose last byte is 0 or too large: not recorded
	// (it depends on the key and the value)
	{Text: errPKCS7Data, Cause: CauseWrongSecret, Provider: AESCBC, Source: "pkg/storage/value/encrypt/aes/aes.go (cbc)"},
	{Text: errGCMOpen, Cause: CauseWrongSecret, Provider: AESGCM, Source: "crypto/cipher (AES-GCM Open), through pkg/storage/value/encrypt/aes/aes.go",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	{Text: errNoPrefix, Cause: CauseNoProvider, Source: "pkg/server/options/encryptionconfig/config.go (the resource's prefix transformers)",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	{Text: "unable to transform key", Cause: CauseUnreadable, Source: "pkg/storage/etcd3/store.go",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	{Text: "failed to decrypt data", Cause: CauseUnreadable, Source: "pkg/storage/value/transformer.go (logTransformErr)",
		Versions: []string{"v1.32.13", "v1.33.13", "v1.34.4", "v1.35.4", "v1.36.3"}},
	// reported beside "no matching provider" (issue 37's sources), never
	// recorded here: no read path of k8s.io/apiserver v0.34.4 decodes
	// base64; a KMS plugin's own error (Go's encoding/base64)
	{Text: "illegal base64 data at input byte", Cause: CauseUnreadable, Provider: KMS, Source: "a KMS plugin (encoding/base64), not k8s.io/apiserver"},
}

// MatchLog is the first wording a kube-apiserver log line holds.
func MatchLog(line string) (Wording, bool) {
	for _, w := range Wordings {
		if strings.Contains(line, w.Text) {
			return w, true
		}
	}
	return Wording{}, false
}

// Recorded tells whether the wording was recorded from version.
func (w Wording) Recorded(version string) bool { return slices.Contains(w.Versions, version) }

// Cause is what the trial's kube-apiserver error tells ("" when the value
// reads, or when kube-apiserver's words for it are unknown).
func (t Trial) Cause() Cause {
	if t.Outcome != DoesNotDecrypt || t.APIServer == "" {
		return ""
	}
	if w, ok := MatchLog(t.APIServer); ok {
		return w.Cause
	}
	return ""
}
