package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Exit codes are failure categories (internal/failure holds the one table);
// these names are the ones commands end with on their own.
const (
	exitOK       = int(failure.OK)
	exitUsage    = int(failure.BadInput)
	exitDisabled = int(failure.Disabled)
)

func exitCodeHelp() string { return failure.Help() }

// exitCodeOf maps an error to its exit code: its failure category, or usage
// for urfave/cli's own parse errors.
func exitCodeOf(err error) int {
	if code := failure.Code(err); code != int(failure.Unexpected) || !isCLIUsage(err) {
		return code
	}
	return exitUsage
}

// reportError prints err the way an engineer mid-incident needs it: what
// failed, then the next commands as hint lines. It returns the exit code.
func reportError(w io.Writer, err error) int {
	var reported failure.Reported
	if errors.As(err, &reported) {
		return int(reported.Category) // already rendered by the command
	}
	msg := strings.TrimPrefix(err.Error(), "breakglass: ")
	for _, line := range strings.Split(msg, "\n") {
		fmt.Fprintf(w, "breakglass: %s\n", line)
	}
	for _, h := range failure.Hints(err) {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
	return exitCodeOf(err)
}

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

// isCLIUsage recognises urfave/cli's own parse errors (unknown flag, missing value).
func isCLIUsage(err error) bool {
	var exit cli.ExitCoder
	if errors.As(err, &exit) {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "flag provided but not defined") || strings.Contains(m, "flag needs an argument") ||
		strings.Contains(m, "invalid value") || strings.Contains(m, "Required flag")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
