package main

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

func exitCodeHelp() string { return failure.Help() }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// permissionAsBadInput makes a file a read-only command was not allowed to
// read bad input with a hint (exit 2) instead of an unexpected error: the
// command changed nothing, and the next step is the operator's. A command
// that changes something keeps its error: its failure may come after a
// change, where "nothing was changed" would be false.
func permissionAsBadInput(path string, err error) error {
	var pe *fs.PathError
	if err == nil || commandSpecs[path].journaled || failure.Code(err) != int(failure.Unexpected) ||
		!errors.Is(err, fs.ErrPermission) || !errors.As(err, &pe) {
		return err
	}
	return failure.Input("run breakglass as the user who owns it (ls -l "+pe.Path+"), or give it a file or --state-dir it can read", "%s: %s cannot be read: permission denied", path, pe.Path)
}
