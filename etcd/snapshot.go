package etcd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
)

// SnapshotInfo describes a verified snapshot file.
type SnapshotInfo struct {
	Path   string `json:"path"`
	DryRun bool   `json:"dryRun"`
	Size   int64  `json:"size"`
	// SHA256 is the hex sha256 of the database, as carried in the snapshot's trailer.
	SHA256      string `json:"sha256,omitempty"`
	EtcdVersion string `json:"etcdVersion,omitempty"`
}

// Snapshot streams a full snapshot from etcd (Maintenance.Snapshot) into a
// new file at path through w; see WriteSnapshot for the checks. With a
// dry-run writer the snapshot is not even requested.
func (c *Client) Snapshot(ctx context.Context, path string, w Writer) (*SnapshotInfo, error) {
	info := &SnapshotInfo{Path: path, DryRun: w.DryRun()}
	err := w.CreateFile(path, func(f io.Writer) error {
		// A stream that may take minutes: its deadline is on progress.
		sctx, watch := watchStalls(ctx, c.readTimeout, endpointOf(nil, nil, c.endpoints), "the snapshot stream")
		defer watch.stop()
		resp, err := c.kv.SnapshotWithVersion(sctx)
		if err != nil {
			if stalled := watch.stalled(); stalled != nil {
				return stalled
			}
			return c.wrap(err)
		}
		defer resp.Snapshot.Close()
		info.EtcdVersion = resp.Version
		watch.r = resp.Snapshot
		size, sum, err := copySnapshot(f, watch)
		if err != nil {
			return c.wrap(err)
		}
		info.Size, info.SHA256 = size, sum
		return nil
	}, verifySnapshotInto(info))
	if err != nil {
		return nil, err
	}
	return info, nil
}

// WriteSnapshot writes a snapshot stream (for instance the Talos API's
// EtcdSnapshot) into a new file at path through w: PATH.part, checked while
// streaming (size a multiple of 512 plus 32, the last 32 bytes the sha256 of
// the rest; a failing stream leaves no file), renamed without overwriting,
// then read back and checked again. With a dry-run writer r is not read;
// a nil w writes for real.
func WriteSnapshot(r io.Reader, path string, w Writer) (*SnapshotInfo, error) {
	if w == nil {
		w = DryRunWriter(nil) // no writer given: write nothing
	}
	info := &SnapshotInfo{Path: path, DryRun: w.DryRun()}
	err := w.CreateFile(path, func(f io.Writer) error {
		size, sum, err := copySnapshot(f, r)
		info.Size, info.SHA256 = size, sum
		return err
	}, verifySnapshotInto(info))
	if err != nil {
		return nil, err
	}
	return info, nil
}

// VerifySnapshotFile checks a snapshot file's size and sha256 trailer.
func VerifySnapshotFile(path string) (*SnapshotInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, sum, err := copySnapshot(io.Discard, f)
	if err != nil {
		return nil, err
	}
	return &SnapshotInfo{Path: path, Size: size, SHA256: sum}, nil
}

func verifySnapshotInto(info *SnapshotInfo) func(string) error {
	return func(path string) error {
		got, err := VerifySnapshotFile(path)
		if err != nil {
			return fmt.Errorf("snapshot written but failed verification: %w", err)
		}
		if got.Size != info.Size || got.SHA256 != info.SHA256 {
			return &SnapshotError{Reason: "file read back differs from the stream"}
		}
		return nil
	}
}

// copySnapshot copies r to dst while hashing all but the last 32 bytes,
// then checks those against the hash.
func copySnapshot(dst io.Writer, r io.Reader) (size int64, sum string, err error) {
	t := &trailerHash{h: sha256.New()}
	n, err := io.Copy(io.MultiWriter(dst, t), r)
	if err != nil {
		return n, "", err
	}
	if n <= sha256.Size || n%512 != sha256.Size {
		return n, "", &SnapshotError{Reason: fmt.Sprintf("size %d is not a multiple of 512 plus a 32-byte sha256 trailer", n)}
	}
	got := t.h.Sum(nil)
	if string(got) != string(t.tail) {
		return n, "", &SnapshotError{Reason: fmt.Sprintf("sha256 trailer %x does not match the data (%x)", t.tail, got)}
	}
	return n, hex.EncodeToString(got), nil
}

// trailerHash hashes everything written except the last sha256.Size bytes,
// which it keeps in tail.
type trailerHash struct {
	h    hash.Hash
	tail []byte
	buf  []byte
}

func (t *trailerHash) Write(p []byte) (int, error) {
	t.buf = append(append(t.buf[:0], t.tail...), p...)
	if cut := len(t.buf) - sha256.Size; cut > 0 {
		t.h.Write(t.buf[:cut])
		t.tail = append(t.tail[:0], t.buf[cut:]...)
	} else {
		t.tail = append(t.tail[:0], t.buf...)
	}
	return len(p), nil
}
