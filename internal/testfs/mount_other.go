//go:build !linux

package testfs

func mountTmpfs(t TB, _ string) string {
	t.Helper()
	t.Skipf("testfs mounts a tmpfs: Linux only")
	return ""
}

func remountReadOnly(TB, string) {}
