package encryption

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/nacl/secretbox"
)

// Outcome is what a trial decryption found.
type Outcome string

// The outcomes.
const (
	Decrypts       Outcome = "decrypts"
	DoesNotDecrypt Outcome = "does not decrypt"
	CannotTry      Outcome = "cannot try" // a KMS plugin holds the key, or the key given is unusable
)

// Trial is the result of trying to read one stored value.
type Trial struct {
	Outcome Outcome
	Stored  Stored
	// Provider and Key read it (Decrypts).
	Provider ProviderType
	Key      string
	// Why says it in an operator's words.
	Why string
	// APIServer is kube-apiserver's own error for the value, the words its
	// log shows ("" when it reads it, or when its words are unknown).
	APIServer string
}

// kube-apiserver's errors (k8s.io/apiserver pkg/storage/value/encrypt/aes,
// secretbox, and pkg/server/options/encryptionconfig), the same in v0.32.13
// and v0.34.4.
const (
	errShort          = "the stored data was shorter than the required size"
	errBlockSize      = "the stored data is not a multiple of the block size"
	errPKCS7Data      = "invalid PKCS7 data (empty or not padded)"
	errPKCS7Padding   = "invalid padding on input"
	errSecretboxOpen  = "output array was not large enough for encryption"
	errGCMOpen        = "cipher: message authentication failed"
	errNoPrefix       = "no matching prefix found"
	errNoAESKey       = "no matching key was found for the provided AES transformer"
	errNoSecretboxKey = "no matching key was found for the provided Secretbox transformer"
	errIdentity       = "identity transformer tried to read encrypted data"
)

// TryKey tries the key k of a provider of type t on value, stored in etcd
// under etcdKey (AES-GCM authenticates the value with it; aescbc and
// secretbox do not), in memory, as kube-apiserver's transformer would. A
// value that decrypts must also be an object (protobuf, JSON, CBOR): a wrong
// AES-CBC key passes its padding check about once in 256 tries.
func TryKey(t ProviderType, k Key, etcdKey string, value []byte) Trial {
	tr := Trial{Stored: Classify(value)}
	st := tr.Stored
	switch {
	case st.Form == KMSForm:
		return tr.kms()
	case t == KMS:
		return tr.cannot("a KMS provider's key is in its plugin, which breakglass does not call")
	case t == Identity:
		if st.Unencrypted() {
			return tr.reads(Identity, "")
		}
		if st.Form == Encrypted {
			return tr.not(fmt.Sprintf("it is encrypted (%s): identity reads only unencrypted values", st), errIdentity)
		}
		return tr.not("it is not an object kube-apiserver wrote (neither protobuf, JSON, CBOR nor k8s:enc:)", "")
	case t != AESCBC && t != AESGCM && t != Secretbox:
		return tr.cannot(fmt.Sprintf("unknown provider %q", t))
	}
	prefix := EncryptedPrefix + string(t) + ":v1:"
	if !bytes.HasPrefix(value, []byte(prefix)) {
		return tr.not(fmt.Sprintf("it is %s, not written by %s", st, t), errNoPrefix)
	}
	rest := value[len(prefix):]
	if !bytes.HasPrefix(rest, []byte(k.Name+":")) {
		return tr.not(fmt.Sprintf("it is stored under %s key %s, not key %s", t, st.Key, k.Name), noKeyError(t))
	}
	return tr.open(t, k, etcdKey, rest[len(k.Name)+1:])
}

// open decrypts data (after the key's prefix) as kube-apiserver does.
func (tr Trial) open(t ProviderType, k Key, etcdKey string, data []byte) Trial {
	raw, err := k.Secret.bytes()
	if err != nil {
		return tr.cannot(fmt.Sprintf("the secret of %s key %s is not base64 (kube-apiserver refuses to start with it)", t, k.Name))
	}
	var plain []byte
	switch t {
	case Secretbox:
		plain, err = openSecretbox(raw, data)
	case AESCBC:
		plain, err = openCBC(raw, data)
	case AESGCM:
		plain, err = openGCM(raw, data, []byte(etcdKey))
	}
	var unusable unusableKey
	switch {
	case errors.As(err, &unusable):
		return tr.cannot(fmt.Sprintf("the secret of %s key %s: %s (kube-apiserver refuses to start with it)", t, k.Name, unusable))
	case err != nil:
		return tr.not(wrongSecret(t, k.Name, err.Error()), err.Error())
	case !Classify(plain).Unencrypted():
		return tr.not(fmt.Sprintf("%s key %s decrypts it to bytes that are not an object: it was encrypted with another secret under the same name (AES-CBC cannot tell a wrong key; kube-apiserver then fails to decode it)", t, k.Name), "")
	}
	clear(plain)
	return tr.reads(t, k.Name)
}

// wrongSecret says why a key of the stored name did not open the value.
func wrongSecret(t ProviderType, name, apiErr string) string {
	switch apiErr {
	case errShort, errBlockSize:
		return fmt.Sprintf("the stored value is cut short or damaged for %s (%s)", t, apiErr)
	case errGCMOpen:
		return fmt.Sprintf("the secret of %s key %s does not open it: it was encrypted with another secret under the same name, or written under another etcd key (AES-GCM binds a value to its key)", t, name)
	}
	return fmt.Sprintf("the secret of %s key %s does not open it: it was encrypted with another secret under the same name", t, name)
}

func noKeyError(t ProviderType) string {
	if t == Secretbox {
		return errNoSecretboxKey
	}
	return errNoAESKey
}

// unusableKey is a key kube-apiserver would refuse at start.
type unusableKey string

func (u unusableKey) Error() string { return string(u) }

func openSecretbox(key, data []byte) ([]byte, error) {
	if len(key) != 32 {
		return nil, unusableKey(fmt.Sprintf("expected key size 32 for secretbox provider, got %d", len(key)))
	}
	const nonceSize = 24
	if len(data) < secretbox.Overhead+nonceSize {
		return nil, errors.New(errShort)
	}
	var k [32]byte
	var nonce [nonceSize]byte
	copy(k[:], key)
	copy(nonce[:], data[:nonceSize])
	out, ok := secretbox.Open(nil, data[nonceSize:], &nonce, &k)
	clear(k[:])
	if !ok {
		return nil, errors.New(errSecretboxOpen)
	}
	return out, nil
}

func openCBC(key, data []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, unusableKey(err.Error())
	}
	if len(data) < aes.BlockSize {
		return nil, errors.New(errShort)
	}
	iv, data := data[:aes.BlockSize], data[aes.BlockSize:]
	if len(data)%aes.BlockSize != 0 {
		return nil, errors.New(errBlockSize)
	}
	out := make([]byte, len(data))
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(out, data)
	if len(out) == 0 {
		return nil, errors.New(errPKCS7Data)
	}
	pad := int(out[len(out)-1])
	if pad == 0 || pad > len(out) {
		return nil, errors.New(errPKCS7Data)
	}
	for _, b := range out[len(out)-pad:] {
		if int(b) != pad {
			return nil, errors.New(errPKCS7Padding)
		}
	}
	return out[:len(out)-pad], nil
}

func openGCM(key, data, aad []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, unusableKey(err.Error())
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, unusableKey(err.Error())
	}
	n := aead.NonceSize()
	if len(data) < n {
		return nil, errors.New(errShort)
	}
	return aead.Open(nil, data[:n], data[n:], aad)
}

// Read is how kube-apiserver, with this configuration, would read value,
// stored under etcdKey for resource ("secrets", or "RESOURCE.GROUP"): the
// providers of the rule for that resource (identity alone when no rule
// names it) tried in order, each where its prefix matches, a key where its
// name matches; identity reads whatever is not encrypted. The Trial names
// the provider and key that read it, or says why none did.
func (c Config) Read(resource, etcdKey string, value []byte) Trial {
	tr := Trial{Stored: Classify(value)}
	providers, named := c.providersFor(resource)
	if !named {
		providers = []Provider{{Type: Identity}}
	}
	var failed []Trial
	for _, p := range providers {
		switch p.Type {
		case Identity:
			if tr.Stored.Unencrypted() {
				return tr.reads(Identity, "")
			}
		case KMS:
			if p.KMS != nil && bytes.HasPrefix(value, []byte(EncryptedPrefix+"kms:"+p.KMS.APIVersion+":"+p.KMS.Name+":")) {
				return tr.kms()
			}
		default:
			if !bytes.HasPrefix(value, []byte(EncryptedPrefix+string(p.Type)+":v1:")) {
				continue
			}
			t := p.tryKeys(etcdKey, value)
			if t.Outcome != DoesNotDecrypt {
				return t
			}
			failed = append(failed, t)
		}
	}
	if len(failed) > 0 {
		return failed[0]
	}
	st := tr.Stored
	switch {
	case st.Unencrypted():
		return tr.not(fmt.Sprintf("it is stored unencrypted, and the configuration for %s has no identity provider to read it (it has %s)", resource, list(providers)), errNoPrefix)
	case st.Form == KMSForm:
		return tr.not(fmt.Sprintf("it is encrypted by the KMS %s plugin %s, and the configuration for %s names no such plugin (it has %s)", st.Version, st.Key, resource, list(providers)), errNoPrefix)
	case st.Form == Encrypted:
		return tr.not(fmt.Sprintf("it is stored with %s, and the configuration for %s has no %s provider (it has %s)", st, resource, st.Provider, list(providers)), errNoPrefix)
	}
	return tr.not("it is not an object kube-apiserver wrote (neither protobuf, JSON, CBOR nor k8s:enc:)", "")
}

// tryKeys tries the provider's keys whose names the value carries.
func (p Provider) tryKeys(etcdKey string, value []byte) Trial {
	var failed *Trial
	for _, k := range p.Keys {
		t := TryKey(p.Type, k, etcdKey, value)
		switch {
		case t.Outcome != DoesNotDecrypt:
			return t
		case t.APIServer != noKeyError(p.Type) && failed == nil: // its name matched, its secret did not
			failed = &t
		}
	}
	if failed != nil {
		return *failed
	}
	tr := Trial{Stored: Classify(value)}
	return tr.not(fmt.Sprintf("it is stored under %s key %s; the configuration's %s provider has no key of that name (it has %s)", p.Type, tr.Stored.Key, p.Type, strings.Join(p.KeyNames(), ", ")), noKeyError(p.Type))
}

// providersFor finds the rule for resource as kube-apiserver does: the
// resource itself, then RESOURCE's group with "*.GROUP", then "*.*".
func (c Config) providersFor(resource string) ([]Provider, bool) {
	res, group, _ := strings.Cut(resource, ".")
	for _, want := range []string{res + "." + group, "*." + group, "*.*"} {
		for _, r := range c.Resources {
			for _, name := range r.Resources {
				if n := normalize(name); n == want {
					return r.Providers, true
				}
			}
		}
	}
	return nil, false
}

// Names tells whether a rule of the configuration names resource
// ("secrets", or "RESOURCE.GROUP"), itself or by a wildcard: otherwise
// kube-apiserver reads it with identity alone.
func (c Config) Names(resource string) bool {
	_, named := c.providersFor(resource)
	return named
}

// normalize writes a configured resource as RESOURCE.GROUP ("secrets" is
// "secrets.", the core group).
func normalize(name string) string {
	if strings.Contains(name, ".") {
		return name
	}
	return name + "."
}

func list(ps []Provider) string {
	if len(ps) == 0 {
		return "none"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, ", ")
}

func (tr Trial) reads(t ProviderType, key string) Trial {
	tr.Outcome, tr.Provider, tr.Key = Decrypts, t, key
	if key == "" {
		tr.Why = fmt.Sprintf("%s reads it", t)
	} else {
		tr.Why = fmt.Sprintf("%s key %s decrypts it", t, key)
	}
	return tr
}

func (tr Trial) not(why, apiErr string) Trial {
	tr.Outcome, tr.Why, tr.APIServer = DoesNotDecrypt, why, apiErr
	return tr
}

func (tr Trial) cannot(why string) Trial {
	tr.Outcome, tr.Why = CannotTry, why
	return tr
}

func (tr Trial) kms() Trial {
	return tr.cannot(fmt.Sprintf("it is encrypted by the KMS %s plugin %s: only the plugin holds its key, and breakglass does not call it", tr.Stored.Version, tr.Stored.Key))
}
