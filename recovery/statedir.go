package recovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// StateDirError is a state directory that cannot be written (a full disk,
// a read-only file system, another user's directory) where a run had to
// start its record: nothing was started and nothing left behind, so the
// next step is the operator's (exit 2).
type StateDirError struct {
	Dir string
	Err error
}

func (e *StateDirError) Error() string {
	return fmt.Sprintf("state directory %s cannot be written: %v; nothing was started", e.Dir, causeOf(e.Err))
}

func (e *StateDirError) Unwrap() []error { return []error{e.Err, failure.BadInput} }

// Hints: what to do about it, by what the file system said.
func (e *StateDirError) Hints() []string { return []string{StateDirHint(e.Dir, e.Err)} }

// StateDirHint is the next step for a state directory dir that err says
// cannot be written.
func StateDirHint(dir string, err error) string {
	const env = " (or set BREAKGLASS_STATE_DIR)"
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "free space on its file system (df -h " + dir + "), or give --state-dir a directory on another one" + env
	case errors.Is(err, syscall.EROFS):
		return "its file system is mounted read-only: give --state-dir a directory on a writable one" + env
	case errors.Is(err, os.ErrPermission):
		return "switch to the user who owns it (ls -ld " + dir + "), or give --state-dir a directory you can write" + env
	}
	return "give --state-dir a directory you can write" + env
}

// causeOf is the system's own words for err (no space left on device),
// without the operation and path that the message says otherwise.
func causeOf(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// mkdirNew creates dir and any missing parent (0700) and returns undo,
// which removes what it created, deepest first, as long as it is empty.
func mkdirNew(dir string) (undo func(), err error) {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		created = append(created, d)
	}
	undo = func() {
		for _, d := range created {
			_ = os.Remove(d) // empty only: never what another run wrote meanwhile
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		undo()
		return nil, err
	}
	return undo, nil
}
