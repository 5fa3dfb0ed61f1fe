// Package testfs gives tests directories on file systems that refuse
// writes the way real ones do: full (ENOSPC) and read-only (EROFS). They
// are small tmpfs mounts, so a test that needs one skips where mounting is
// not allowed (not root, no CAP_SYS_ADMIN, not Linux). For tests only.
package testfs

import (
	"os"
	"path/filepath"
)

// TB is the part of testing.TB this package uses (package testing stays
// out of it).
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Full is a new directory on a 64 KiB file system filled to the last
// byte: every write of data under it fails with ENOSPC (a tmpfs still
// makes empty files and directories: they take no block).
func Full(t TB) string {
	t.Helper()
	dir := mountTmpfs(t, "size=64k")
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatalf("testfs: %v", err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatalf("testfs: %v", err) // a tmpfs directory takes no block
	}
	return state
}

// ReadOnly is a new, empty directory on a read-only file system: every
// write under it fails with EROFS.
func ReadOnly(t TB) string {
	t.Helper()
	dir := mountTmpfs(t, "size=64k")
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o700); err != nil {
		t.Fatalf("testfs: %v", err)
	}
	remountReadOnly(t, dir)
	return filepath.Join(dir, "state")
}
