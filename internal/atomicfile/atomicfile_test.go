package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "new", "backup.json")
	if err := CheckCreate(path); err != nil {
		t.Fatalf("CheckCreate before: %v", err)
	}
	if err := Create(path, 0o600, writeString("one")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Fatalf("content %q", b)
	}
	for _, p := range []string{path, filepath.Dir(path)} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]fs.FileMode{false: 0o600, true: 0o700 | fs.ModeDir}[st.IsDir()]; st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), want)
		}
	}
	if _, err := os.Lstat(path + ".part"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf(".part left behind: %v", err)
	}

	// Never overwritten.
	var ee *ExistsError
	if err := Create(path, 0o600, writeString("two")); !errors.As(err, &ee) || ee.Path != path || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second Create: %v", err)
	}
	if err := CheckCreate(path); !errors.As(err, &ee) || ee.Path != path {
		t.Fatalf("CheckCreate after: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Fatalf("overwritten: %q", b)
	}

	// A rejected fill leaves nothing.
	other := filepath.Join(dir, "other")
	if err := Create(other, 0o600, func(io.Writer) error { return errors.New("bad data") }); err == nil || err.Error() != "bad data" {
		t.Fatalf("rejected fill: %v", err)
	}
	for _, p := range []string{other, other + ".part"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after a rejected fill", p)
		}
	}

	// A .part left by an interrupted run is named, and kept.
	if err := os.WriteFile(other+".part", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Create(other, 0o600, writeString("x")); !errors.As(err, &ee) || ee.Path != other+".part" {
		t.Fatalf("leftover .part: %v", err)
	}
	if err := CheckCreate(other); !errors.As(err, &ee) || ee.Path != other+".part" {
		t.Fatalf("CheckCreate with a leftover .part: %v", err)
	}
	if _, err := os.Lstat(other + ".part"); err != nil {
		t.Errorf("leftover .part removed: %v", err)
	}

	// A file where the directory should be.
	if err := CheckCreate(filepath.Join(path, "x")); err == nil {
		t.Error("CheckCreate under a file")
	}
	if err := Create(filepath.Join(path, "x"), 0o600, writeString("x")); err == nil {
		t.Error("Create under a file")
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "node.json")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Fatalf("content %q, want %q", b, content)
		}
	}
	if st, _ := os.Stat(path); st.Mode() != 0o600 {
		t.Errorf("mode %v", st.Mode())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := WriteFile(filepath.Join(path, "x"), nil, 0o600); err == nil {
		t.Error("WriteFile under a file")
	}
}
