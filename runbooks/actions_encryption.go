package runbooks

// Encryption-at-rest drift: stored data that no longer decrypts with the
// encryption configuration the control planes render (a key renamed by a
// regenerated config, a secret regenerated under the same name, a provider
// dropped). encryption.key.add gives kube-apiserver back, for reading only,
// a provider and key that read what is stored.

import (
	"fmt"
	"slices"
	"strings"
)

// ActionEncryptionKeyAdd adds read-only keys to the encryption configuration.
const ActionEncryptionKeyAdd Action = "encryption.key.add"

// EncryptionKeyAddParams are encryption.key.add's parameters.
type EncryptionKeyAddParams struct {
	// Keys are PROVIDER:NAME (secretbox:key2) to add for reading; the
	// diagnosis fills them when none are named.
	Keys []string `yaml:"keys" json:"keys"`
	// Bundle is a Talos secrets bundle (talosctl gen secrets) whose
	// encryption secrets are tried as key material, beside the other
	// control planes' machine configs. Its content is never recorded.
	Bundle string `yaml:"bundle,omitempty" json:"bundle,omitempty"`
}

func (*EncryptionKeyAddParams) Action() Action { return ActionEncryptionKeyAdd }

func (p *EncryptionKeyAddParams) check() []fieldError {
	if p.Keys == nil {
		p.Keys = []string{}
	}
	var errs []fieldError
	for i, k := range p.Keys {
		prov, name, ok := strings.Cut(k, ":")
		if !ok || name == "" || !slices.Contains([]string{"secretbox", "aescbc", "aesgcm"}, prov) {
			errs = append(errs, fieldError{field: "keys", index: i, msg: fmt.Sprintf("%q is not PROVIDER:NAME with a provider of secretbox, aescbc or aesgcm", k),
				hint: "name the key as its stored values name it: k8s:enc:secretbox:v1:key2: is secretbox:key2"})
		}
	}
	return errs
}

func init() {
	i := slices.IndexFunc(actionTable, func(a ActionInfo) bool { return a.Name == ActionAdmissionDisable }) // extraargs.remove (inserted there too) comes first
	actionTable = slices.Insert(actionTable, i+1, ActionInfo{
		Name: ActionEncryptionKeyAdd,
		Summary: "add to every control plane's encryption configuration, through its machine config and for reading only (after the key it writes with), " +
			"a provider and key that decrypt what etcd stores: the key material found by a trial decryption, in memory, among the other control planes' machine configs and the secrets bundle named; " +
			"breakglass revert takes it out again once nothing stored uses it",
		ChangesCluster: true,
		newParams:      func() Params { return &EncryptionKeyAddParams{Keys: []string{}} },
		params: []paramDoc{
			{"keys", "list of PROVIDER:NAME", "the keys to add, as the stored values name them", "those the diagnosis names (diagnose must run before)"},
			{"bundle", "path", "a Talos secrets bundle whose encryption secrets are tried as key material", "none: the control planes' machine configs only"},
		},
	})
}

// ActionEncryptionUnreadableRemove is the last resort of an encryption
// drift: the values no key can read, backed up and removed from etcd.
const ActionEncryptionUnreadableRemove Action = "encryption.unreadable.remove"

// EncryptionUnreadableRemoveParams are encryption.unreadable.remove's
// parameters. It acts only when the operator asked for it (recover
// --remove-unreadable): values lost to the cluster are not removed by a
// runbook alone.
type EncryptionUnreadableRemoveParams struct {
	// Bundle is a secrets bundle whose encryption secrets count as keys
	// that read (a value one of them decrypts is never removed).
	Bundle string `yaml:"bundle,omitempty" json:"bundle,omitempty"`
}

func (*EncryptionUnreadableRemoveParams) Action() Action { return ActionEncryptionUnreadableRemove }

func (p *EncryptionUnreadableRemoveParams) check() []fieldError { return nil }

func init() {
	i := slices.IndexFunc(actionTable, func(a ActionInfo) bool { return a.Name == ActionEncryptionKeyAdd })
	actionTable = slices.Insert(actionTable, i+1, ActionInfo{
		Name: ActionEncryptionUnreadableRemove,
		Summary: "the last resort, only with recover --remove-unreadable: the encrypted values that no key breakglass can find decrypts (every control plane's machine config, the secrets bundle named) " +
			"are listed one by one with what each is, backed up byte for byte (written, read back and verified), and removed from etcd in transactions guarded by their revisions; " +
			"breakglass revert --objects puts them back",
		ChangesCluster: true,
		newParams:      func() Params { return &EncryptionUnreadableRemoveParams{} },
		params: []paramDoc{
			{"bundle", "path", "a Talos secrets bundle whose encryption secrets count as keys that read", "the add-key step's bundle, else recover --secrets-bundle"},
		},
	})
}
