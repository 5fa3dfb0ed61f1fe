package diagnose

// Encryption-at-rest drift: stored data that the encryption configuration
// a control plane renders no longer decrypts (a key renamed by a
// regenerated config, a secret regenerated under the same name, a provider
// dropped, identity missing). kube-apiserver then runs and is never ready.
// The evidence: its own words (encryption.MatchLog), each control plane's
// configuration (from its machine config, read through the Talos API), the
// prefixes etcd stores per resource, and a trial decryption, in memory, of
// one stored value per prefix with each configuration: the same key name
// with another secret passes every comparison of names. No key material is
// kept in the evidence, printed or written.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/talos"
)

// EncryptionRunbook is the built-in runbook that recovers an encryption drift.
const EncryptionRunbook = "encryption-drift"

// ConfigReader reads a node's machine config; *talos.Client is one.
type ConfigReader interface {
	ReadMachineConfig(ctx context.Context, node string) (talos.MachineConfig, error)
}

// StoredReader groups the values etcd stores per resource, split by what
// split says of each value; *etcd.Client is one.
type StoredReader interface {
	StoredSplit(ctx context.Context, resource string, split func(etcdKey string, value []byte) string) ([]etcd.StoredGroup, error)
}

// EncryptionEvidence is what was read about encryption at rest.
type EncryptionEvidence struct {
	// Configs are each control plane's configuration (names only).
	Configs []NodeEncryption `json:"configs"`
	// Stored are the values of each resource the configurations name, by
	// how they are stored.
	Stored []etcd.StoredGroup `json:"stored,omitempty"`
	// Unreadable is what a control plane's configuration does not read.
	Unreadable []Unreadable `json:"unreadable,omitempty"`
	// KMS are stored groups a KMS plugin encrypted: named, never decrypted.
	KMS []string `json:"kms,omitempty"`
	// Differ says which control planes render configurations that differ
	// ("" when they agree).
	Differ string `json:"differ,omitempty"`
	// Errors say what could not be read.
	Errors []string `json:"errors,omitempty"`
}

// NodeEncryption is one control plane's encryption configuration.
type NodeEncryption struct {
	Node string `json:"node"`
	// Source: the v1alpha1 cluster secrets or Talos 1.14's document.
	Source string `json:"source,omitempty"`
	// Config is the configuration, names only (never a secret).
	Config string `json:"config,omitempty"`
	Error  string `json:"error,omitempty"`
	// ConfigHash is the machine config's hash when it was read.
	ConfigHash string `json:"configHash,omitempty"`
	config     encryption.Config
	read       bool
}

// Unreadable is one stored group a control plane's configuration does not
// read.
type Unreadable struct {
	Node     string `json:"node"`
	Resource string `json:"resource"`
	// Provider and Key name what the values are stored under (empty:
	// unencrypted).
	Provider string `json:"provider,omitempty"`
	Key      string `json:"key,omitempty"`
	What     string `json:"what"`
	Count    int    `json:"count"`
	Example  string `json:"example"`
	Cause    string `json:"cause"`
	Why      string `json:"why"`
	// APIServer is kube-apiserver's own words for it.
	APIServer string `json:"apiServer,omitempty"`
}

// encryptionResources are the resources whose stored values are checked:
// secrets, and every resource a configuration names by itself (a wildcard
// cannot be listed by name: it is said, not checked).
func encryptionResources(cfgs []NodeEncryption) (resources, unchecked []string) {
	resources = []string{"secrets"}
	for _, c := range cfgs {
		for _, r := range c.config.Resources {
			for _, name := range r.Resources {
				switch {
				case strings.Contains(name, "*"):
					if !slices.Contains(unchecked, name) {
						unchecked = append(unchecked, name)
					}
				default:
					res, _, _ := strings.Cut(name, ".")
					if !slices.Contains(resources, res) {
						resources = append(resources, res)
					}
				}
			}
		}
	}
	return resources, unchecked
}

// GatherEncryption reads each node's encryption configuration from its
// machine config and the stored values of the resources they name, then
// judges what each configuration reads.
func GatherEncryption(ctx context.Context, nodes ConfigReader, list []string, stored StoredReader) *EncryptionEvidence {
	ee := &EncryptionEvidence{}
	for _, n := range list {
		ne := NodeEncryption{Node: n}
		mc, err := nodes.ReadMachineConfig(ctx, n)
		if err != nil {
			ne.Error = err.Error()
			ee.Errors = append(ee.Errors, fmt.Sprintf("node %s: machine config not read: %v", n, err))
			ee.Configs = append(ee.Configs, ne)
			continue
		}
		ne.ConfigHash = mc.Hash()
		cfg, src, err := encryption.FromMachineConfig(mc.Bytes)
		if err != nil {
			ne.Error = err.Error()
			ee.Errors = append(ee.Errors, fmt.Sprintf("node %s: %v", n, err))
		} else {
			ne.config, ne.Source, ne.Config, ne.read = cfg, string(src), cfg.String(), true
		}
		ee.Configs = append(ee.Configs, ne)
	}
	if stored == nil {
		ee.Errors = append(ee.Errors, "etcd was not read: the stored values are not checked")
		return ee
	}
	resources, unchecked := encryptionResources(ee.Configs)
	for _, u := range unchecked {
		ee.Errors = append(ee.Errors, fmt.Sprintf("resources %q are named by a wildcard: their stored values are not checked", u))
	}
	for _, res := range resources {
		// Split by which configurations read each value: one prefix may
		// hold values of two secrets under one name, and judge tries one
		// value per group.
		groups, err := stored.StoredSplit(ctx, res, ee.readers(res))
		if err != nil {
			ee.Errors = append(ee.Errors, fmt.Sprintf("etcd: %s not read: %v", res, err))
			continue
		}
		ee.Stored = append(ee.Stored, groups...)
	}
	ee.judge()
	return ee
}

// readers says of a value of res which configurations do not decrypt it:
// values told apart by it are judged apart.
func (ee *EncryptionEvidence) readers(res string) func(etcdKey string, value []byte) string {
	return func(etcdKey string, value []byte) string {
		if encryption.Classify(value).Form != encryption.Encrypted {
			return ""
		}
		var b strings.Builder
		for _, c := range ee.Configs {
			if c.read && c.config.Read(res, etcdKey, value).Outcome == encryption.DoesNotDecrypt {
				b.WriteString(c.Node + " ")
			}
		}
		return b.String()
	}
}

// judge tries one value of each stored group with each configuration, in
// memory, and says which control planes disagree.
func (ee *EncryptionEvidence) judge() {
	ee.Unreadable, ee.KMS = nil, nil
	for _, g := range ee.Stored {
		if g.Stored.Form == encryption.KMSForm {
			ee.KMS = append(ee.KMS, fmt.Sprintf("%d %s stored by the %s (%s): named, not decrypted (the plugin holds the key)", g.Count, g.Resource, g.What, g.Example))
		}
		for _, c := range ee.Configs {
			if !c.read {
				continue
			}
			tr := c.config.Read(g.Resource, g.SampleKey, g.Sample)
			if tr.Outcome != encryption.DoesNotDecrypt {
				continue
			}
			ee.Unreadable = append(ee.Unreadable, Unreadable{Node: c.Node, Resource: g.Resource, Provider: string(g.Stored.Provider), Key: g.Stored.Key,
				What: g.What, Count: g.Count, Example: g.Example, Cause: string(tr.Cause()), Why: tr.Why, APIServer: tr.APIServer})
		}
	}
	ee.Differ = differ(ee.Configs)
}

// differ says which control planes render configurations that differ: by
// names, or by secrets under the same names.
func differ(cfgs []NodeEncryption) string {
	type class struct {
		file  []byte
		names string
		nodes []string
	}
	var classes []*class
	for _, c := range cfgs {
		if !c.read {
			continue
		}
		f, err := c.config.File()
		if err != nil {
			continue
		}
		i := slices.IndexFunc(classes, func(k *class) bool { return bytes.Equal(k.file, f) })
		if i < 0 {
			classes = append(classes, &class{file: f, names: c.Config})
			i = len(classes) - 1
		}
		classes[i].nodes = append(classes[i].nodes, c.Node)
	}
	if len(classes) < 2 {
		return ""
	}
	var parts []string
	for _, k := range classes {
		parts = append(parts, fmt.Sprintf("%s render %s", strings.Join(k.nodes, ", "), k.names))
	}
	s := "the control planes' encryption configurations differ: " + strings.Join(parts, "; ")
	if classes[0].names == classes[1].names {
		s += " (the same names with other secrets)"
	}
	return s
}

// UnreadableOn are the unreadable groups of one node.
func (ee *EncryptionEvidence) UnreadableOn(node string) []Unreadable {
	if ee == nil {
		return nil
	}
	var out []Unreadable
	for _, u := range ee.Unreadable {
		if u.Node == node {
			out = append(out, u)
		}
	}
	return out
}

// Missing are the (provider, key) of stored values some control plane
// cannot read, as PROVIDER:NAME, sorted; unencrypted values (identity
// missing) are "identity".
func (ee *EncryptionEvidence) Missing() []string {
	if ee == nil {
		return nil
	}
	var out []string
	for _, u := range ee.Unreadable {
		k := "identity"
		if u.Provider != "" {
			k = u.Provider + ":" + u.Key
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// encryptionWords are the encryption wordings a node's log shows.
func encryptionWords(ne NodeEvidence) []encryption.Wording {
	var out []encryption.Wording
	for _, l := range ne.Logs {
		if w, ok := encryption.MatchLog(l); ok && !slices.ContainsFunc(out, func(o encryption.Wording) bool { return o.Text == w.Text }) {
			out = append(out, w)
		}
	}
	return out
}

// encryptionDrift concludes an encryption drift: a control plane whose
// kube-apiserver is not ready, and whose configuration does not read what
// etcd stores, or whose log says so.
func (r *Report) encryptionDrift(ev *Evidence, suspect []string) bool {
	ee := ev.Encryption
	var nodes, words []string
	for _, n := range suspect {
		ne := nodeByName(ev, n)
		ws := encryptionWords(ne)
		if len(ee.UnreadableOn(n)) == 0 && len(ws) == 0 {
			continue
		}
		nodes = append(nodes, n)
		for _, w := range ws {
			if w.Cause != encryption.CauseUnreadable || len(ws) == 1 {
				words = appendOnce(words, w.Text)
			}
		}
	}
	if len(nodes) == 0 {
		return false
	}
	r.Verdict, r.Runbook = EncryptionDrift, EncryptionRunbook
	var what []string
	if ee != nil {
		for _, u := range ee.Unreadable {
			if !slices.Contains(nodes, u.Node) {
				continue
			}
			s := fmt.Sprintf("node %s cannot read %d %s stored as %s (e.g. %s): %s", u.Node, u.Count, u.Resource, u.What, u.Example, u.Why)
			what = append(what, s)
		}
	}
	r.Summary = fmt.Sprintf("kube-apiserver is not ready on %s: stored data does not decrypt with the encryption configuration it is given", nodeList(nodes, len(ev.Nodes)))
	if len(words) > 0 {
		r.Summary += fmt.Sprintf(" (its log: %q)", strings.Join(words, "; "))
	}
	if len(what) > 0 {
		r.Summary += "; " + strings.Join(what, "; ")
	} else {
		r.Summary += "; what is stored was not read, so the key is not named"
	}
	if ee != nil {
		if ee.Differ != "" {
			r.Notes = append(r.Notes, ee.Differ)
		}
		r.Notes = append(r.Notes, ee.KMS...)
		for _, e := range ee.Errors {
			r.Notes = append(r.Notes, "encryption: "+e)
		}
	}
	r.addNext("breakglass recover   # runbook " + EncryptionRunbook + ": adds back, read-only, a key that decrypts what is stored (found by a trial decryption in memory), waits for /readyz")
	return true
}

// writeEncryption writes the encryption evidence.
func writeEncryption(b *strings.Builder, ee *EncryptionEvidence) {
	if ee == nil {
		return
	}
	b.WriteString("Encryption at rest:\n")
	for _, c := range ee.Configs {
		if c.Error != "" {
			fmt.Fprintf(b, "  %s: not read: %s\n", c.Node, c.Error)
			continue
		}
		fmt.Fprintf(b, "  %s (%s): %s\n", c.Node, c.Source, c.Config)
	}
	for _, g := range ee.Stored {
		fmt.Fprintf(b, "  stored: %d %s as %s (e.g. %s)\n", g.Count, g.Resource, g.What, g.Example)
	}
	for _, u := range ee.Unreadable {
		fmt.Fprintf(b, "  %s does not read %d %s stored as %s: %s\n", u.Node, u.Count, u.Resource, u.What, u.Why)
	}
}
