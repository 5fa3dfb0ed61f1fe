package etcd

// A restore without a revision bump takes etcd back to a lower revision than
// its clients saw: a client that watched before comes back with a resource
// version etcd has not reached, is accepted, and waits in silence
// (kubernetes#118501, measured in lab/README.md). etcd's answer is
// `etcdutl snapshot restore --bump-revision N --mark-compacted`; Talos's
// `bootstrap --recover-from` sets neither. BumpRevision does the same to the
// copy before it is uploaded: the latest revision moved N past the copy's
// and marked compacted, so that such a watch ends with "required revision
// has been compacted" (410 Gone through kube-apiserver) and its client lists
// again.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RevisionBump is how far past the copy's revision a restore moves etcd's:
// etcd's documented example (etcdutl snapshot restore --bump-revision), far
// beyond any revision a client can have seen since the copy.
const RevisionBump = 1_000_000_000

// etcd's backend layout (server/v3/storage/schema, storage/mvcc): bucket
// "key" holds each revision as 8 bytes main, '_', 8 bytes sub (plus 't' for
// a deletion), big-endian; bucket "meta" holds the compaction marks.
var (
	keyBucket        = []byte("key")
	metaBucket       = []byte("meta")
	scheduledCompact = []byte("scheduledCompactRev")
	finishedCompact  = []byte("finishedCompactRev")
)

// BumpInfo is a bumped database file.
type BumpInfo struct {
	SnapshotInfo
	From     int64 `json:"from"`     // the copy's revision
	Revision int64 `json:"revision"` // the revision etcd starts at, compacted up to it
}

// BumpRevision writes to dst (atomically, through w) the database of the
// copy at src (a snapshot, its hash trailer checked and dropped, or a
// database file) with its latest revision moved by bump and marked
// compacted, as etcdutl's restore does; dst is read back and its revision
// checked. A bootstrap from dst skips the hash check: a database file has
// no trailer.
func BumpRevision(src string, snapshot bool, dst string, bump int64, w Writer) (*BumpInfo, error) {
	if bump <= 0 {
		return nil, fmt.Errorf("etcd: revision bump %d: must be positive", bump)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".bump-*.db")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := copyDB(tmp, src, snapshot); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	info := &BumpInfo{}
	if err := withDB(tmp.Name(), false, func(tx *bolt.Tx) error {
		if info.From, err = latestRevision(tx); err != nil {
			return err
		}
		info.Revision = info.From + bump
		rev := revisionKey(info.Revision)
		if err := tx.Bucket(keyBucket).Put(rev, []byte{}); err != nil {
			return err
		}
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return meta.Put(scheduledCompact, rev)
	}); err != nil {
		return nil, fmt.Errorf("etcd: bump the copy's revision: %w", err)
	}
	bumped, err := os.Open(tmp.Name())
	if err != nil {
		return nil, err
	}
	defer bumped.Close()
	written, err := WriteDBCopy(bumped, dst, w)
	if err != nil {
		return nil, err
	}
	info.SnapshotInfo = *written
	got, compacted, err := ReadRevision(dst)
	if err != nil {
		return nil, err
	}
	if got != info.Revision || compacted != info.Revision {
		return nil, &SnapshotError{Reason: fmt.Sprintf("bumped copy read back at revision %d, compacted at %d; want both %d", got, compacted, info.Revision)}
	}
	return info, nil
}

// ReadRevision gives a database file's latest revision and the revision
// it is marked compacted at (0: none).
func ReadRevision(path string) (latest, compacted int64, err error) {
	err = withDB(path, true, func(tx *bolt.Tx) error {
		if latest, err = latestRevision(tx); err != nil {
			return err
		}
		if meta := tx.Bucket(metaBucket); meta != nil {
			if v := meta.Get(scheduledCompact); len(v) >= 8 {
				compacted = int64(binary.BigEndian.Uint64(v))
			}
		}
		return nil
	})
	return latest, compacted, err
}

func withDB(path string, readOnly bool, fn func(*bolt.Tx) error) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: readOnly, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("etcd: open database %s: %w", path, err)
	}
	if readOnly {
		err = db.View(fn)
	} else {
		err = db.Update(fn)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// latestRevision is the main revision of the last entry of bucket "key",
// or, when compaction left none there (or nothing was ever written), the
// revision compacted at: etcd starts at the higher.
func latestRevision(tx *bolt.Tx) (int64, error) {
	b := tx.Bucket(keyBucket)
	if b == nil {
		return 0, &SnapshotError{Reason: "no key bucket: not an etcd database"}
	}
	var latest int64
	if k, _ := b.Cursor().Last(); k != nil {
		if len(k) < 17 || k[8] != '_' {
			return 0, &SnapshotError{Reason: fmt.Sprintf("key bucket entry %x is no revision", k)}
		}
		latest = int64(binary.BigEndian.Uint64(k))
	}
	if meta := tx.Bucket(metaBucket); meta != nil {
		for _, name := range [][]byte{scheduledCompact, finishedCompact} {
			if v := meta.Get(name); len(v) >= 8 {
				latest = max(latest, int64(binary.BigEndian.Uint64(v)))
			}
		}
	}
	return latest, nil
}

// revisionKey is etcd's bytes for revision {main, 0}.
func revisionKey(main int64) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, main)
	b.WriteByte('_')
	_ = binary.Write(&b, binary.BigEndian, int64(0))
	return b.Bytes()
}

// copyDB copies the database in src to dst: a snapshot's, its sha256
// trailer checked and left out, or a database file whole.
func copyDB(dst io.Writer, src string, snapshot bool) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if !snapshot {
		_, err = io.Copy(dst, f)
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := VerifySnapshotFile(src); err != nil {
		return err
	}
	_, err = io.Copy(dst, io.LimitReader(f, st.Size()-32))
	return err
}
