// Package encryption reads kube-apiserver's encryption at rest the way
// kube-apiserver and Talos do, without any I/O: an EncryptionConfiguration
// decoded strictly, the one a Talos control plane renders from its machine
// config, what a value stored in etcd is (unencrypted, or which provider and
// key, or which KMS plugin), and whether a given key reads it (a trial
// decryption in memory). docs/encryption.md has the sources it follows.
//
// Key material never leaves a Secret or a File except through Reveal and
// the file's bytes: both redact themselves when printed (fmt, JSON).
//
// It lives under internal/, not under etcd/ or talos/: the Talos side (what
// a node renders), the etcd side (what is stored) and the lab all need the
// same types, and talos and etcd never import each other. It imports
// nothing of the project.
package encryption

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// ProviderType names a provider as the configuration and the stored
// prefix do.
type ProviderType string

// The providers kube-apiserver knows.
const (
	AESCBC    ProviderType = "aescbc"
	AESGCM    ProviderType = "aesgcm"
	Secretbox ProviderType = "secretbox"
	Identity  ProviderType = "identity"
	KMS       ProviderType = "kms"
)

// Config is an EncryptionConfiguration (apiserver.config.k8s.io/v1).
type Config struct {
	Resources []Rule
}

// Rule is one entry of resources: which resources, read and written with
// which providers (the first writes; all read).
type Rule struct {
	Resources []string
	Providers []Provider
}

// Provider is one provider: keys for aescbc, aesgcm and secretbox, a plugin
// for kms, nothing for identity.
type Provider struct {
	Type ProviderType
	Keys []Key
	KMS  *KMSPlugin
}

// Key is a named key of a provider.
type Key struct {
	Name   string
	Secret Secret
}

// KMSPlugin is a kms provider's plugin. It holds no key material.
type KMSPlugin struct {
	APIVersion string // v1 or v2
	Name       string
	Endpoint   string
	CacheSize  *int32
	Timeout    *time.Duration
}

// Secret is a key's secret as the configuration holds it (base64). It
// prints as [redacted] with every fmt verb and in JSON.
type Secret struct{ b64 string }

// NewSecret is the secret of configuration text b64.
func NewSecret(b64 string) Secret { return Secret{b64: b64} }

// SecretOf is the configuration text of raw key bytes.
func SecretOf(raw []byte) Secret { return Secret{b64: base64.StdEncoding.EncodeToString(raw)} }

// Reveal is the configuration text: key material. Write it only where the
// key belongs (a machine config, encryptionconfig.yaml), never to a log.
func (s Secret) Reveal() string { return s.b64 }

// IsZero tells an unset secret.
func (s Secret) IsZero() bool { return s.b64 == "" }

// Equal tells whether two secrets are the same key.
func (s Secret) Equal(o Secret) bool { return s.b64 == o.b64 }

// bytes decodes the key, as kube-apiserver does (standard base64).
func (s Secret) bytes() ([]byte, error) { return base64.StdEncoding.DecodeString(s.b64) }

// redacted is what key material prints as.
const redacted = "[redacted]"

// String, GoString, Format, MarshalJSON, MarshalText and MarshalYAML keep
// the key out of every print: a Config, Rule, Provider or Key printed with
// any fmt verb, or marshalled, shows [redacted] where the secret is.
func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return redacted }
func (Secret) Format(f fmt.State, _ rune)   { _, _ = io.WriteString(f, redacted) }
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (Secret) MarshalYAML() (any, error)    { return redacted, nil }
func (File) String() string                 { return redacted }
func (File) GoString() string               { return redacted }
func (File) Format(f fmt.State, _ rune)     { _, _ = io.WriteString(f, redacted) }
func (File) MarshalJSON() ([]byte, error)   { return []byte(`"` + redacted + `"`), nil }
func (File) MarshalText() ([]byte, error)   { return []byte(redacted), nil }
func (File) MarshalYAML() (any, error)      { return redacted, nil }

// keyed tells a provider that holds keys.
func (p Provider) keyed() bool { return p.Type == AESCBC || p.Type == AESGCM || p.Type == Secretbox }

// KeyNames are the names of the provider's keys, in order.
func (p Provider) KeyNames() []string {
	out := make([]string, len(p.Keys))
	for i, k := range p.Keys {
		out[i] = k.Name
	}
	return out
}

// WritesWith tells whether kube-apiserver writes some resource with the
// provider's key of that name: the first key of a rule's first provider.
func (c Config) WritesWith(provider ProviderType, key string) bool {
	for _, r := range c.Resources {
		if len(r.Providers) > 0 && r.Providers[0].Type == provider && len(r.Providers[0].Keys) > 0 && r.Providers[0].Keys[0].Name == key {
			return true
		}
	}
	return false
}

// SecondOfName is the key RemoveKey takes out of the rule for resource
// where that rule holds keys of that name in two providers of type t (a
// read key added beside a regenerated one of the same name: AddReadKey):
// the last of them. ok is false where the rule does not hold the name twice.
func (c Config) SecondOfName(resource string, t ProviderType, name string) (k Key, ok bool) {
	ri := slices.IndexFunc(c.Resources, func(r Rule) bool { return slices.Contains(r.Resources, resource) })
	if ri < 0 {
		return Key{}, false
	}
	var found []Key
	for _, p := range c.Resources[ri].Providers {
		if p.Type != t {
			continue
		}
		for _, have := range p.Keys {
			if have.Name == name {
				found = append(found, have)
			}
		}
	}
	if len(found) > 1 {
		return found[len(found)-1], true
	}
	return Key{}, false
}

// WritesWithSecret tells whether kube-apiserver writes some resource with a
// key of that name holding that secret.
func (c Config) WritesWithSecret(provider ProviderType, k Key) bool {
	for _, r := range c.Resources {
		if len(r.Providers) > 0 && r.Providers[0].Type == provider && len(r.Providers[0].Keys) > 0 &&
			r.Providers[0].Keys[0].Name == k.Name && r.Providers[0].Keys[0].Secret.Equal(k.Secret) {
			return true
		}
	}
	return false
}

// String is the provider without its secrets: "secretbox (key2)",
// "kms v2 plugin vault", "identity".
func (p Provider) String() string {
	switch {
	case p.Type == KMS && p.KMS != nil:
		return fmt.Sprintf("kms %s plugin %s", p.KMS.APIVersion, p.KMS.Name)
	case p.keyed():
		return fmt.Sprintf("%s (%s)", p.Type, strings.Join(p.KeyNames(), ", "))
	}
	return string(p.Type)
}

// String is the rule without secrets: "secrets: secretbox (key2), identity".
func (r Rule) String() string {
	parts := make([]string, len(r.Providers))
	for i, p := range r.Providers {
		parts[i] = p.String()
	}
	return strings.Join(r.Resources, ",") + ": " + strings.Join(parts, ", ")
}

// String is the configuration without secrets, rule by rule.
func (c Config) String() string {
	parts := make([]string, len(c.Resources))
	for i, r := range c.Resources {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

// File is an encryption configuration file's bytes: key material. It
// converts to []byte for writing (mode 0600) and prints as redacted.
type File []byte

// The wire form: the JSON tags of k8s.io/apiserver/pkg/apis/apiserver/v1
// (Talos marshals that type: JSON, then YAML with sorted keys), and the
// same names for strict YAML decoding.
type wireConfig struct {
	APIVersion string     `json:"apiVersion,omitempty" yaml:"apiVersion"`
	Kind       string     `json:"kind,omitempty" yaml:"kind"`
	Resources  []wireRule `json:"resources" yaml:"resources"`
}

type wireRule struct {
	Resources []string       `json:"resources" yaml:"resources"`
	Providers []wireProvider `json:"providers" yaml:"providers"`
}

type wireProvider struct {
	AESGCM    *wireKeys `json:"aesgcm,omitempty" yaml:"aesgcm"`
	AESCBC    *wireKeys `json:"aescbc,omitempty" yaml:"aescbc"`
	Secretbox *wireKeys `json:"secretbox,omitempty" yaml:"secretbox"`
	Identity  *struct{} `json:"identity,omitempty" yaml:"identity"`
	KMS       *wireKMS  `json:"kms,omitempty" yaml:"kms"`
}

type wireKeys struct {
	Keys []wireKey `json:"keys" yaml:"keys"`
}

type wireKey struct {
	Name   string `json:"name" yaml:"name"`
	Secret string `json:"secret" yaml:"secret"`
}

type wireKMS struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Name       string `json:"name" yaml:"name"`
	CacheSize  *int32 `json:"cachesize,omitempty" yaml:"cachesize"`
	Endpoint   string `json:"endpoint" yaml:"endpoint"`
	Timeout    string `json:"timeout,omitempty" yaml:"timeout"`
}

// The two headers kube-apiserver decodes: the API's, and the one Talos
// writes (registered "due to a docs bug", apis/apiserver/v1/register.go).
const (
	APIVersion       = "apiserver.config.k8s.io/v1"
	Kind             = "EncryptionConfiguration"
	legacyAPIVersion = "v1"
	legacyKind       = "EncryptionConfig"
)

// Decode reads an EncryptionConfiguration as kube-apiserver reads its
// --encryption-provider-config: one document, apiVersion
// apiserver.config.k8s.io/v1 kind EncryptionConfiguration (or v1
// EncryptionConfig, as Talos writes it), unknown and duplicate fields
// refused, then checked as kube-apiserver checks it (Validate).
func Decode(data []byte) (Config, error) {
	var w wireConfig
	if err := decodeStrict(data, &w); err != nil {
		return Config{}, fmt.Errorf("encryption configuration: %w", err)
	}
	switch {
	case w.APIVersion == APIVersion && w.Kind == Kind, w.APIVersion == legacyAPIVersion && w.Kind == legacyKind:
	default:
		return Config{}, fmt.Errorf("encryption configuration: apiVersion %q kind %q: want %s %s (or %s %s)", w.APIVersion, w.Kind, APIVersion, Kind, legacyAPIVersion, legacyKind)
	}
	c, err := w.config()
	if err != nil {
		return Config{}, fmt.Errorf("encryption configuration: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("encryption configuration: %w", err)
	}
	return c, nil
}

// decodeStrict decodes exactly one YAML document, unknown fields refused
// (yaml.v3 refuses duplicate keys itself).
func decodeStrict(data []byte, out any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty")
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

// config is the wire form as a Config; a provider entry must name exactly
// one provider, as kube-apiserver requires.
func (w wireConfig) config() (Config, error) {
	c := Config{Resources: make([]Rule, len(w.Resources))}
	for i, wr := range w.Resources {
		r := Rule{Resources: wr.Resources, Providers: make([]Provider, len(wr.Providers))}
		for j, wp := range wr.Providers {
			p, err := wp.provider()
			if err != nil {
				return Config{}, fmt.Errorf("resources[%d].providers[%d]: %w", i, j, err)
			}
			r.Providers[j] = p
		}
		c.Resources[i] = r
	}
	return c, nil
}

func (wp wireProvider) provider() (Provider, error) {
	var found []Provider
	keys := func(t ProviderType, wk *wireKeys) {
		p := Provider{Type: t, Keys: make([]Key, len(wk.Keys))}
		for i, k := range wk.Keys {
			p.Keys[i] = Key{Name: k.Name, Secret: NewSecret(k.Secret)}
		}
		found = append(found, p)
	}
	if wp.AESGCM != nil {
		keys(AESGCM, wp.AESGCM)
	}
	if wp.AESCBC != nil {
		keys(AESCBC, wp.AESCBC)
	}
	if wp.Secretbox != nil {
		keys(Secretbox, wp.Secretbox)
	}
	if wp.Identity != nil {
		found = append(found, Provider{Type: Identity})
	}
	if wp.KMS != nil {
		k := &KMSPlugin{APIVersion: wp.KMS.APIVersion, Name: wp.KMS.Name, Endpoint: wp.KMS.Endpoint, CacheSize: wp.KMS.CacheSize}
		if wp.KMS.Timeout != "" {
			d, err := time.ParseDuration(wp.KMS.Timeout)
			if err != nil {
				return Provider{}, fmt.Errorf("kms timeout: %w", err)
			}
			k.Timeout = &d
		}
		found = append(found, Provider{Type: KMS, KMS: k})
	}
	switch len(found) {
	case 0:
		return Provider{}, errors.New("provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity")
	case 1:
		return found[0], nil
	}
	return Provider{}, errors.New("more than one provider specified in a single element, should split into different list elements")
}

// wire is c in the wire form, secrets revealed, with Talos's header.
func (c Config) wire() wireConfig {
	w := wireConfig{APIVersion: legacyAPIVersion, Kind: legacyKind, Resources: make([]wireRule, len(c.Resources))}
	for i, r := range c.Resources {
		wr := wireRule{Resources: r.Resources, Providers: make([]wireProvider, len(r.Providers))}
		for j, p := range r.Providers {
			var wp wireProvider
			wk := &wireKeys{Keys: make([]wireKey, len(p.Keys))}
			for k, key := range p.Keys {
				wk.Keys[k] = wireKey{Name: key.Name, Secret: key.Secret.Reveal()}
			}
			switch p.Type {
			case AESGCM:
				wp.AESGCM = wk
			case AESCBC:
				wp.AESCBC = wk
			case Secretbox:
				wp.Secretbox = wk
			case Identity:
				wp.Identity = &struct{}{}
			case KMS:
				if p.KMS != nil {
					wp.KMS = &wireKMS{APIVersion: p.KMS.APIVersion, Name: p.KMS.Name, Endpoint: p.KMS.Endpoint, CacheSize: p.KMS.CacheSize}
					if p.KMS.Timeout != nil {
						wp.KMS.Timeout = p.KMS.Timeout.String()
					}
				}
			}
			wr.Providers[j] = wp
		}
		w.Resources[i] = wr
	}
	return w
}

// File is c as Talos writes encryptionconfig.yaml in kube-apiserver's
// secrets directory: apiVersion v1, kind EncryptionConfig, the fields of
// k8s.io/apiserver's v1 type marshalled to JSON and then to YAML with
// sorted keys (k8stemplates.Marshal).
func (c Config) File() (File, error) {
	out, err := sigsyaml.Marshal(c.wire())
	if err != nil {
		return nil, err
	}
	return File(out), nil
}
