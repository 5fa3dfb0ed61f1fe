package encryption

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// Source says where a Talos control plane's encryption configuration comes
// from.
type Source string

const (
	// FromClusterSecrets: the v1alpha1 document's
	// cluster.secretboxEncryptionSecret and cluster.aescbcEncryptionSecret
	// (every Talos before 1.14, and 1.14 without the document).
	FromClusterSecrets Source = "cluster secrets"
	// FromDocument: Talos 1.14's KubeEtcdEncryptionConfig document.
	FromDocument Source = "KubeEtcdEncryptionConfig"
)

// DocumentKind is Talos 1.14's machine config document that holds the
// encryption configuration (apiVersion v1alpha1, the configuration under
// config, without apiVersion and kind).
const DocumentKind = "KubeEtcdEncryptionConfig"

// Legacy is what Talos renders from the two cluster secrets (the legacy
// path of k8stemplates.APIServerEncryptionConfig, the same on v1.13.8 and
// v1.14): secrets only, secretbox key2 when that secret is set, then aescbc
// key1 when that one is, then identity. An empty secret is left out, as
// Talos leaves it out; nothing is checked (kube-apiserver does that).
func Legacy(secretbox, aescbc string) Config {
	var ps []Provider
	if secretbox != "" {
		ps = append(ps, Provider{Type: Secretbox, Keys: []Key{{Name: "key2", Secret: NewSecret(secretbox)}}})
	}
	if aescbc != "" {
		ps = append(ps, Provider{Type: AESCBC, Keys: []Key{{Name: "key1", Secret: NewSecret(aescbc)}}})
	}
	ps = append(ps, Provider{Type: Identity})
	return Config{Resources: []Rule{{Resources: []string{"secrets"}, Providers: ps}}}
}

// FromMachineConfig is the encryption configuration a Talos control plane
// renders from its machine config, read from the config's text (the
// machinery this module uses, v1.13.8, does not know the 1.14 document):
// the KubeEtcdEncryptionConfig document's config as it is, when there is
// one (Talos adds nothing, identity included); otherwise Legacy from the
// v1alpha1 document's cluster secrets. A config with both is refused, as
// Talos refuses it. Like Talos, it checks the document's fields strictly
// but not its keys (Validate does, as kube-apiserver will).
func FromMachineConfig(text []byte) (Config, Source, error) {
	var secretbox, aescbc string
	var doc *yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(text))
	for i := 0; ; i++ {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return Config{}, "", fmt.Errorf("machine config document %d: %w", i+1, err)
		}
		m := root(&n)
		if m == nil {
			continue
		}
		if kind := scalar(m, "kind"); kind == DocumentKind {
			if doc != nil {
				return Config{}, "", fmt.Errorf("machine config: more than one %s document", DocumentKind)
			}
			if v := scalar(m, "apiVersion"); v != "v1alpha1" {
				return Config{}, "", fmt.Errorf("machine config: %s apiVersion %q, want v1alpha1", DocumentKind, v)
			}
			doc = yamlnode.Value(m, "config")
			if doc == nil {
				doc = &yaml.Node{Kind: yaml.MappingNode}
			}
			continue
		}
		if scalar(m, "version") == "v1alpha1" {
			cl := yamlnode.Value(m, "cluster")
			secretbox, aescbc = scalar(cl, "secretboxEncryptionSecret"), scalar(cl, "aescbcEncryptionSecret")
		}
	}
	if doc == nil {
		return Legacy(secretbox, aescbc), FromClusterSecrets, nil
	}
	if secretbox != "" || aescbc != "" {
		return Config{}, "", errors.New("machine config: etcd encryption config is already set in v1alpha1 config (cluster.secretboxEncryptionSecret or aescbcEncryptionSecret beside a KubeEtcdEncryptionConfig document): Talos refuses it")
	}
	c, err := fromDocument(doc)
	if err != nil {
		return Config{}, "", fmt.Errorf("machine config: %s: %w", DocumentKind, err)
	}
	return c, FromDocument, nil
}

// fromDocument reads the document's config as Talos does (the unstructured
// map converted to the v1 type, unknown fields refused); apiVersion and
// kind, if given, are ignored: Talos sets its own.
func fromDocument(n *yaml.Node) (Config, error) {
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		return Config{}, errors.New("etcd encryption config is required")
	}
	text, err := yaml.Marshal(n)
	if err != nil {
		return Config{}, err
	}
	var w wireConfig
	if err := decodeStrict(text, &w); err != nil {
		return Config{}, err
	}
	return w.config()
}

// root is the document's top mapping, or nil.
func root(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	return n
}

// scalar is the scalar value of key in mapping m, or "".
func scalar(m *yaml.Node, key string) string {
	v := yamlnode.Resolve(yamlnode.Value(m, key))
	if v == nil || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return ""
	}
	return v.Value
}
