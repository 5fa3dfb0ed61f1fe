package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/atomicfile"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/talos/configedit"
)

// State is breakglass's state directory: what it changed, so that it can be
// put back exactly. It never holds a machine config (they hold CA keys).
type State struct{ Dir string }

// AdmissionRecord is what breakglass changed on one node's extraArgs.
type AdmissionRecord struct {
	SchemaVersion int      `json:"schemaVersion"`
	Cluster       string   `json:"cluster"`
	Node          string   `json:"node"`
	TalosVersion  string   `json:"talosVersion"`
	Plugins       []string `json:"plugins"`
	// Edits are the extraArgs edits breakglass made, oldest first (a second
	// disable stacks on the first); restore undoes them newest first.
	Edits            []configedit.Record `json:"edits"`
	ConfigHashBefore string              `json:"configHashBefore"`
	ConfigHashAfter  string              `json:"configHashAfter"`
	Mode             string              `json:"mode"`                 // no-reboot or try
	RollbackAt       *time.Time          `json:"rollbackAt,omitempty"` // try mode: when the node reverts by itself
	DisabledAt       time.Time           `json:"disabledAt"`
	By               string              `json:"by"` // user@host
	ToolVersion      string              `json:"toolVersion"`
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// etcdDir is where the records of one etcd cluster are kept:
// STATE-DIR/etcd/CLUSTER-ID (backups/, deleted/).
func (s State) etcdDir(ctx context.Context, ec *etcd.Client) (string, error) {
	info, err := ec.Cluster(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.Dir, "etcd", info.ClusterID.String()), nil
}

// BackupObjects backs up the named admission objects of the kinds (every
// one of them when no name is given) into a new verified file through fx
// (a dry run writes nothing): out, or a new file under
// STATE-DIR/etcd/CLUSTER-ID/backups when out is "".
func (s State) BackupObjects(ctx context.Context, ec *etcd.Client, fx Effects, names []string, of []kinds.Kind, out, toolVersion string) (*etcd.BackupResult, error) {
	if out == "" {
		dir, err := s.etcdDir(ctx, ec)
		if err != nil {
			return nil, err
		}
		out = filepath.Join(dir, "backups", "etcd-backup-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	return ec.BackupObjects(ctx, names, of, out, toolVersion, fx.EtcdWriter(ec))
}

func (s State) admissionPath(cluster, node string) string {
	if cluster == "" {
		cluster = "_unnamed"
	}
	return filepath.Join(s.Dir, "clusters", unsafeName.ReplaceAllString(cluster, "_"), "admission", unsafeName.ReplaceAllString(node, "_")+".json")
}

// LoadAdmission returns the record for a node, or nil when there is none.
func (s State) LoadAdmission(cluster, node string) (*AdmissionRecord, error) {
	b, err := os.ReadFile(s.admissionPath(cluster, node))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r AdmissionRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("state record %s is damaged: %w", s.admissionPath(cluster, node), err)
	}
	return &r, nil
}

// SaveAdmission writes the record atomically, before the change is applied,
// so that an interrupted run can always be explained and reverted.
func (s State) SaveAdmission(r AdmissionRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(s.admissionPath(r.Cluster, r.Node), append(b, '\n'), 0o600)
}

// DeleteAdmission forgets a node's record once the change is reverted.
func (s State) DeleteAdmission(cluster, node string) error {
	err := os.Remove(s.admissionPath(cluster, node))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// WriteFileAtomic writes data so that the file is either absent, the old
// version or the whole new one (atomicfile.WriteFile).
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return atomicfile.WriteFile(path, data, perm)
}

// whoami names the operator in records: user@host.
func whoami() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
