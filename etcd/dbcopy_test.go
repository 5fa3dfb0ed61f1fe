package etcd

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A member's database copied off its node: written atomically, read back
// and checked to be a bbolt file of whole pages; a file cut short or no
// database at all is refused, and nothing is left at the path.
func TestWriteDBCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "member.db")
	db, err := bolt.Open(src, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		return b.Put([]byte("/registry/x"), bytes.Repeat([]byte("v"), 10000))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "etcd.db")
	info, err := WriteDBCopy(bytes.NewReader(whole), out, RealWriter(nil))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(whole)) || info.SHA256 == "" {
		t.Errorf("copy %+v of %d bytes", info, len(whole))
	}
	for name, data := range map[string][]byte{
		"cut short":   whole[:len(whole)-100],
		"no database": bytes.Repeat([]byte("x"), 8192),
	} {
		bad := filepath.Join(dir, "bad.db")
		if _, err := WriteDBCopy(bytes.NewReader(data), bad, RealWriter(nil)); err == nil {
			t.Errorf("%s: copy accepted", name)
		}
		if _, err := os.Stat(bad); !os.IsNotExist(err) {
			t.Errorf("%s: a file was left at the path: %v", name, err)
		}
	}
}
