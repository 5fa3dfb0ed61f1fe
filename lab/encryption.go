package lab

// Encryption at rest on the lab: each kube-apiserver start reads the
// encryptionconfig.yaml its node renders from its running machine config
// now (the legacy cluster secrets, or Talos 1.14's KubeEtcdEncryptionConfig
// document), as Talos re-renders it into the secrets directory.

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// nodeOptions are the nodes' options: their Talos version.
func nodeOptions(opts Options) []talostest.NodeOptions {
	if opts.TalosVersion == "" {
		return nil
	}
	n := opts.Nodes
	if n == 0 {
		n = 1
	}
	out := make([]talostest.NodeOptions, n)
	for i := range out {
		out[i].TalosVersion = opts.TalosVersion
	}
	return out
}

// writeEncryption renders the node's encryptionconfig.yaml from its running
// config, before a kube-apiserver starts there.
func (l *Lab) writeEncryption(ip string) error {
	n := l.Cluster.Node(ip)
	if n == nil {
		return fmt.Errorf("no node %s", ip)
	}
	c, _, err := encryption.FromMachineConfig(n.RunningConfig())
	if err != nil {
		return fmt.Errorf("node %s: %w", ip, err)
	}
	f, err := c.File()
	if err != nil {
		return err
	}
	path := filepath.Join(l.nodeDir(ip), fileEncryption)
	tmp := path + ".part"
	if err := os.WriteFile(tmp, f, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
