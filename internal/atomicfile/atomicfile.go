// Package atomicfile writes files so that a crash leaves either the old
// state or the whole new file, never a torn one: the data goes to a .part
// file beside the target, is fsynced, then moved into place, and the
// directory is fsynced. It imports nothing of the project.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ExistsError is a file that Create will not overwrite: the target, or a
// .part left by an interrupted run (someone should look before it goes).
type ExistsError struct{ Path string }

func (e *ExistsError) Error() string { return e.Path + " already exists" }

func (e *ExistsError) Unwrap() error { return fs.ErrExist }

// Create writes a new file the careful way: PATH.part created with O_EXCL
// and mode perm, filled, fsynced, then linked to PATH (which fails if PATH
// exists, so nothing is ever overwritten, even in a race), the .part removed
// and the directory fsynced. A missing directory is created (0700) and made
// durable. fill may reject its data: the .part is then removed. An existing
// PATH or PATH.part is an *ExistsError.
func Create(path string, perm fs.FileMode, fill func(io.Writer) error) error {
	if err := CheckAbsent(path); err != nil {
		return err
	}
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return err
	}
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return &ExistsError{Path: part}
		}
		return fmt.Errorf("create %s: %w", part, err)
	}
	if err := write(f, perm, fill); err != nil {
		os.Remove(part)
		return err
	}
	if err := publish(part, path); err != nil {
		os.Remove(part)
		return err
	}
	return syncDir(filepath.Dir(path))
}

// CheckCreate tells whether Create(path) could succeed now, creating
// nothing: neither PATH nor PATH.part exists, and the directory is one or
// is missing (Create would make it). For dry runs.
func CheckCreate(path string) error {
	if err := CheckAbsent(path); err != nil {
		return err
	}
	if err := CheckAbsent(path + ".part"); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// WriteFile replaces path with data, mode perm: a temporary .part file
// beside it (a hidden name of its own, so that neither a concurrent writer
// nor a crashed one's leftover is in the way), fsynced, renamed over path,
// then the directory fsynced. Readers see the old file or the whole new one.
// A missing directory is created (0700) and made durable.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := ensureDir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.part")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := write(f, perm, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// write fills f with mode perm, makes its data durable and closes it; f is
// closed on every path.
func write(f *os.File, perm fs.FileMode, fill func(io.Writer) error) error {
	err := func() error {
		// The umask can only remove bits; make the mode exact anyway.
		if err := f.Chmod(perm); err != nil {
			return err
		}
		if err := fill(f); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", f.Name(), err)
		}
		return nil
	}()
	if err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	return nil
}

// publish moves part to path without ever replacing path.
func publish(part, path string) error {
	err := os.Link(part, path)
	switch {
	case err == nil:
		return os.Remove(part)
	case errors.Is(err, fs.ErrExist):
		os.Remove(part)
		return &ExistsError{Path: path}
	}
	// Some file systems have no hard links: check, then rename (a narrow race, documented).
	if err := CheckAbsent(path); err != nil {
		os.Remove(part)
		return err
	}
	if err := os.Rename(part, path); err != nil {
		return fmt.Errorf("rename %s: %w", part, err)
	}
	return nil
}

// CheckAbsent returns an *ExistsError when something (a dangling symbolic
// link included) is at path.
func CheckAbsent(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return &ExistsError{Path: path}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// ensureDir creates a missing directory (0700: what is written holds
// cluster data) and makes its entry durable.
func ensureDir(dir string) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}
