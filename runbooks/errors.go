package runbooks

import (
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/closest"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Sentinels for the two ways a runbook can be unusable; both are bad input
// (nothing was changed), for cmd to map to its usage exit code.
var (
	// ErrInvalid: a runbook file, or a command-line value for it, is invalid.
	// Every *LoadError wraps it.
	ErrInvalid = failure.New(failure.BadInput, "invalid runbook")
	// ErrNotFound: no builtin runbook has that name, or the file does not
	// exist. Every *NotFoundError wraps it.
	ErrNotFound = failure.New(failure.BadInput, "runbook not found")
)

// LoadError is an invalid runbook, or an invalid command-line value for one
// (then Source names the flag and Line is 0). It reads "source:LINE: msg".
type LoadError struct {
	Source string // file path, builtin/NAME.yaml, or a flag such as --delete
	Line   int    // 1-based; 0 when the problem has no line
	Msg    string
	hints  []string
}

func (e *LoadError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.Source, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Source, e.Msg)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *LoadError) Hints() []string { return e.hints }

func (e *LoadError) Unwrap() error { return ErrInvalid }

// NotFoundError is a runbook name that is not builtin, or a file that does
// not exist.
type NotFoundError struct {
	Name  string   // as given
	File  bool     // Name was taken as a file path
	Known []string // builtin names
	Err   error    // the file system's error, when File
}

func (e *NotFoundError) Error() string {
	if e.File {
		return fmt.Sprintf("runbook file %s not found", e.Name)
	}
	return fmt.Sprintf("no builtin runbook named %q", e.Name)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *NotFoundError) Hints() []string {
	h := []string{"builtin runbooks: " + strings.Join(e.Known, ", ") + " (breakglass runbook list)"}
	if !e.File {
		if s := closest.Typo(e.Name, e.Known); s != "" {
			h = append([]string{"did you mean " + s + "?"}, h...)
		}
		h = append(h, "a runbook file is named by its path: ./"+e.Name+".yaml")
	}
	return h
}

func (e *NotFoundError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrNotFound, e.Err}
	}
	return []error{ErrNotFound}
}
