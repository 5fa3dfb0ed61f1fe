package recovery

// The last resort of an encryption drift (encryption.unreadable.remove):
// the encrypted values no key breakglass can find decrypts, listed one by
// one, backed up byte for byte and removed from etcd, so that
// kube-apiserver can list what remains. Only when the operator asked
// (recover --remove-unreadable): a runbook alone never removes data.
// kube-apiserver cannot start, so this goes to etcd directly; the values
// come back, unreadable as they were, with revert --objects.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	register((*run).removeUnreadable)
}

// lostBatch is how many keys one guarded transaction removes: etcd takes
// at most 128 operations in a transaction by default (--max-txn-ops).
const lostBatch = 100

// noCandidate is what decryptedBy says of a value no candidate decrypts.
const noCandidate = "no candidate"

// LostResult is what encryption.unreadable.remove removed and where each
// batch's backup is (Backup: the first, as etcd.delete names its own).
type LostResult struct {
	said
	Backup  string   `json:"backup,omitempty"`
	Backups []string `json:"backups,omitempty"`
	Deleted []string `json:"deleted,omitempty"`
}

// lostValue is one value no key reads: its key, its resource and how it is
// stored.
type lostValue struct {
	key, resource, stored string
}

// lostValues are the encrypted values of every resource the control planes
// encrypt that no candidate decrypts and no control plane's configuration
// reads (a second judge: a key name FindKey would cut short, a provider it
// cannot try), and what breakglass cannot judge (KMS, providers it does
// not know, keys of odd shape): named, never removed. A configuration that
// cannot be read refuses it: its keys would be missed.
func (r *run) lostValues(ctx context.Context, ec *etcd.Client, bundle string) (lost []lostValue, unjudged []string, err error) {
	cands, cfgs, err := r.keyCandidates(ctx, bundle)
	if err != nil {
		return nil, nil, err
	}
	var configs []encryption.Config
	for node, mc := range cfgs {
		c, _, err := encryption.FromMachineConfig(mc.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("the encryption configuration of %s cannot be read (%v): nothing is removed while a control plane's keys are unknown", node, err)
		}
		configs = append(configs, c)
	}
	for _, res := range storedResources(cfgs) {
		groups, err := ec.StoredSplit(ctx, res, lostSplit(res, cands, configs))
		if err != nil {
			return nil, nil, err
		}
		for _, g := range groups {
			switch {
			case g.Class != noCandidate || g.Stored.Form != encryption.Encrypted && g.Stored.Form != encryption.KMSForm:
			case g.Stored.Form == encryption.KMSForm || !slices.Contains([]encryption.ProviderType{encryption.Secretbox, encryption.AESCBC, encryption.AESGCM}, g.Stored.Provider):
				unjudged = append(unjudged, fmt.Sprintf("%d %s stored as %s (e.g. %s): breakglass cannot decrypt them to judge, so leaves them", g.Count, res, g.What, termsafe.String(g.Example)))
			default:
				for _, k := range g.Keys {
					if !etcd.StorageKey(ec.Prefix(), k) {
						unjudged = append(unjudged, fmt.Sprintf("%s: a key kube-apiserver would not write, left alone", termsafe.String(k)))
						continue
					}
					lost = append(lost, lostValue{key: k, resource: res, stored: g.What})
				}
			}
		}
	}
	return lost, unjudged, nil
}

// lostSplit is decryptedBy, with each control plane's configuration as a
// second judge of a value no candidate decrypts.
func lostSplit(resource string, cands []encryption.Candidate, configs []encryption.Config) func(string, []byte) string {
	byCandidate := decryptedBy(cands)
	return func(etcdKey string, value []byte) string {
		class := byCandidate(etcdKey, value)
		if class != noCandidate {
			return class
		}
		for _, c := range configs {
			if c.Read(resource, etcdKey, value).Outcome != encryption.DoesNotDecrypt {
				return "read by a control plane's configuration"
			}
		}
		return noCandidate
	}
}

// lostBundle is the secrets bundle whose secrets count as keys that read:
// the step's, the add-key step's, else --secrets-bundle.
func (r *run) lostBundle(p *runbooks.EncryptionUnreadableRemoveParams) string {
	if p.Bundle != "" {
		return p.Bundle
	}
	for _, s := range r.opts.Steps {
		if a, ok := s.Params.(*runbooks.EncryptionKeyAddParams); ok && a.Bundle != "" {
			return a.Bundle
		}
	}
	return r.opts.SecretsBundle
}

func (r *run) removeUnreadable(ctx context.Context, s Step, p *runbooks.EncryptionUnreadableRemoveParams) (*Plan, error) {
	if !r.opts.RemoveUnreadable {
		return nil, skip("values no key reads are removed only when asked (breakglass recover --remove-unreadable)")
	}
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("what etcd stores must be read to find what no key reads: %w", err)
	}
	bundle := r.lostBundle(p)
	lost, unjudged, err := r.lostValues(ctx, ec, bundle)
	if err != nil {
		return nil, err
	}
	if len(lost) == 0 {
		if done, _ := filepath.Glob(filepath.Join(r.journal.Dir, "backup-"+s.Name+"*.json")); len(done) > 0 {
			return &Plan{Result: &LostResult{said: said("nothing left that no key reads; removed in an earlier run, backups " + strings.Join(done, ", ")), Backup: done[0], Backups: done}}, nil
		}
		return nil, skip("%s", strings.Join(append([]string{"every encrypted value breakglass can judge decrypts with a key the control planes hold"}, unjudged...), "; "))
	}
	if err := noneReady(ctx, r); err != nil {
		return nil, err
	}
	keys := make([]string, len(lost))
	for i, v := range lost {
		keys[i] = v.key
	}
	del, err := ec.PlanUnreadable(ctx, keys)
	if err != nil {
		return nil, err
	}
	batches := del.Split(lostBatch)
	paths := r.freeBackupPaths(s.Name, len(batches))
	res := &LostResult{Backup: paths[0], Backups: paths}
	plan := &Plan{View: lostView(lost, unjudged, bundle), Result: res}
	for i, b := range batches {
		if _, err := ec.Execute(ctx, b, etcd.DryRunWriter(ec), etcd.ExecuteOptions{BackupPath: paths[i], ToolVersion: r.opts.ToolVersion}); err != nil {
			return plan, err
		}
	}
	plan.Change, plan.DryRun = true, fmt.Sprintf("would back up and remove %d value(s) no key reads", len(lost))
	plan.Facts = []Fact{r.stillLostFact(ec, bundle, keys)}
	plan.Undo = undoneBy(ActionEtcdRestore, fmt.Sprintf("remove %d value(s) no key reads from etcd", len(lost)))
	plan.Undo.Asked = "--objects"
	plan.Ask = []Question{{Text: fmt.Sprintf("This removes %d value(s) no key reads from etcd, after a verified backup; whatever wrote them must write them again.", len(lost)), Word: "remove"}}
	plan.Apply = func(ctx context.Context) (Result, error) {
		out := &LostResult{Backup: paths[0]}
		for i, b := range batches {
			// Before the transaction: a run killed after it still names its backup (revert --objects).
			if err := r.journal.Append(Entry{Kind: "note", Step: s.Name, Message: "backup goes to " + paths[i], Data: journalData(&DeleteResult{Backup: paths[i]})}); err != nil {
				return out, err
			}
			done, err := ec.Execute(ctx, b, r.fx.EtcdWriter(ec), etcd.ExecuteOptions{BackupPath: paths[i], ToolVersion: r.opts.ToolVersion})
			if done != nil && done.Backup != nil {
				out.Backups = append(out.Backups, paths[i])
				out.Deleted = append(out.Deleted, done.Deleted...)
			}
			if err != nil {
				return out, err
			}
		}
		out.said = said(fmt.Sprintf("removed %d value(s) no key reads; backed up in %s (breakglass revert --objects puts them back)", len(out.Deleted), strings.Join(out.Backups, ", ")))
		return out, nil
	}
	return plan, nil
}

// stillLostFact: each value planned for removal still decrypts with no key
// breakglass finds now (a control plane or the bundle may hold it since);
// the transactions guard that none was written again.
func (r *run) stillLostFact(ec *etcd.Client, bundle string, keys []string) Fact {
	return Fact{
		Says: fmt.Sprintf("%d value(s) decrypt with no key the control planes or the secrets bundle hold", len(keys)),
		Holds: func(ctx context.Context) error {
			if err := noneReady(ctx, r); err != nil {
				return err
			}
			lost, _, err := r.lostValues(ctx, ec, bundle)
			if err != nil {
				return err
			}
			for _, k := range keys {
				if !slices.ContainsFunc(lost, func(v lostValue) bool { return v.key == k }) {
					return fmt.Errorf("%s is no longer a value no key reads (a key that reads it was found, or it was removed or written again): run it again", termsafe.String(k))
				}
			}
			return nil
		},
	}
}

// freeBackupPaths are n backup paths of the step, none there yet.
func (r *run) freeBackupPaths(step string, n int) []string {
	var out []string
	for i := 1; len(out) < n; i++ {
		if p := r.backupPath(step, i); !fileExists(p) && !fileExists(p+".part") {
			out = append(out, p)
		}
	}
	return out
}

// lostView lists each value with what it is, as far as its key tells
// (its content is unreadable).
func lostView(lost []lostValue, unjudged []string, bundle string) View {
	var b strings.Builder
	from := "every control plane's machine config"
	if bundle != "" {
		from += " and the secrets bundle " + bundle
	}
	fmt.Fprintf(&b, "The last resort: %d encrypted value(s) decrypt with no key found in %s.\n", len(lost), from)
	b.WriteString("Each is backed up byte for byte into the incident directory (written, read back, verified), then removed from etcd only if unchanged since it was read:\n")
	for _, v := range lost {
		fmt.Fprintf(&b, "  %s   %s, stored as %s\n", termsafe.String(v.key), termsafe.String(whatLost(v.resource, v.key)), v.stored)
	}
	for _, u := range unjudged {
		fmt.Fprintf(&b, "Left: %s\n", u)
	}
	b.WriteString("They are lost to the cluster: whatever wrote them must write them again (helm upgrade, a new token, the operator that owns them).\n")
	b.WriteString("breakglass revert --objects puts them back, byte for byte and unreadable as they are, should their key be found.\n")
	return Text(b.String())
}

// whatLost says what a value is from its key alone: its content, type
// included, is what cannot be read.
func whatLost(resource, key string) string {
	name := key[strings.LastIndexByte(key, '/')+1:]
	if resource != "secrets" {
		return "a stored " + resource + " object"
	}
	switch {
	case strings.HasPrefix(name, "sh.helm.release.v1."):
		rel := strings.TrimPrefix(name, "sh.helm.release.v1.")
		if i := strings.LastIndex(rel, ".v"); i > 0 {
			return fmt.Sprintf("a Helm release (%s, revision %s)", rel[:i], rel[i+2:])
		}
		return "a Helm release"
	case strings.HasPrefix(name, "bootstrap-token-"):
		return "a bootstrap token"
	case strings.Contains(name, "-token-"):
		return "a service-account token, by its name"
	}
	return "a Secret"
}

// noneReady refuses the last resort while a kube-apiserver is ready: one
// that serves may hold, from before its configuration changed, a key
// breakglass cannot see, and what it wrote with it would be removed.
func noneReady(ctx context.Context, r *run) error {
	hs, err := CheckHealth(ctx, r.tc)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if h.Ready {
			return failure.Hinted(fmt.Errorf("%w: kube-apiserver on %s is ready: it may hold a key no machine config shows (a configuration changed, not restarted yet), so nothing is removed while one serves", ErrConflict, h.Node),
				"find the key it runs with (the previous machine config, the secrets bundle: --secrets-bundle FILE), or run it once no kube-apiserver is ready")
		}
	}
	return nil
}
