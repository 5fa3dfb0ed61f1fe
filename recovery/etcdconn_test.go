package recovery_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// SaveSnapshot takes the snapshot through the Talos API when no etcd
// endpoint or certificate is given (os:operator is enough), straight from
// etcd otherwise; a dry run writes nothing and opens no stream.
func TestSaveSnapshot(t *testing.T) {
	env := newEngineEnv(t, envOptions{})
	operator, err := env.cluster.Talosconfig(role.Operator)
	if err != nil {
		t.Fatal(err)
	}
	topts := talos.Options{Talosconfig: operator}
	direct := recovery.EtcdOptions{Endpoints: env.etcd.Endpoints, CACert: env.etcd.CAFile, Cert: env.etcd.CertFile, Key: env.etcd.KeyFile}
	node := env.cluster.Nodes[0].IP
	for _, tc := range []struct {
		name   string
		etcd   recovery.EtcdOptions
		source string
	}{
		{"talos", recovery.EtcdOptions{}, "the Talos API on node " + node},
		{"etcd", direct, "etcd " + env.etcd.Endpoints[0]},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "dry.db")
		info, source, err := recovery.SaveSnapshot(t.Context(), tc.etcd, topts, recovery.Effects{}, path)
		if err != nil || !info.DryRun || source != tc.source {
			t.Fatalf("%s: dry run: %+v %q %v", tc.name, info, source, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: a dry run wrote %v", tc.name, entries)
		}
		path = filepath.Join(dir, "snap.db")
		info, source, err = recovery.SaveSnapshot(t.Context(), tc.etcd, topts, recovery.Live(nil), path)
		if err != nil || info.DryRun || source != tc.source || info.Size == 0 {
			t.Fatalf("%s: %+v %q %v", tc.name, info, source, err)
		}
		if got, err := etcd.VerifySnapshotFile(path); err != nil || got.SHA256 != info.SHA256 {
			t.Errorf("%s: the file does not verify: %+v %v", tc.name, got, err)
		}
		if _, _, err := recovery.SaveSnapshot(t.Context(), tc.etcd, topts, recovery.Live(nil), path); err == nil || !strings.Contains(err.Error(), "snap.db") {
			t.Errorf("%s: an existing file was not refused: %v", tc.name, err)
		}
	}
}
