package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/breakglass-dev/breakglass/internal/encryption"
)

// The node's encryptionconfig.yaml is what Talos renders from the machine
// config: with both legacy secrets set (a cluster from before Talos 1.3 that
// added secretbox), secretbox key2, then aescbc key1, then identity.
func TestNodeEncryptionConfigIsTalos(t *testing.T) {
	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := generate.NewInput("enc", "https://127.0.0.1:6443", "1.34.4", generate.WithSecretsBundle(bundle))
	if err != nil {
		t.Fatal(err)
	}
	prov, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	text, err := prov.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	aescbc := encryption.SecretOf([]byte(strings.Repeat("a", 32))).Reveal()
	text = []byte(strings.Replace(string(text), "    secretboxEncryptionSecret:", "    aescbcEncryptionSecret: "+aescbc+"\n    secretboxEncryptionSecret:", 1))
	cfg, err := configloader.NewFromBytes(text)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster().AESCBCEncryptionSecret() != aescbc || cfg.Cluster().SecretboxEncryptionSecret() == "" {
		t.Fatal("the config does not hold both secrets")
	}
	dir := t.TempDir()
	if err := writeNodeSecrets(dir, "127.0.0.11", cfg.Cluster(), text); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, fileEncryption))
	if err != nil {
		t.Fatal(err)
	}
	want, err := encryption.Legacy(cfg.Cluster().SecretboxEncryptionSecret(), aescbc).File()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != string(want) {
		t.Errorf("encryptionconfig.yaml is not Talos's rendering")
	}
	got, err := encryption.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "secrets: secretbox (key2), aescbc (key1), identity" {
		t.Errorf("encryptionconfig.yaml holds %s", got)
	}
}
