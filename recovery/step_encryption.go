package recovery

// The steps of an encryption-drift incident: encryption.key.add gives
// every control plane's kube-apiserver back, for reading only, the keys
// that decrypt what etcd stores, in the KubeEtcdEncryptionConfig document
// of its machine config; the engine's own encryption.key.remove (revert)
// takes each out again, by name, once nothing stored uses its prefix. The
// key material is found by a trial decryption in memory, among the other
// control planes' machine configs and a secrets bundle the operator names,
// and goes only into the machine configs sent to the nodes: the plan, the
// journal and the output name where it came from, never what it is.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// ActionEncryptionKeyRemove takes out what encryption.key.add added (revert).
const ActionEncryptionKeyRemove runbooks.Action = "encryption.key.remove"

// EncryptionKeyRemoveParams: encryption.key.remove takes out the keys the
// incident's encryption.key.add steps recorded.
type EncryptionKeyRemoveParams struct{}

func (*EncryptionKeyRemoveParams) Action() runbooks.Action { return ActionEncryptionKeyRemove }

func init() {
	register((*run).addEncryptionKeys)
	register((*run).removeEncryptionKeys)
	undoSteps = append(undoSteps, Step{Name: "revert-encryption-keys", Params: &EncryptionKeyRemoveParams{}, Confirm: true,
		Description: "Take the keys this incident added out of each control plane's encryption configuration, by name, only where nothing stored uses them any more."})
}

// KeyEdit is one key added to (or taken out of) one node's encryption
// configuration, as the apply record keeps it: names, where the key
// material came from, the config's hashes; never the material.
type KeyEdit struct {
	Node             string `json:"node"`
	Resource         string `json:"resource"`
	Provider         string `json:"provider"`
	Key              string `json:"key"`
	From             string `json:"from,omitempty"`
	ConfigHashBefore string `json:"configHashBefore"`
	ConfigHashAfter  string `json:"configHashAfter,omitempty"`
}

type keyEdits struct {
	Edits []KeyEdit `json:"edits"`
}

// KeysResult is what an encryption key step did.
type KeysResult struct {
	said
	Plan  *AdmissionPlan `json:"-"`
	Edits []KeyEdit      `json:"edits"`
	// Kept are the keys revert leaves, and why.
	Kept []string `json:"kept,omitempty"`
}

// JournalData keeps the edits and what was done on each node.
func (k *KeysResult) JournalData() any {
	return struct {
		Edits []KeyEdit `json:"edits"`
		Kept  []string  `json:"kept,omitempty"`
		Nodes any       `json:"nodes,omitempty"`
	}{k.Edits, k.Kept, k.Plan.JournalData()}
}

// keyStays is what the summary says of an added key.
const keyStays = "make the same change where the machine configs come from (the Omni cluster template, talhelper, the Terraform talos_machine_configuration, your patch files), " +
	"or the next apply drops the key again; once every Secret has been written again under the key kube-apiserver writes with " +
	"(kubectl get secrets -A -o json | kubectl replace -f -), breakglass revert takes the added key out"

// neededKey is one stored prefix to read again, and the material that does.
type neededKey struct {
	resource, provider, name string
	count                    int
	example                  string
	from                     encryption.Candidate
}

func (k neededKey) String() string { return k.provider + " key " + k.name }

// candidates are the key material breakglass may use: every key of every
// control plane's machine config, and the bundle's secrets.
func (r *run) keyCandidates(ctx context.Context, bundle string) ([]encryption.Candidate, map[string]talos.MachineConfig, error) {
	var cands []encryption.Candidate
	cfgs := map[string]talos.MachineConfig{}
	for _, n := range r.tc.Nodes() {
		mc, err := r.tc.ReadMachineConfig(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		cfgs[n] = mc
		c, _, err := encryption.FromMachineConfig(mc.Bytes)
		if err != nil {
			continue
		}
		cands = append(cands, c.Candidates("the machine config of "+n)...)
	}
	if bundle != "" {
		b, err := os.ReadFile(bundle)
		if err != nil {
			return nil, nil, failure.Input("name a readable Talos secrets bundle (talosctl gen secrets): breakglass recover --secrets-bundle FILE, or the add-key step's bundle", "secrets bundle: %v", err)
		}
		bc, err := encryption.BundleCandidates(b, "the secrets bundle "+bundle)
		if err != nil {
			return nil, nil, failure.Input("name this cluster's Talos secrets bundle (talosctl gen secrets --from-controlplane-config controlplane.yaml -o secrets.yaml makes one): breakglass recover --secrets-bundle FILE, or the add-key step's bundle", "%v", err)
		}
		cands = append(cands, bc...)
	}
	return cands, cfgs, nil
}

// storedUnder are the stored groups of every resource the nodes' configs
// name (and secrets) whose prefix is provider:name, split as split says
// (etcd.Client.StoredSplit; nil: by prefix only).
func storedUnder(ctx context.Context, ec *etcd.Client, cfgs map[string]talos.MachineConfig, provider, name string, split func(string, []byte) string) ([]etcd.StoredGroup, error) {
	var out []etcd.StoredGroup
	for _, res := range storedResources(cfgs) {
		gs, err := ec.StoredSplit(ctx, res, split)
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			if g.Stored.Form == encryption.Encrypted && string(g.Stored.Provider) == provider && g.Stored.Key == name {
				out = append(out, g)
			}
		}
	}
	return out, nil
}

// decryptedBy says of a value which candidate decrypts it: the values of
// one prefix may have been written with two secrets of its name (a secret
// regenerated, some values written again since), and each secret found is
// added, not the one of whichever value etcd lists first.
func decryptedBy(cands []encryption.Candidate) func(etcdKey string, value []byte) string {
	return func(etcdKey string, value []byte) string {
		if c, ok := encryption.FindKey(value, etcdKey, cands); ok {
			return c.Source
		}
		return noCandidate
	}
}

// storedResources are the resources whose stored values may be encrypted:
// Secrets, and every resource a control plane's rule names (wildcards left
// out: they are not read).
func storedResources(cfgs map[string]talos.MachineConfig) []string {
	resources := []string{"secrets"}
	for _, mc := range cfgs {
		c, _, err := encryption.FromMachineConfig(mc.Bytes)
		if err != nil {
			continue
		}
		for _, rule := range c.Resources {
			for _, res := range rule.Resources {
				if res, _, _ = strings.Cut(res, "."); !strings.Contains(res, "*") && !slices.Contains(resources, res) {
					resources = append(resources, res)
				}
			}
		}
	}
	return resources
}

func (r *run) addEncryptionKeys(ctx context.Context, s Step, p *runbooks.EncryptionKeyAddParams) (*Plan, error) {
	if len(p.Keys) == 0 {
		return nil, failure.Input("run it after a diagnose step, or name them: with: {keys: [secretbox:key2]}", "step %s: no key to add (the diagnosis named none)", s.Name)
	}
	if err := r.tc.RequireAdmin("editing the encryption configuration in the machine config"); err != nil {
		return nil, err
	}
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("what etcd stores must be read to find the key that decrypts it: %w", err)
	}
	bundle := p.Bundle
	if bundle == "" {
		bundle = r.opts.SecretsBundle
	}
	cands, cfgs, err := r.keyCandidates(ctx, bundle)
	if err != nil {
		return nil, err
	}
	var needed []neededKey
	var gone, lost []string // lost: what no key reads, left to the removal (--remove-unreadable)
	for _, k := range p.Keys {
		provider, name, _ := strings.Cut(k, ":")
		groups, err := storedUnder(ctx, ec, cfgs, provider, name, decryptedBy(cands))
		if err != nil {
			return nil, err
		}
		if len(groups) == 0 {
			gone = append(gone, k)
			continue
		}
		for _, g := range groups {
			c, ok := encryption.FindKey(g.Sample, g.SampleKey, cands)
			if !ok && r.opts.RemoveUnreadable {
				lost = append(lost, fmt.Sprintf("%d %s under %s key %s", g.Count, g.Resource, provider, name))
				continue
			}
			if !ok {
				var tried []string
				for _, c := range cands {
					tried = append(tried, c.Source)
				}
				return nil, failure.Hinted(fmt.Errorf("no key material breakglass can read decrypts the %d %s stored under %s key %s (e.g. %s); tried %s",
					g.Count, g.Resource, provider, name, g.Example, orDefault(strings.Join(tried, ", "), "nothing")),
					"name the secrets bundle the data was written with: breakglass recover --secrets-bundle secrets.yaml (or in a copy of the runbook: `with: {bundle: secrets.yaml}` on its add-key step)",
					"without any key that reads them, the last resort is to remove those values after a verified backup: breakglass recover --remove-unreadable")
			}
			needed = append(needed, neededKey{resource: g.Resource, provider: provider, name: name, count: g.Count, example: g.Example, from: c})
		}
	}
	if len(needed) == 0 && len(lost) > 0 {
		return nil, skip("no key breakglass can find reads %s: left to the removal step", strings.Join(lost, ", "))
	}
	if len(needed) == 0 {
		return nil, skip("nothing stored uses %s any more", strings.Join(gone, ", "))
	}
	var mu sync.Mutex
	edits := map[string][]KeyEdit{}
	names := map[string][2]string{}
	plan, err := planEach(ctx, r.tc, "add-keys", r.flagsOptions(), func(_ context.Context, n *NodeChange, cfg talos.MachineConfig) error {
		out := cfg.Bytes
		defer func() { mu.Lock(); names[n.Node] = configNames(cfg.Bytes, out); mu.Unlock() }()
		var mine []KeyEdit
		for _, k := range needed {
			next, changed, err := encryption.AddReadKey(out, k.resource, encryption.ProviderType(k.provider), encryption.Key{Name: k.name, Secret: k.from.Secret})
			if errors.Is(err, encryption.ErrLegacyNames) {
				return fmt.Errorf("%s is needed: %w", k, err)
			}
			if err != nil {
				return err
			}
			if changed {
				out = next
				mine = append(mine, KeyEdit{Node: n.Node, Resource: k.resource, Provider: k.provider, Key: k.name, From: k.from.Source, ConfigHashBefore: n.ConfigHashBefore})
			}
		}
		if len(mine) == 0 {
			n.Action, n.Reason = "none", "its encryption configuration reads what is stored already"
			return nil
		}
		n.Action, n.newConfig = "add-keys", out
		n.ConfigHashAfter = talos.HashConfig(out)
		for i := range mine {
			mine[i].ConfigHashAfter = n.ConfigHashAfter
		}
		mu.Lock()
		edits[n.Node] = mine
		mu.Unlock()
		return nil
	})
	if plan == nil {
		return nil, err
	}
	res := &KeysResult{Plan: plan}
	for _, n := range plan.Nodes {
		res.Edits = append(res.Edits, edits[n.Node]...)
	}
	out := &Plan{View: keysView(plan, needed, edits, names, true), Result: res}
	if err != nil {
		return out, err
	}
	if err := plan.PlanErr(); err != nil {
		return out, err // a control plane left without the key stays unready
	}
	if !plan.Changes() {
		res.said = said("nothing to change: " + plan.Nodes[0].Reason)
		return out, nil
	}
	for _, k := range needed {
		out.Facts = append(out.Facts, r.keyFact(ec, bundle, k, needed))
	}
	out.Change = true
	out.Ask = []Question{{Text: fmt.Sprintf("Add %s, read-only, to the encryption configuration of %d control plane(s)?", describeNeeded(needed), plan.CountChanges())}}
	out.DryRun = "the nodes validated the change; nothing was applied"
	out.Record = keyEdits{Edits: res.Edits}
	out.Undo = undoneBy(ActionEncryptionKeyRemove, "add "+describeNeeded(needed)+" to the encryption configuration")
	out.Apply = func(ctx context.Context) (Result, error) {
		if err := r.applyEncryptionEdit(ctx, plan, "applying (mode no-reboot): kube-apiserver restarts with the key added"); err != nil {
			return res, err
		}
		res.said = said(fmt.Sprintf("added %s, read-only, on %d control plane(s); %s", describeNeeded(needed), plan.CountChanges(), keyStays))
		return res, nil
	}
	return out, nil
}

// keyFact: what is stored under the key is still there, the material
// from where the plan found it still decrypts some of it, and every value
// under its prefix still decrypts with a secret the plan adds (a value
// written since with a third secret of the name would stay unreadable).
func (r *run) keyFact(ec *etcd.Client, bundle string, k neededKey, needed []neededKey) Fact {
	return Fact{
		Says: fmt.Sprintf("%d %s stored under %s (e.g. %s), decrypted in memory by the key in %s", k.count, k.resource, k, k.example, k.from.Source),
		Holds: func(ctx context.Context) error {
			cands, cfgs, err := r.keyCandidates(ctx, bundle)
			if err != nil {
				return err
			}
			groups, err := storedUnder(ctx, ec, cfgs, k.provider, k.name, decryptedBy(cands))
			if err != nil {
				return err
			}
			stored, found := false, false
			for _, g := range groups {
				if g.Resource != k.resource || g.Class == noCandidate && r.opts.RemoveUnreadable {
					continue // what no key reads is the removal step's
				}
				stored = true
				c, ok := encryption.FindKey(g.Sample, g.SampleKey, cands)
				planned := ok && slices.ContainsFunc(needed, func(n neededKey) bool {
					return n.resource == k.resource && n.provider == k.provider && n.name == k.name && n.from.Secret.Equal(c.Secret)
				})
				if !planned {
					return fmt.Errorf("%d %s under %s (e.g. %s) decrypt with no key the plan adds: written since the plan; run it again", g.Count, k.resource, k, g.Example)
				}
				found = found || c.Secret.Equal(k.from.Secret)
			}
			switch {
			case !stored:
				return fmt.Errorf("nothing of %s is stored under %s any more", k.resource, k)
			case !found:
				return fmt.Errorf("the key in %s no longer decrypts what is stored under %s", k.from.Source, k)
			}
			return nil
		},
	}
}

func describeNeeded(needed []neededKey) string {
	var out []string
	for _, k := range needed {
		s := k.String()
		if k.resource != "secrets" {
			s += " (" + k.resource + ")"
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}

// keysView is the plan of an encryption key edit: names, sources and
// hashes; the nodes' dry-run diffs are not shown (they would hold the key).
func keysView(p *AdmissionPlan, needed []neededKey, edits map[string][]KeyEdit, names map[string][2]string, add bool) View {
	verb := "take the keys this incident added out of the encryption configuration"
	if add {
		verb = "add, for reading only, the keys that decrypt what etcd stores to the encryption configuration"
	}
	v := View{Head: fmt.Sprintf("Plan: %s on %d control plane(s)\n", verb, len(p.Nodes)+len(p.Failed))}
	for _, k := range needed {
		v.Head += fmt.Sprintf("  %d %s stored under %s (e.g. %s): decrypted in memory by the key in %s\n", k.count, k.resource, k, k.example, k.from.Source)
	}
	for _, n := range p.Nodes {
		var b strings.Builder
		if n.Action == "none" {
			fmt.Fprintf(&b, "    nothing to do: %s\n", n.Reason)
		}
		for _, e := range edits[n.Node] {
			if add {
				fmt.Fprintf(&b, "    %s: adds %s key %s after the key it writes with (new writes keep today's key)\n", e.Resource, e.Provider, e.Key)
			} else {
				fmt.Fprintf(&b, "    %s: takes out %s key %s\n", e.Resource, e.Provider, e.Key)
			}
		}
		if nm := names[n.Node]; nm[0] != "" {
			fmt.Fprintf(&b, "    encryption configuration today: %s\n", nm[0])
			if nm[1] != nm[0] {
				fmt.Fprintf(&b, "    after: %s\n", nm[1])
			}
		}
		if n.ConfigHashAfter != "" {
			fmt.Fprintf(&b, "    machine config %s -> %s (the KubeEtcdEncryptionConfig document only, written again in canonical form: the same configuration, its comments and layout not kept; every other document byte for byte)\n", n.ConfigHashBefore, n.ConfigHashAfter)
		}
		n.NodeDiff = "" // holds the key: never shown nor journaled
		v.Parts = append(v.Parts, ViewPart{Node: n.Node, About: fmt.Sprintf("cluster %s, Talos %s", orNone(n.Cluster), n.TalosVersion), Body: b.String()})
	}
	for _, f := range p.Failed {
		v.Foot += fmt.Sprintf("  node %s: cannot be planned (see below); it will not be changed\n", f)
	}
	v.Foot += "No key material is shown, journaled or backed up: the plan names where each key comes from.\n"
	return v
}

// configNames are the encryption configurations of two machine configs,
// names only.
func configNames(before, after []byte) [2]string {
	var out [2]string
	for i, b := range [][]byte{before, after} {
		if c, _, err := encryption.FromMachineConfig(b); err == nil {
			out[i] = c.String()
		}
	}
	return out
}

// journaledKeyEdits are the keys the incident's encryption.key.add steps
// recorded, oldest first.
func journaledKeyEdits(entries []Entry) []KeyEdit {
	var out []KeyEdit
	for _, e := range entries {
		if e.Kind != "apply" || e.Action != string(runbooks.ActionEncryptionKeyAdd) || len(e.Data) == 0 {
			continue
		}
		var ke keyEdits
		if json.Unmarshal(e.Data, &ke) == nil {
			out = append(out, ke.Edits...)
		}
	}
	return out
}

// removeEncryptionKeys takes out, by name, each key the incident added,
// where nothing stored uses its prefix any more; a key still used stays,
// and the step says why and what to do.
func (r *run) removeEncryptionKeys(ctx context.Context, _ Step, _ *EncryptionKeyRemoveParams) (*Plan, error) {
	recorded := journaledKeyEdits(r.entries)
	if len(recorded) == 0 {
		return nil, skip("this incident added no encryption key")
	}
	if err := r.tc.RequireAdmin("editing the encryption configuration in the machine config"); err != nil {
		return nil, err
	}
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("what etcd stores must be read before a key is taken out: %w", err)
	}
	cfgs := map[string]talos.MachineConfig{}
	for _, n := range r.tc.Nodes() {
		if mc, err := r.tc.ReadMachineConfig(ctx, n); err == nil {
			cfgs[n] = mc
		}
	}
	// A key stays while anything at all is stored under it (a rule may
	// name several resources, and the key is taken out of the whole rule)
	// or while a control plane still writes with it.
	// A key no control plane holds as an added read key any more (the
	// operator put the old config back, or made it the key a rule writes
	// with) has nothing left to take out: it is not weighed, and never
	// keeps the revert from ending.
	removable := map[addedKey]bool{}
	for _, e := range recorded {
		mc, read := cfgs[e.Node]
		if !read {
			removable[addedKey{e.Resource, e.Provider, e.Key}] = true // the plan says why that node is not planned
			continue
		}
		if _, changed, _ := encryption.RemoveKey(mc.Bytes, e.Resource, encryption.ProviderType(e.Provider), e.Key); changed {
			removable[addedKey{e.Resource, e.Provider, e.Key}] = true
		}
	}
	var kept []string
	inUse := map[addedKey]bool{}
	for _, e := range recorded {
		id := addedKey{e.Resource, e.Provider, e.Key}
		if _, seen := inUse[id]; seen || !removable[id] {
			continue
		}
		why, err := keyInUse(ctx, ec, cfgs, e.Resource, e.Provider, e.Key)
		if err != nil {
			return nil, err
		}
		inUse[id] = why != ""
		if why != "" {
			kept = append(kept, why)
		}
	}
	var mu sync.Mutex
	edits := map[string][]KeyEdit{}
	names := map[string][2]string{}
	plan, err := planEach(ctx, r.tc, "remove-keys", r.flagsOptions(), func(_ context.Context, n *NodeChange, cfg talos.MachineConfig) error {
		out := cfg.Bytes
		defer func() { mu.Lock(); names[n.Node] = configNames(cfg.Bytes, out); mu.Unlock() }()
		var mine []KeyEdit
		for _, e := range recorded {
			// Only a key weighed and found unused: one judged not removable
			// from the first read was never weighed, whatever the config
			// says by now (a second operator's apply in between).
			if used, weighed := inUse[addedKey{e.Resource, e.Provider, e.Key}]; e.Node != n.Node || !weighed || used {
				continue
			}
			next, changed, err := encryption.RemoveKey(out, e.Resource, encryption.ProviderType(e.Provider), e.Key)
			if errors.Is(err, encryption.ErrWritesWith) {
				continue // the key it writes with now: not the one added
			}
			if err != nil {
				return err
			}
			if changed {
				out = next
				mine = append(mine, KeyEdit{Node: n.Node, Resource: e.Resource, Provider: e.Provider, Key: e.Key, ConfigHashBefore: n.ConfigHashBefore})
			}
		}
		if len(mine) == 0 {
			n.Action, n.Reason = "none", "it holds no key this incident added any more (as a key it only reads with)"
			if n.ConfigHashBefore == recordedHashBefore(recorded, n.Node) {
				n.Reason = "its machine config is the one it had before this incident"
			}
			return nil
		}
		n.Action, n.newConfig = "remove-keys", out
		n.ConfigHashAfter = talos.HashConfig(out)
		mu.Lock()
		edits[n.Node] = mine
		mu.Unlock()
		return nil
	})
	if plan == nil {
		return nil, err
	}
	res := &KeysResult{Plan: plan, Kept: kept}
	for _, n := range plan.Nodes {
		res.Edits = append(res.Edits, edits[n.Node]...)
	}
	view := keysView(plan, nil, edits, names, false)
	for _, k := range kept {
		view.Foot += "  " + k + "\n"
	}
	out := &Plan{View: view, Result: res}
	if err != nil {
		return out, err
	}
	if err := plan.PlanErr(); err != nil {
		return out, err
	}
	if !plan.Changes() {
		if len(kept) > 0 {
			return out, failure.Hinted(fmt.Errorf("%w: %s", ErrConflict, strings.Join(kept, "; ")), "breakglass revert   # again, once nothing is stored under the key")
		}
		res.said = said("nothing to change: the added keys are out already")
		return out, nil
	}
	out.Change = true
	out.Ask = []Question{{Text: fmt.Sprintf("Take the added keys out of the encryption configuration of %d control plane(s)?", plan.CountChanges())}}
	out.DryRun = "the nodes validated the change; nothing was applied"
	out.Undo = nothingToUndo("take the added keys out of the encryption configuration", "nothing stored uses them any more")
	for id, used := range inUse {
		if !used {
			out.Facts = append(out.Facts, r.keyUnusedFact(ec, id))
		}
	}
	slices.SortFunc(out.Facts, func(a, b Fact) int { return strings.Compare(a.Says, b.Says) })
	out.Apply = func(ctx context.Context) (Result, error) {
		if err := r.applyEncryptionEdit(ctx, plan, "applying (mode no-reboot)"); err != nil {
			return res, err
		}
		msg := fmt.Sprintf("took the added keys out on %d control plane(s)", plan.CountChanges())
		if len(kept) > 0 {
			msg += "; " + strings.Join(kept, "; ")
		}
		res.said = said(msg)
		if len(kept) > 0 {
			return res, failure.Hinted(fmt.Errorf("%w: %s", ErrConflict, strings.Join(kept, "; ")), "breakglass revert   # again, once nothing is stored under the key")
		}
		return res, nil
	}
	return out, nil
}

// applyEncryptionEdit applies each node's planned config, its config re-read
// first (a change since the plan stops that node): machined re-renders the
// static pod and kube-apiserver restarts with the new file.
func (r *run) applyEncryptionEdit(ctx context.Context, plan *AdmissionPlan, applying string) error {
	failed, stop := plan.eachChange(ctx, func(n *NodeChange) error {
		say := func(format string, args ...any) { r.progress(n.Node, fmt.Sprintf(format, args...)) }
		if err := unchangedSincePlan(ctx, r.tc, n); err != nil {
			return err
		}
		say("%s", applying)
		if err := applyPlanned(ctx, r.fx.Nodes, n, talos.ApplyRequest{Config: n.newConfig, Mode: talos.NoReboot}, say); err != nil {
			return err
		}
		say("applied: the static pod is re-rendered with the new encryption configuration")
		return nil
	})
	if stop != nil {
		return stop
	}
	return failures(failed, len(plan.Nodes)-len(failed))
}

// keyInUse says why provider:key must stay ("" when it may go): values
// stored under it, of any resource, or a control plane that writes with it.
func keyInUse(ctx context.Context, ec *etcd.Client, cfgs map[string]talos.MachineConfig, resource, provider, key string) (string, error) {
	if why, twins, err := secondKeyInUse(ctx, ec, cfgs, resource, provider, key); twins || err != nil {
		return why, err
	}
	groups, err := storedUnder(ctx, ec, cfgs, provider, key, nil)
	if err != nil {
		return "", err
	}
	for _, g := range groups {
		return fmt.Sprintf("%s key %s stays: %d %s are still stored under it (e.g. %s); write them again under the key kube-apiserver writes with "+
			"(kubectl get %s -A -o json | kubectl replace -f -), then revert again", provider, key, g.Count, g.Resource, g.Example, g.Resource), nil
	}
	// Anywhere else in etcd: custom resources (and services, nodes,
	// ingresses) are not stored under their resource's name.
	count, example := 0, ""
	err = ec.EachValue(ctx, "", func(etcdKey string, value []byte) {
		if st := encryption.Classify(value); st.Form == encryption.Encrypted && string(st.Provider) == provider && st.Key == key {
			count++
			if example == "" {
				example = etcdKey
			}
		}
	})
	if err != nil {
		return "", err
	}
	if count > 0 {
		return fmt.Sprintf("%s key %s stays: %d values are still stored under it (e.g. %s); write them again under the key kube-apiserver writes with "+
			"(kubectl get RESOURCE -A -o json | kubectl replace -f -), then revert again", provider, key, count, example), nil
	}
	var writers []string
	for n, mc := range cfgs {
		if c, _, err := encryption.FromMachineConfig(mc.Bytes); err == nil && c.WritesWith(encryption.ProviderType(provider), key) {
			writers = append(writers, n)
		}
	}
	if len(writers) > 0 {
		slices.Sort(writers)
		return fmt.Sprintf("%s key %s stays: %s still write(s) with it (the first key of a rule); give every control plane the same encryption configuration, then revert again",
			provider, key, strings.Join(writers, ", ")), nil
	}
	return "", nil
}

// secondKeyInUse is keyInUse where a control plane's rule for resource
// holds the name twice (a secret regenerated under the same name, the old
// one added back beside it): the prefix k8s:enc:PROVIDER:v1:NAME: is then
// the regenerated key's too, so a writer is told by the added key's secret,
// and what is stored under it by trial decryption, in memory, of every
// value in etcd (custom resources are not stored under their resource's
// name). twins is false where no control plane holds the name twice.
func secondKeyInUse(ctx context.Context, ec *etcd.Client, cfgs map[string]talos.MachineConfig, resource, provider, name string) (why string, twins bool, err error) {
	t := encryption.ProviderType(provider)
	var added []encryption.Key
	for _, mc := range cfgs {
		if c, _, err := encryption.FromMachineConfig(mc.Bytes); err == nil {
			if k, ok := c.SecondOfName(resource, t, name); ok && !slices.ContainsFunc(added, func(a encryption.Key) bool { return a.Secret.Equal(k.Secret) }) {
				added = append(added, k)
			}
		}
	}
	if len(added) == 0 {
		return "", false, nil
	}
	// A control plane that writes with it first: values written again
	// through it would be written with it again.
	var writers []string
	for n, mc := range cfgs {
		if c, _, err := encryption.FromMachineConfig(mc.Bytes); err == nil && slices.ContainsFunc(added, func(k encryption.Key) bool { return c.WritesWithSecret(t, k) }) {
			writers = append(writers, n)
		}
	}
	if len(writers) > 0 {
		slices.Sort(writers)
		return fmt.Sprintf("the second %s key %s (the one added beside the key of that name kube-apiserver writes with) stays: %s still write(s) with its secret; "+
			"give every control plane the same encryption configuration, then revert again", provider, name, strings.Join(writers, ", ")), true, nil
	}
	count, example := 0, ""
	err = ec.EachValue(ctx, "", func(etcdKey string, value []byte) {
		for _, k := range added {
			if encryption.TryKey(t, k, etcdKey, value).Outcome == encryption.Decrypts {
				count++
				if example == "" {
					example = etcdKey
				}
				return
			}
		}
	})
	if err != nil {
		return "", true, err
	}
	if count > 0 {
		return fmt.Sprintf("the second %s key %s (the one added beside the key of that name kube-apiserver writes with) stays: %d values are still written with its secret (e.g. %s); "+
			"write them again (kubectl get RESOURCE -A -o json | kubectl replace -f -): kube-apiserver writes them with the first key %s; then revert again", provider, name, count, example, name), true, nil
	}
	return "", true, nil
}

// recordedHashBefore is the hash of node's machine config before the
// incident's first key edit on it ("" if none).
func recordedHashBefore(recorded []KeyEdit, node string) string {
	for _, e := range recorded {
		if e.Node == node {
			return e.ConfigHashBefore
		}
	}
	return ""
}

// addedKey is a key an incident added: to the rule for resource.
type addedKey struct{ resource, provider, name string }

// keyUnusedFact: nothing is stored under the key, and no control plane
// writes with it, read again just before the key is taken out.
func (r *run) keyUnusedFact(ec *etcd.Client, k addedKey) Fact {
	return Fact{
		Says: fmt.Sprintf("nothing is stored under %s key %s and no control plane writes with it", k.provider, k.name),
		Holds: func(ctx context.Context) error {
			cfgs := map[string]talos.MachineConfig{}
			for _, n := range r.tc.Nodes() {
				mc, err := r.tc.ReadMachineConfig(ctx, n)
				if err != nil {
					return err
				}
				cfgs[n] = mc
			}
			why, err := keyInUse(ctx, ec, cfgs, k.resource, k.provider, k.name)
			if err != nil {
				return err
			}
			if why != "" {
				return errors.New(why)
			}
			return nil
		},
	}
}
