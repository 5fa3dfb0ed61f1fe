package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/testfs"
)

// Issue 29: a full or read-only state directory gave exit 1 with the raw
// system error once the run had begun, and left an incident behind that
// never started. The command line's check finds it first (a byte written
// and synced, where an empty file is still made on a full disk): exit 2,
// the cause, the next step, nothing dialled and nothing left behind.
func TestStateDirFullOrReadOnly(t *testing.T) {
	for _, fs := range []struct {
		name string
		dir  func(testfs.TB) string
		msg  string
		hint string
	}{
		{"full", testfs.Full, `cannot be used: .*: no space left on device`, `free space on its file system \(df -h .*\), or give --state-dir a directory on another one`},
		{"read-only", testfs.ReadOnly, `cannot be used: .*read-only file system`, `mounted read-only: give --state-dir a directory on a writable one`},
		{"full, not made yet", func(t testfs.TB) string { return filepath.Join(testfs.Full(t), "new") }, `new cannot be created: .*: no space left on device`, `df -h`},
		{"read-only, not made yet", func(t testfs.TB) string { return filepath.Join(testfs.ReadOnly(t), "a", "b") }, `b cannot be created: .*read-only file system`, `mounted read-only`},
	} {
		for _, args := range []string{
			"admission disable --yes",
			"recover --yes",
			"etcd delete some-webhook --yes --etcd-endpoints https://127.0.0.1:1",
			"etcd backup --etcd-endpoints https://127.0.0.1:1",
		} {
			t.Run(fs.name+"/"+args, func(t *testing.T) {
				dir := fs.dir(t)
				home := t.TempDir()
				t.Setenv("HOME", home)
				t.Setenv("BREAKGLASS_STATE_DIR", dir)
				before := testfs.Tree(dir)
				var out, errOut bytes.Buffer
				argv := append([]string{"breakglass", "--talosconfig", filepath.Join(home, "absent")}, strings.Fields(args)...)
				code := run(context.Background(), argv, streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
				if code != 2 || !regexp.MustCompile(`breakglass: state directory .*`+fs.msg).Match(errOut.Bytes()) || !regexp.MustCompile(`hint: .*`+fs.hint).Match(errOut.Bytes()) {
					t.Errorf("exit %d, want 2 matching %q with a hint %q:\n%s", code, fs.msg, fs.hint, errOut.String())
				}
				if after := testfs.Tree(dir); after != before {
					t.Errorf("left behind:\nbefore %s\nafter  %s", before, after)
				}
			})
		}
	}
}
