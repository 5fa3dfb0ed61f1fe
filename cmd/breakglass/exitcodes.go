package main

import (
	"encoding/json"
	"io"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

func exitCodeHelp() string { return failure.Help() }

// usageError is bad input caught by the command layer.
type usageError struct{ msg, hint string }

func (e usageError) Error() string { return e.msg }
func (e usageError) Unwrap() error { return failure.BadInput }
func (e usageError) Hints() []string {
	if e.hint == "" {
		return nil
	}
	return []string{e.hint}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
