package etcd

// Whose data a copy holds. A snapshot's size and sha256 trailer say it was
// not damaged in transit; they say nothing of what it is: 1 KiB of random
// bytes followed by their own sha256 passes both, and so does a whole
// snapshot of another cluster. A copy is read here as etcd reads it (a bbolt
// database with etcd's buckets), and its owner is told by its content: an
// etcd database holds no cluster ID, and member IDs change with every
// replacement and every bootstrap from a copy, but the kube-system
// namespace's UID is made once, when kube-apiserver first starts on an
// empty etcd, and stays for the cluster's life.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// CopyFacts is what a copy of an etcd database says of itself, read from its
// content: what a step that uses it checks again before it does.
type CopyFacts struct {
	SnapshotInfo
	// Snapshot: the file carries a sha256 trailer (etcd's snapshot); false:
	// a member's database file as is.
	Snapshot bool `json:"snapshot"`
	// Revision is the copy's latest revision; Compacted the revision it is
	// marked compacted at (0: none).
	Revision  int64 `json:"revision"`
	Compacted int64 `json:"compacted,omitempty"`
	// ClusterUID is the kube-system namespace's UID stored in the copy: the
	// Kubernetes cluster whose data it is ("" when it holds none).
	ClusterUID string `json:"clusterUID,omitempty"`
	// Keys counts the live keys under the prefix.
	Keys int `json:"keys"`
}

// Identity is the cluster a copy must belong to: the kube-system namespace's
// UID and the revision the cluster is at (0: unknown, not compared).
type Identity struct {
	ClusterUID string `json:"clusterUID"`
	Revision   int64  `json:"revision,omitempty"`
}

// kubeSystemKey is where kube-apiserver keeps the kube-system namespace.
func kubeSystemKey(prefix string) string { return prefix + "/namespaces/kube-system" }

// ReadCopy reads the file at path as an etcd database: a snapshot (its size
// and sha256 trailer checked, then the database before the trailer) or a
// member's database file (bbolt's magic and whole pages), opened read-only
// as etcd's backend and required to hold etcd's key bucket; then its
// revision, compaction mark and the kube-system UID under prefix. The file
// is never written; a snapshot's database is read from a private temporary
// copy.
func ReadCopy(path string, snapshot bool, prefix string) (*CopyFacts, error) {
	var (
		info *SnapshotInfo
		err  error
	)
	if snapshot {
		info, err = VerifySnapshotFile(path)
	} else {
		info, err = VerifyDBFile(path)
	}
	if err != nil {
		return nil, err
	}
	facts := &CopyFacts{SnapshotInfo: *info, Snapshot: snapshot}
	db := path
	if snapshot {
		tmp, err := os.CreateTemp("", "breakglass-copy-*.db")
		if err != nil {
			return nil, err
		}
		defer os.Remove(tmp.Name())
		if err := copyDB(tmp, path, true); err != nil {
			tmp.Close()
			return nil, err
		}
		if err := tmp.Close(); err != nil {
			return nil, err
		}
		if err := checkDBFileHead(tmp.Name()); err != nil {
			return nil, err
		}
		db = tmp.Name()
	}
	err = withDB(db, true, func(tx *bolt.Tx) error {
		if facts.Revision, err = latestRevision(tx); err != nil {
			return err
		}
		if meta := tx.Bucket(metaBucket); meta != nil {
			if v := meta.Get(scheduledCompact); len(v) >= 8 {
				facts.Compacted = int64(binary.BigEndian.Uint64(v))
			}
		}
		facts.ClusterUID, facts.Keys, err = scanKeys(tx, prefix)
		return err
	})
	if err != nil {
		var se *SnapshotError
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, &SnapshotError{Reason: fmt.Sprintf("%s is not an etcd database: %v", filepath.Base(path), err)}
	}
	return facts, nil
}

// checkDBFileHead checks a database file's first meta page (VerifyDBFile's
// check without the hash): a snapshot whose trailer matches may still hold
// anything before it.
func checkDBFileHead(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	head := make([]byte, boltPageHeader+12)
	if _, err := f.ReadAt(head, 0); err != nil {
		return &SnapshotError{Reason: "too short to be a database"}
	}
	return checkDBHead(head, st.Size())
}

// scanKeys walks the key bucket in revision order: the kube-system UID as
// last written (deleted: none) and how many keys under prefix are live.
func scanKeys(tx *bolt.Tx, prefix string) (uid string, live int, err error) {
	b := tx.Bucket(keyBucket)
	if b == nil {
		return "", 0, &SnapshotError{Reason: "no key bucket: not an etcd database"}
	}
	want := []byte(kubeSystemKey(prefix))
	alive := map[string]bool{}
	err = b.ForEach(func(k, v []byte) error {
		if len(k) < 17 || k[8] != '_' {
			return &SnapshotError{Reason: fmt.Sprintf("key bucket entry %x is no revision", k)}
		}
		if len(v) == 0 { // the bump's marker revision holds no key
			return nil
		}
		var kv mvccpb.KeyValue
		if err := kv.Unmarshal(v); err != nil {
			return &SnapshotError{Reason: fmt.Sprintf("revision %d holds no etcd key-value: %v", binary.BigEndian.Uint64(k), err)}
		}
		tombstone := len(k) > 17 && k[17] == 't'
		if bytes.HasPrefix(kv.Key, []byte(prefix+"/")) {
			alive[string(kv.Key)] = !tombstone
		}
		if bytes.Equal(kv.Key, want) {
			uid = ""
			if !tombstone {
				uid = objectUID(kv.Value)
			}
		}
		return nil
	})
	for _, ok := range alive {
		if ok {
			live++
		}
	}
	return uid, live, err
}

// objectUID is metadata.uid of a stored object (protobuf or JSON; "" when
// encrypted or unreadable).
func objectUID(v []byte) string {
	if bytes.HasPrefix(bytes.TrimLeft(v, " \t\r\n"), []byte("{")) {
		var o struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
		}
		if json.Unmarshal(v, &o) != nil {
			return ""
		}
		return o.Metadata.UID
	}
	unknown, ok := bytes.CutPrefix(v, protobufMagic)
	if !ok {
		return ""
	}
	raw, ok := protoField(unknown, 2) // runtime.Unknown.raw
	if !ok {
		return ""
	}
	meta, ok := protoField(raw, 1) // the object's metadata
	if !ok {
		return ""
	}
	uid, _ := protoField(meta, 5) // ObjectMeta.uid
	return string(uid)
}

// Identity reads the cluster's identity from the member reached: the
// kube-system UID and the revision. Serializable, so that a member without
// quorum still answers from its own data.
func (c *Client) Identity(ctx context.Context) (Identity, error) {
	resp, err := c.kv.Get(ctx, kubeSystemKey(c.prefix), clientv3.WithSerializable())
	if err != nil {
		return Identity{}, c.wrap(err)
	}
	id := Identity{Revision: resp.Header.Revision}
	if len(resp.Kvs) == 1 {
		id.ClusterUID = objectUID(resp.Kvs[0].Value)
	}
	return id, nil
}

// CheckOf says whether the copy belongs to the cluster: its kube-system UID
// is the cluster's, and its revision is not beyond the cluster's (a copy
// from the future was taken elsewhere). A cluster whose UID is unknown
// ("") cannot vouch for any copy.
func (f *CopyFacts) CheckOf(want Identity) error {
	switch {
	case want.ClusterUID == "":
		return &ForeignCopyError{Path: f.Path, Reason: "the cluster's kube-system namespace could not be read, so nothing tells that the copy is of this cluster"}
	case f.ClusterUID == "":
		return &ForeignCopyError{Path: f.Path, Reason: "it holds no kube-system namespace (or only encrypted), so nothing tells whose cluster it is"}
	case f.ClusterUID != want.ClusterUID:
		return &ForeignCopyError{Path: f.Path, Reason: fmt.Sprintf("its kube-system namespace is %s, this cluster's is %s: it is another cluster's data", f.ClusterUID, want.ClusterUID)}
	case want.Revision > 0 && f.Revision > want.Revision:
		return &ForeignCopyError{Path: f.Path, Reason: fmt.Sprintf("its revision %d is beyond this cluster's %d: it was not taken from this cluster as it is", f.Revision, want.Revision)}
	}
	return nil
}

// Same says whether the file still is the copy these facts describe (its
// size and sha256), read again from disk.
func (f *CopyFacts) Same() error {
	got, err := ReadCopy(f.Path, f.Snapshot, "")
	if err != nil {
		return &CopyChangedError{Path: f.Path, Reason: err.Error()}
	}
	if got.Size != f.Size || got.SHA256 != f.SHA256 {
		return &CopyChangedError{Path: f.Path, Reason: fmt.Sprintf("it is now %d bytes, sha256 %s; it was %d bytes, sha256 %s when taken", got.Size, got.SHA256, f.Size, f.SHA256)}
	}
	return nil
}

// ForeignCopyError is a copy that is not of this cluster, or cannot be told to be.
type ForeignCopyError struct {
	Path, Reason string
}

func (e *ForeignCopyError) Error() string {
	return fmt.Sprintf("%s is not a copy of this cluster: %s", termsafe.String(e.Path), e.Reason)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *ForeignCopyError) Hints() []string {
	return []string{"name a snapshot taken from this cluster (breakglass etcd snapshot, or talosctl etcd snapshot on one of its control planes)"}
}

func (e *ForeignCopyError) Unwrap() error { return failure.Refused }

// CopyChangedError is a copy that is no longer what was taken: cut short,
// damaged or replaced since.
type CopyChangedError struct {
	Path, Reason string
}

func (e *CopyChangedError) Error() string {
	return fmt.Sprintf("the copy %s changed since it was taken: %s", termsafe.String(e.Path), e.Reason)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *CopyChangedError) Hints() []string {
	return []string{"nothing was done with it; take the copy again, or find out what changed the file"}
}

func (e *CopyChangedError) Unwrap() error { return failure.Verification }
