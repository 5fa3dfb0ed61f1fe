// Package golden compares test output with golden files: `go test -update`
// rewrites them. For tests only; it imports nothing of the project.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TB is the part of testing.TB a comparison needs (this package does not
// import testing, so that nothing links it by accident).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Check compares got with the file at path, or writes it there with -update.
func Check(t TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// Generated checks that the committed file at path is what its generator
// makes today (want); regenerate is the command that rewrites it, unlike
// the golden files, which -update does.
func Generated(t TB, path, want, regenerate string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v (generate it with: %s)", path, err, regenerate)
	}
	if string(got) != want {
		t.Fatalf("%s is out of date: run %s", path, regenerate)
	}
}
