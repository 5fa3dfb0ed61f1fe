// Package testfs gives tests directories on file systems that refuse
// writes the way real ones do: full (ENOSPC) and read-only (EROFS). They
// are small tmpfs mounts, so a test that needs one skips where mounting is
// not allowed (not root, no CAP_SYS_ADMIN, not Linux). For tests only.
package testfs

import (
	"os"
	"path/filepath"
	"strings"
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

// Tree lists every path under the deepest directory of path's that exists
// (path itself, or the nearest parent): what a test compares before and
// after, to find what was left behind.
func Tree(path string) string {
	for _, err := os.Stat(path); err != nil && path != filepath.Dir(path); _, err = os.Stat(path) {
		path = filepath.Dir(path)
	}
	var paths []string
	_ = filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return nil
	})
	return strings.Join(paths, " ")
}
