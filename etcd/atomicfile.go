package etcd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// createFile writes a new file the careful way: PATH.part created with
// O_EXCL and mode 0600, filled, fsynced, then linked to PATH (which fails if
// PATH exists, so nothing is ever overwritten, even in a race), the .part
// removed and the directory fsynced. fill may reject its data (the .part is
// then removed); verify reads the final file back.
func createFile(path string, fill func(io.Writer) error, verify func(path string) error) (err error) {
	if err := checkAbsent(path); err != nil {
		return err
	}
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return err
	}
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Left by an interrupted run: someone should look before it goes.
			return &FileExistsError{Path: part}
		}
		return fmt.Errorf("create %s: %w", part, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(part)
		}
	}()
	// The umask can only remove bits; make the mode exact anyway.
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", part, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", part, err)
	}
	if err = publish(part, path); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	if verify != nil {
		return verify(path)
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
		return &FileExistsError{Path: path}
	}
	// Some file systems have no hard links: check, then rename (a narrow race, documented).
	if err := checkAbsent(path); err != nil {
		os.Remove(part)
		return err
	}
	if err := os.Rename(part, path); err != nil {
		return fmt.Errorf("rename %s: %w", part, err)
	}
	return nil
}

func checkAbsent(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return &FileExistsError{Path: path}
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

// ensureDir creates a missing directory (0700: backups hold cluster data)
// and makes its entry durable.
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
