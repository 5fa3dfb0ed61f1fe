package etcd

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// A member's database file copied off its node (talosctl cp
// /var/lib/etcd/member/snap/db) when no member serves a snapshot any more:
// a bbolt file with no sha256 trailer, from which Talos bootstraps with
// --recover-skip-hash-check.

// boltMagic is what bbolt writes in both meta pages, right after the page
// header (boltPageHeader): a file without it is no database.
const boltMagic = 0xED0CDAED

// WriteDBCopy writes a member's database file from r to a new file at path
// through w (atomically, never over another file): a stream that is no
// bbolt database of whole pages is refused before anything is published;
// the file is then read back and checked against the stream.
func WriteDBCopy(r io.Reader, path string, w Writer) (*SnapshotInfo, error) {
	if w == nil {
		w = DryRunWriter(nil)
	}
	info := &SnapshotInfo{Path: path, DryRun: w.DryRun()}
	err := w.CreateFile(path, func(f io.Writer) error {
		h := sha256.New()
		head := &headWriter{max: boltPageHeader + 12}
		n, err := io.Copy(io.MultiWriter(f, h, head), r)
		info.Size, info.SHA256 = n, hex.EncodeToString(h.Sum(nil))
		if err != nil {
			return err
		}
		return checkDBHead(head.b, n)
	}, func(path string) error {
		got, err := VerifyDBFile(path)
		if err != nil {
			return fmt.Errorf("database copy written but failed verification: %w", err)
		}
		if got.Size != info.Size || got.SHA256 != info.SHA256 {
			return &SnapshotError{Reason: "file read back differs from the copy"}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return info, nil
}

// headWriter keeps the first max bytes written.
type headWriter struct {
	b   []byte
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// checkDBHead checks a database file's first meta page and its size.
func checkDBHead(head []byte, size int64) error {
	if len(head) < boltPageHeader+12 {
		return &SnapshotError{Reason: "too short to be a database file"}
	}
	magic := binary.LittleEndian.Uint32(head[boltPageHeader:])
	pageSize := int64(binary.LittleEndian.Uint32(head[boltPageHeader+8:]))
	if magic != boltMagic || pageSize < 512 || pageSize > 1<<16 {
		return &SnapshotError{Reason: "not a bbolt database (no magic in its first meta page)"}
	}
	if size%pageSize != 0 {
		return &SnapshotError{Reason: fmt.Sprintf("size %d is not a whole number of %d-byte pages: cut short", size, pageSize)}
	}
	return nil
}

// VerifyDBFile checks that path holds a bbolt database of whole pages (its
// first meta page carries bbolt's magic and a page size that divides the
// file), and gives its size and sha256.
func VerifyDBFile(path string) (*SnapshotInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	head := &headWriter{max: boltPageHeader + 12}
	n, err := io.Copy(io.MultiWriter(h, head), f)
	if err != nil {
		return nil, err
	}
	if err := checkDBHead(head.b, n); err != nil {
		return nil, err
	}
	return &SnapshotInfo{Path: path, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// StartsAsDatabase tells, from the file's first bytes only, whether it
// begins as an etcd database does (bbolt's magic in its first meta page): a
// snapshot or a member's database file, whole or cut short, and not a
// checksum file or anything else kept beside them. Whether it is a whole
// one, and whose, ReadCopy says.
func StartsAsDatabase(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, boltPageHeader+12)
	if _, err := io.ReadFull(f, head); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(head[boltPageHeader:]) == boltMagic
}
