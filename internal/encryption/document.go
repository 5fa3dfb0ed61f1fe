package encryption

// Editing a Talos machine config's encryption configuration: Talos 1.14's
// KubeEtcdEncryptionConfig document is the one place where key names can
// be chosen. The legacy cluster secrets render fixed names (secretbox key2,
// aescbc key1): a key under another name cannot be expressed there.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	sigsyaml "sigs.k8s.io/yaml"
)

// Document is c as Talos 1.14's KubeEtcdEncryptionConfig document (its
// configuration under config, without apiVersion and kind). It holds the
// secrets: it goes into a machine config sent to a node, never anywhere
// else.
func (c Config) Document() (File, error) {
	w := c.wire()
	w.APIVersion, w.Kind = "", ""
	body, err := sigsyaml.Marshal(struct {
		APIVersion string     `json:"apiVersion"`
		Kind       string     `json:"kind"`
		Config     wireConfig `json:"config"`
	}{"v1alpha1", DocumentKind, w})
	if err != nil {
		return nil, err
	}
	return File(body), nil
}

// ErrLegacyNames: the machine config renders its encryption configuration
// from the v1alpha1 cluster secrets, whose key names are fixed.
var ErrLegacyNames = errors.New("this machine config renders its encryption configuration from cluster.secretboxEncryptionSecret and cluster.aescbcEncryptionSecret " +
	"(secretbox key2, aescbc key1, identity), which cannot name another key: on Talos 1.14 and later, replace them by a KubeEtcdEncryptionConfig document " +
	"that keeps those keys and adds the one needed; before 1.14, re-encrypt the data under the key the config renders (with a kube-apiserver that holds both) or restore etcd from a snapshot taken before the change")

// ErrWritesWith: RemoveKey was asked to take out the key a rule writes
// with (its first provider's first key).
var ErrWritesWith = errors.New("kube-apiserver writes with it")

// ErrCBCNameTaken: an AES-CBC key of that name holds another secret. A
// second aescbc provider of the same name cannot read beside it: AES-CBC
// authenticates nothing, so about one value in 256 passes the first key's
// padding check as garbage and kube-apiserver never tries the second.
var ErrCBCNameTaken = errors.New("an aescbc key of that name holds another secret, and a second aescbc provider of the same name would not read beside it " +
	"(AES-CBC authenticates nothing: about one value in 256 opens as garbage with the first key, and kube-apiserver never tries the second): " +
	"put the old secret back under that name as the key written with (re-encrypt first what was written with the regenerated one), or restore etcd from a snapshot taken before the change")

var docSep = regexp.MustCompile(`(?m)^---[ \t]*\r?\n`)

// editDocument replaces the machine config's KubeEtcdEncryptionConfig
// document by edit's result, every other document's bytes kept.
func editDocument(machineConfig []byte, edit func(*Config) (bool, error)) ([]byte, bool, error) {
	c, src, err := FromMachineConfig(machineConfig)
	if err != nil {
		return nil, false, err
	}
	changed, err := edit(&c)
	if err != nil || !changed {
		return machineConfig, false, err // a legacy config that holds the key already needs nothing
	}
	if src != FromDocument {
		return nil, false, ErrLegacyNames
	}
	if err := c.Validate(); err != nil {
		return nil, false, err
	}
	doc, err := c.Document()
	if err != nil {
		return nil, false, err
	}
	text := string(machineConfig)
	locs := docSep.FindAllStringIndex(text, -1)
	start := 0
	for i := 0; i <= len(locs); i++ {
		end := len(text)
		next := end
		if i < len(locs) {
			end, next = locs[i][0], locs[i][1]
		}
		part := text[start:end]
		if regexp.MustCompile(`(?m)^kind:\s*` + DocumentKind + `\s*$`).MatchString(part) {
			out := text[:start] + string(doc) + text[end:]
			return []byte(out), true, nil
		}
		start = next
	}
	return nil, false, fmt.Errorf("machine config: the %s document was not found in its text", DocumentKind)
}

// AddReadKey adds key k of provider type t to the rule for resource in the
// machine config's KubeEtcdEncryptionConfig document, for reading only:
// after the keys of the rule's provider of that type, or, without one, as a
// provider of its own after the rule's first (the one kube-apiserver writes
// with stays first). A key already there under that name with that secret
// changes nothing. Under that name with another secret (a regenerated
// secrets bundle), it comes as a provider of its own after the last of that
// type (secretbox and aesgcm, which authenticate; never aescbc:
// ErrCBCNameTaken): one provider cannot hold a name twice, but kube-apiserver tries every
// provider whose prefix (k8s:enc:TYPE:v1:NAME:) matches a value, in order,
// until one decrypts it (k8s.io/apiserver storage/value transformer.go,
// "overlapping prefixes"); another name would match no stored value.
func AddReadKey(machineConfig []byte, resource string, t ProviderType, k Key) ([]byte, bool, error) {
	return editDocument(machineConfig, func(c *Config) (bool, error) {
		ri := slices.IndexFunc(c.Resources, func(r Rule) bool { return slices.Contains(r.Resources, resource) })
		if ri < 0 {
			return false, fmt.Errorf("the encryption configuration has no rule for %s", resource)
		}
		r := &c.Resources[ri]
		last, nameTaken := -1, false
		for pi := range r.Providers {
			p := &r.Providers[pi]
			if p.Type != t {
				continue
			}
			last = pi
			for _, have := range p.Keys {
				if have.Name == k.Name {
					if have.Secret.Equal(k.Secret) {
						return false, nil
					}
					nameTaken = true
				}
			}
		}
		switch {
		case nameTaken && t == AESCBC:
			return false, ErrCBCNameTaken
		case nameTaken:
			r.Providers = slices.Insert(r.Providers, last+1, Provider{Type: t, Keys: []Key{k}})
		case last >= 0:
			p := &r.Providers[last]
			if last == 0 && len(p.Keys) == 0 {
				return false, fmt.Errorf("%s's first provider %s has no key to write with", resource, t)
			}
			p.Keys = append(p.Keys, k)
		default:
			at := 1
			if len(r.Providers) == 0 {
				at = 0
			}
			r.Providers = slices.Insert(r.Providers, at, Provider{Type: t, Keys: []Key{k}})
		}
		return true, nil
	})
}

// RemoveKey takes the key named name of provider type t out of the rule for
// resource (and the provider with it when it holds no other key); it never
// takes out the key the rule writes with. Where two providers of that type
// hold the name (a read key added beside a regenerated one), the last goes:
// AddReadKey put it last.
func RemoveKey(machineConfig []byte, resource string, t ProviderType, name string) ([]byte, bool, error) {
	return editDocument(machineConfig, func(c *Config) (bool, error) {
		ri := slices.IndexFunc(c.Resources, func(r Rule) bool { return slices.Contains(r.Resources, resource) })
		if ri < 0 {
			return false, nil
		}
		r := &c.Resources[ri]
		for pi := len(r.Providers) - 1; pi >= 0; pi-- {
			p := &r.Providers[pi]
			if p.Type != t {
				continue
			}
			ki := slices.IndexFunc(p.Keys, func(k Key) bool { return k.Name == name })
			if ki < 0 {
				continue
			}
			if pi == 0 && ki == 0 {
				return false, fmt.Errorf("%s key %s is the one %s is written with: not taken out: %w", t, name, resource, ErrWritesWith)
			}
			p.Keys = slices.Delete(p.Keys, ki, ki+1)
			if len(p.Keys) == 0 {
				r.Providers = slices.Delete(r.Providers, pi, pi+1)
			}
			return true, nil
		}
		return false, nil
	})
}

// Candidate is key material from somewhere, tried by name-free trial
// decryption: Source says where it is (never the material).
type Candidate struct {
	Source string
	Secret Secret
}

// Candidates are every distinct key secret of c, from source.
func (c Config) Candidates(source string) []Candidate {
	var out []Candidate
	for _, r := range c.Resources {
		for _, p := range r.Providers {
			for _, k := range p.Keys {
				if !slices.ContainsFunc(out, func(o Candidate) bool { return o.Secret.Equal(k.Secret) }) {
					out = append(out, Candidate{Source: fmt.Sprintf("%s (its %s key %s)", source, p.Type, k.Name), Secret: k.Secret})
				}
			}
		}
	}
	return out
}

// FindKey is the first candidate whose secret decrypts value (stored under
// etcdKey) as the key that value names: the material to add under that
// name. ok is false when none does.
func FindKey(value []byte, etcdKey string, cands []Candidate) (Candidate, bool) {
	st := Classify(value)
	if st.Form != Encrypted {
		return Candidate{}, false
	}
	for _, c := range cands {
		if TryKey(st.Provider, Key{Name: st.Key, Secret: c.Secret}, etcdKey, value).Outcome == Decrypts {
			return c, true
		}
	}
	return Candidate{}, false
}

// BundleCandidates are the encryption secrets of a Talos secrets bundle
// (talosctl gen secrets: secrets.secretboxencryptionsecret,
// secrets.aescbcencryptionsecret).
func BundleCandidates(bundle []byte, source string) ([]Candidate, error) {
	var b struct {
		Secrets struct {
			Secretbox string `json:"secretboxencryptionsecret"`
			AESCBC    string `json:"aescbcencryptionsecret"`
		} `json:"secrets"`
	}
	if err := sigsyaml.Unmarshal(bundle, &b); err != nil {
		return nil, fmt.Errorf("secrets bundle: %w", err)
	}
	var out []Candidate
	if s := strings.TrimSpace(b.Secrets.Secretbox); s != "" {
		out = append(out, Candidate{Source: source + " (secretboxencryptionsecret)", Secret: NewSecret(s)})
	}
	if s := strings.TrimSpace(b.Secrets.AESCBC); s != "" {
		out = append(out, Candidate{Source: source + " (aescbcencryptionsecret)", Secret: NewSecret(s)})
	}
	if len(out) == 0 {
		return nil, errors.New("secrets bundle: it holds no encryption secret (secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret)")
	}
	return out, nil
}
