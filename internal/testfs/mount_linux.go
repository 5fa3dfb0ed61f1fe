package testfs

import (
	"os"
	"path/filepath"
	"syscall"
)

// cannot skips a test that needs a mount this machine refuses, except in
// CI (CI=true), where it fails: no test skips there in silence.
func cannot(t TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

func mountTmpfs(t TB, opts string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := syscall.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("testfs: %v", err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		cannot(t, "cannot mount a tmpfs here (%v): needs root with CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

func remountReadOnly(t TB, dir string) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		cannot(t, "cannot remount a tmpfs read-only here: %v", err)
	}
}
