package etcd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// DeleteRecord is what a delete leaves in the state directory: what was
// removed, when, and where its backup is, so that the incident can be told
// and undone later.
type DeleteRecord struct {
	APIVersion  string        `json:"apiVersion"` // breakglass.dev/v1
	Kind        string        `json:"kind"`       // EtcdDeletion
	Time        time.Time     `json:"time"`
	ClusterID   ID            `json:"clusterID"`
	Prefix      string        `json:"prefix"`
	Revision    int64         `json:"revision"` // of the delete transaction
	ToolVersion string        `json:"toolVersion"`
	BackupPath  string        `json:"backupPath"`
	Snapshot    string        `json:"snapshotPath,omitempty"`
	Keys        []RecordedKey `json:"keys"`
}

// RecordedKey is one deleted key.
type RecordedKey struct {
	Key         string     `json:"key"`
	Resource    kinds.Kind `json:"resource"`
	Name        string     `json:"name"`
	ModRevision int64      `json:"modRevision"`
	SHA256      string     `json:"sha256"`
}

// writeDeleteRecord writes the record of res into dir (created 0700 if needed) through w.
func writeDeleteRecord(w Writer, dir string, res *DeleteResult, toolVersion string, now time.Time) (string, error) {
	rec := DeleteRecord{
		APIVersion: BackupAPIVersion, Kind: "EtcdDeletion", Time: now.UTC().Truncate(time.Second),
		ClusterID: res.Plan.Cluster.ClusterID, Prefix: res.Plan.Prefix, Revision: res.Revision, ToolVersion: toolVersion,
		BackupPath: absPath(res.BackupPath),
	}
	if res.Snapshot != nil {
		rec.Snapshot = absPath(res.Snapshot.Path)
	}
	for _, k := range res.Backup.Keys {
		rec.Keys = append(rec.Keys, RecordedKey{Key: k.Key, Resource: k.Resource, Name: k.Name, ModRevision: k.ModRevision, SHA256: k.SHA256})
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "deleted-"+now.UTC().Format("20060102T150405Z")+"-"+sanitize(res.Backup.Keys[0].Name)+".json")
	err = w.CreateFile(path, func(f io.Writer) error {
		_, err := f.Write(append(data, '\n'))
		return err
	}, func(p string) error {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var back DeleteRecord
		if err := json.Unmarshal(b, &back); err != nil || len(back.Keys) != len(rec.Keys) {
			return fmt.Errorf("deletion record %s failed verification: %v", p, err)
		}
		return nil
	})
	return path, err
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
