package lab

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"

	"github.com/breakglass-dev/breakglass/internal/atomicfile"
	"github.com/breakglass-dev/breakglass/internal/encryption"
)

// CandidateConfig is where an encryption scenario stopped before its
// change writes the regenerated machine config it would apply.
func CandidateConfig(l *Lab) string { return filepath.Join(l.Dir, "candidate-controlplane.yaml") }

// encryptionBeforeUpgrade plays an encryption scenario up to its change:
// Secrets written under the legacy rendering (secretbox key2; aescbc key1
// where the provider is dropped), then the
// first control plane's machine config regenerated as the scenario does,
// written to CandidateConfig (0600: it holds the keys), never applied.
func encryptionBeforeUpgrade(ctx context.Context, l *Lab, scenario string, tl *Timeline) error {
	var fresh [32]byte // a new bundle's secretbox secret
	if _, err := rand.Read(fresh[:]); err != nil {
		return err
	}
	regenerate, what := RenameSecretboxKey, "by Talos v1.14.0-beta.0's generator (KubeEtcdEncryptionConfig: secretbox key1, the same secret, no identity)"
	switch scenario {
	case ScenarioEncryptionSecretRegenerated:
		regenerate = func(cfg []byte) ([]byte, error) { return RegenerateSecretboxKey(cfg, encryption.SecretOf(fresh[:])) }
		what = "from a new secrets bundle (KubeEtcdEncryptionConfig: secretbox key2, another secret, identity)"
	case ScenarioEncryptionProviderDropped:
		regenerate = func(cfg []byte) ([]byte, error) { return DropAESCBCProvider(cfg, encryption.SecretOf(fresh[:])) }
		what = "for the 1.14 contract with a secretbox key (KubeEtcdEncryptionConfig: secretbox key2, identity; the aescbc provider dropped)"
	}
	written := secretsUnderLegacyKey
	if scenario == ScenarioEncryptionProviderDropped {
		written = func(ctx context.Context, l *Lab, tl *Timeline) error {
			return writeSecrets(ctx, l, tl, "as a cluster created before Talos 1.3 renders it (aescbc key1, identity)", "k8s:enc:aescbc:v1:key1:")
		}
	}
	if err := written(ctx, l, tl); err != nil {
		return err
	}
	first := l.Nodes()[0]
	return tl.Step(fmt.Sprintf("the machine config of %s regenerated %s, written to %s and not applied", first, what, CandidateConfig(l)), func() error {
		tc, err := l.TalosClient(ctx)
		if err != nil {
			return err
		}
		defer tc.Close()
		cfg, err := tc.ReadMachineConfig(ctx, first)
		if err != nil {
			return err
		}
		out, err := regenerate(cfg.Bytes)
		if err != nil {
			return err
		}
		return atomicfile.WriteFile(CandidateConfig(l), out, 0o600)
	})
}
