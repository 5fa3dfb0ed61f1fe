package upgradecheck

// encryption: what is stored in etcd, by (provider, key name) per
// resource, against the EncryptionConfiguration each control plane renders
// from its machine config (Talos's rendering, internal/encryption), and
// against a candidate machine config when one is given; every encrypted
// value decrypted in memory with the keys each configuration holds, as it
// is read, because a key of the right name with another secret passes any
// comparison of names, and values under one name may have been written
// with different secrets. Key material is never printed.

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/encryption"
)

var encryptionCheck = &checkDef{
	ID:    CheckEncryption,
	Title: "stored data decrypts",
	Help: "the (provider, key name) prefixes of every value in etcd, per resource, against the encryption configuration each " +
		"control plane renders from its machine config (and a --candidate-config's), every encrypted value decrypted in memory " +
		"by the configuration's keys (a key of the same name with another secret is caught); unencrypted values where identity is " +
		"missing; control planes that render different configurations. KMS values are named, not decrypted",
	NoGo: "a stored value would not decrypt with a control plane's configuration (or the candidate's): a key name missing, the same name " +
		"with another secret, a provider dropped, unencrypted data without identity; or a configuration Talos or kube-apiserver refuses",
	Warn:  "control planes render different configurations, or values are KMS-encrypted (the plugin holds the key: not tried)",
	Fix:   "give kube-apiserver back a provider and key that read what is stored, for reading only, after the key it writes with (docs/encryption.md); never print the key",
	Needs: []need{needTalosAPI, needControlPlane, needConfigs, needQuorum, needEtcdKeys},
	Judge: judgeEncryption,
}

// storedTally is what etcd holds, per resource and per form of value,
// and which of them each configuration (readers) would not decrypt: every
// encrypted value is tried as it is read (in memory, none kept), since
// values under one key name may have been written with different secrets
// (a secrets bundle regenerated on one control plane); the others are
// read alike, so one of each is kept and tried by the judge.
type storedTally struct {
	prefix    string // etcd's key prefix, "/registry/"
	readers   []rendered
	resources map[string]map[string]*storedClass
}

// storedClass is the values of one resource stored one way.
type storedClass struct {
	Stored encryption.Stored
	Count  int
	// Key and Value are the first such value, for the trial.
	Key   string
	Value []byte
	// failed are, per reader, the encrypted values it would not decrypt.
	failed []failedTrial
}

// failedTrial counts the values one reader would not decrypt, with the
// first of them.
type failedTrial struct {
	Count int
	Key   string
	Trial encryption.Trial
}

// newStoredTally tallies etcd's values under prefix, trying each
// encrypted one with every reader's configuration.
func newStoredTally(prefix string, readers []rendered) *storedTally {
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &storedTally{prefix: prefix, readers: readers, resources: map[string]map[string]*storedClass{}}
}

// add counts one key-value of etcd.
func (t *storedTally) add(k, v []byte) {
	res, ok := resourceOfKey(t.prefix, string(k))
	if !ok {
		return
	}
	st := encryption.Classify(v)
	class := st.Prefix()
	switch {
	case st.Unencrypted():
		class = "unencrypted"
	case class == "":
		class = string(st.Form)
	}
	byClass := t.resources[res]
	if byClass == nil {
		byClass = map[string]*storedClass{}
		t.resources[res] = byClass
	}
	c := byClass[class]
	if c == nil {
		c = &storedClass{Stored: st, Key: string(k), Value: bytes.Clone(v), failed: make([]failedTrial, len(t.readers))}
		byClass[class] = c
	}
	c.Count++
	if st.Form != encryption.Encrypted {
		return
	}
	for i, r := range t.readers {
		if r.err != nil {
			continue
		}
		if tr := r.config.Read(res, string(k), v); tr.Outcome == encryption.DoesNotDecrypt {
			if c.failed[i].Count == 0 {
				c.failed[i].Key, c.failed[i].Trial = string(k), tr
			}
			c.failed[i].Count++
		}
	}
}

// trial is what reader i found for the class: how many values it would
// not decrypt, the first, and why.
func (c *storedClass) trial(i int, r rendered, res string) failedTrial {
	if c.Stored.Form == encryption.Encrypted {
		return c.failed[i]
	}
	tr := r.config.Read(res, c.Key, c.Value)
	switch tr.Outcome {
	case encryption.DoesNotDecrypt:
		return failedTrial{Count: c.Count, Key: c.Key, Trial: tr}
	case encryption.CannotTry:
		return failedTrial{Key: c.Key, Trial: tr}
	}
	return failedTrial{}
}

// readersOf are the configurations the control planes render from their
// machine configs, and the candidate's.
func readersOf(f *facts, o *Options) []rendered {
	var rs []rendered
	for _, n := range controlPlanes(f.nodes) {
		rs = append(rs, renderedOf("control plane "+n.Addr, n.Config))
	}
	if o != nil && o.Candidate != nil {
		rs = append(rs, renderedOf("the candidate machine config "+o.CandidateName, o.Candidate))
	}
	return rs
}

// resourceOfKey is the resource a key of kube-apiserver's stores, as an
// encryption rule names it: "secrets" for /registry/secrets/NS/NAME,
// "RESOURCE.GROUP" for a custom resource's /registry/GROUP/RESOURCE/...
// (a group has a dot). Built-in resources of other groups are stored
// without their group (/registry/deployments/...): they are judged by the
// rule for their bare name, or "*.*".
func resourceOfKey(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || parts[0] == "" {
		return "", false
	}
	if strings.Contains(parts[0], ".") && len(parts) >= 3 {
		return parts[1] + "." + parts[0], true
	}
	return parts[0], true
}

// rendered is the configuration one control plane (or the candidate)
// renders.
type rendered struct {
	who    string
	config encryption.Config
	source encryption.Source
	file   encryption.File
	err    error
}

func renderedOf(who string, machineConfig []byte) rendered {
	r := rendered{who: who}
	r.config, r.source, r.err = encryption.FromMachineConfig(machineConfig)
	if r.err == nil {
		r.err = r.config.Validate()
	}
	if r.err == nil {
		r.file, r.err = r.config.File()
	}
	return r
}

func judgeEncryption(f *facts, o *Options) Check {
	var c Check
	if f.stored == nil {
		if f.usageErr != nil {
			return unread("etcd's values could not be read", f.usageErr)
		}
		return notChecked(c, "etcd's values were not read")
	}
	rs := f.stored.readers
	resources := make([]string, 0, len(f.stored.resources))
	for res := range f.stored.resources {
		resources = append(resources, res)
	}
	sort.Strings(resources)
	// What is stored, where any of it is encrypted or a rule names it.
	plain := 0
	for _, res := range resources {
		classes := sortedClasses(f.stored.resources[res])
		if len(classes) == 1 && classes[0].Stored.Unencrypted() && !namedByAny(rs, res) {
			plain++
			continue
		}
		var parts []string
		for _, sc := range classes {
			parts = append(parts, fmt.Sprintf("%d %s", sc.Count, sc.Stored))
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("stored %s: %s", res, strings.Join(parts, ", ")))
	}
	if plain > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d other resource(s) stored unencrypted only, named by no rule: identity reads them", plain))
	}
	var noGo, warn []string
	var fix []string
	kms := map[string]bool{}
	for i, r := range rs {
		if r.err != nil {
			noGo = append(noGo, fmt.Sprintf("%s: its encryption configuration cannot be rendered: %s", r.who, errLine(r.err)))
			continue
		}
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s renders (from its %s): %s", r.who, r.source, r.config))
		for _, res := range resources {
			for _, sc := range sortedClasses(f.stored.resources[res]) {
				ft := sc.trial(i, r, res)
				tr := ft.Trial
				switch {
				case ft.Count > 0:
					line := fmt.Sprintf("%s: %d of %d %s value(s) stored as %s would not decrypt (the first: %s): %s", r.who, ft.Count, sc.Count, res, sc.Stored, ft.Key, tr.Why)
					if tr.APIServer != "" {
						line += fmt.Sprintf(" (kube-apiserver: %q)", tr.APIServer)
					}
					noGo = append(noGo, line)
					fix = appendNew(fix, fixFor(tr, res))
				case tr.Outcome == encryption.CannotTry:
					kms[fmt.Sprintf("%d %s value(s) stored as %s", sc.Count, res, sc.Stored)] = true
				}
			}
		}
	}
	if groups := disagreeing(rs); len(groups) > 1 {
		warn = append(warn, "the control planes render different encryption configurations: "+strings.Join(groups, "; ")+
			" (a value one writes another may not read)")
	}
	for k := range kms {
		warn = append(warn, k+": only the KMS plugin holds the key; not tried")
	}
	sort.Strings(warn[min(len(warn), 1):])
	switch {
	case len(noGo) > 0:
		c.Verdict = NoGo
		c.Summary = noGo[0]
		if len(noGo) > 1 {
			c.Summary += fmt.Sprintf(" (and %d more)", len(noGo)-1)
		}
		c.Evidence = append(c.Evidence, noGo...)
		c.Evidence = append(c.Evidence, warn...)
		c.Fix = fix
	case len(warn) > 0:
		c.Verdict, c.Summary = Warn, warn[0]
		c.Evidence = append(c.Evidence, warn...)
		c.Fix = []string{"render one configuration on every control plane: the same KubeEtcdEncryptionConfig document, or the same cluster secrets, in each control plane's machine config (keep the keys that read what is stored)"}
	default:
		c.Verdict = Go
		tried := 0
		for _, res := range resources {
			tried += len(f.stored.resources[res])
		}
		c.Summary = fmt.Sprintf("every stored value decrypts with the configuration of each of %d control plane(s)%s: every encrypted value tried in memory, one of each other form (%d (resource, form) in all)",
			len(controlPlanes(f.nodes)), candidateSaid(o), tried)
	}
	return c
}

func candidateSaid(o *Options) string {
	if o != nil && o.Candidate != nil {
		return " and of the candidate machine config"
	}
	return ""
}

// fixFor says how to make kube-apiserver read a value that does not
// decrypt, by its cause; never with key material.
func fixFor(tr encryption.Trial, res string) string {
	switch tr.Cause() {
	case encryption.CauseKeyMissing:
		return fmt.Sprintf("add %s key %s back to the %s rule, after the key it writes with (for reading only), with the secret it was written with: another control plane's machine config or this cluster's secrets bundle holds it", tr.Stored.Provider, tr.Stored.Key, res)
	case encryption.CauseWrongSecret:
		if tr.Stored.Provider == encryption.AESCBC {
			return fmt.Sprintf("aescbc key %s holds another secret than the one %s was written with (a regenerated config or secrets bundle), and AES-CBC cannot read with two secrets under one name "+
				"(it authenticates nothing): put the old secret back under %s as the key written with, or restore etcd from a snapshot taken before the change", tr.Stored.Key, res, tr.Stored.Key)
		}
		return fmt.Sprintf("%s key %s holds another secret than the one %s was written with (a regenerated config or secrets bundle): after the %s rule's %s provider, add a second %s provider "+
			"holding key %s with the old secret, for reading only (kube-apiserver tries each provider whose prefix matches; under another name it would match no stored value; "+
			"a KubeEtcdEncryptionConfig document can say it, the v1alpha1 cluster secrets cannot): another control plane's machine config or this cluster's secrets bundle holds it",
			tr.Stored.Provider, tr.Stored.Key, res, res, tr.Stored.Provider, tr.Stored.Provider, tr.Stored.Key)
	case encryption.CauseNoProvider:
		if tr.Stored.Unencrypted() {
			return fmt.Sprintf("add identity (last) to the %s rule: unencrypted %s remain", res, res)
		}
		return fmt.Sprintf("add back to the %s rule, for reading only, after the provider it writes with, a provider of type %s holding key %s", res, tr.Stored.Provider, tr.Stored.Key)
	}
	return "find what wrote these values (docs/encryption.md) before upgrading"
}

// disagreeing groups the control planes by the configuration they render
// (names and secrets compared in memory; only names printed).
func disagreeing(rs []rendered) []string {
	type group struct {
		file  encryption.File
		names string
		who   []string
	}
	var gs []*group
	for _, r := range rs {
		if r.err != nil || !strings.HasPrefix(r.who, "control plane ") {
			continue
		}
		found := false
		for _, g := range gs {
			if bytes.Equal(g.file, r.file) {
				g.who, found = append(g.who, strings.TrimPrefix(r.who, "control plane ")), true
				break
			}
		}
		if !found {
			gs = append(gs, &group{file: r.file, names: r.config.String(), who: []string{strings.TrimPrefix(r.who, "control plane ")}})
		}
	}
	var out []string
	for _, g := range gs {
		line := strings.Join(g.who, ", ") + ": " + g.names
		for _, o := range gs {
			if o != g && o.names == g.names {
				line += " (the same names as another, with other secrets)"
				break
			}
		}
		out = append(out, line)
	}
	return out
}

func namedByAny(rs []rendered, res string) bool {
	for _, r := range rs {
		if r.err == nil && r.config.Names(res) {
			return true
		}
	}
	return false
}

func sortedClasses(m map[string]*storedClass) []*storedClass {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*storedClass, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}
