package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Report prints err the way an engineer mid-incident needs it (each line
// of the message prefixed "breakglass: ", then one "hint:" line per hint)
// and returns its exit code. An outcome the command already rendered
// (failure.Reported) prints nothing more.
func Report(w io.Writer, err error) int {
	if err == nil {
		return int(failure.OK)
	}
	var done failure.Reported
	if errors.As(err, &done) {
		return int(done.Category)
	}
	if isCLIUsage(err) {
		err = usage{err}
	}
	msg := strings.TrimPrefix(err.Error(), "breakglass: ")
	for _, line := range strings.Split(msg, "\n") {
		fmt.Fprintf(w, "breakglass: %s\n", line)
	}
	for _, h := range failure.Hints(err) {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
	return failure.Code(err)
}

// usage is urfave/cli's own parse error (unknown flag, missing value): bad input.
type usage struct{ error }

func (u usage) Unwrap() []error { return []error{u.error, failure.BadInput} }

// isCLIUsage recognises urfave/cli's own parse errors.
func isCLIUsage(err error) bool {
	var exit cli.ExitCoder
	if errors.As(err, &exit) {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "flag provided but not defined") || strings.Contains(m, "flag needs an argument") ||
		strings.Contains(m, "invalid value") || strings.Contains(m, "Required flag")
}

// Interruptible is a context the first SIGINT or SIGTERM cancels, so the
// running step stops cleanly (journal flushed, what is left said); then
// the default handling is back, and a second signal aborts at once.
func Interruptible() context.Context {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
		fmt.Fprintln(os.Stderr, "breakglass: interrupted: stopping cleanly (press Ctrl-C again to abort at once)")
	}()
	return ctx
}

// bareParseError is the flag package's word for a value it could not read.
var bareParseError = regexp.MustCompile(`^(invalid value ".*" for flag -([A-Za-z0-9-]+)): parse error$`)

// ExplainParseError says what a duration or number flag wants where the
// flag package says only "parse error" (--revert-after banana); other
// messages are returned as they are. c is where urfave/cli parsed: the
// flag is its command's or the app's.
func ExplainParseError(c *cli.Context, msg string) string {
	m := bareParseError.FindStringSubmatch(msg)
	if m == nil || c == nil {
		return msg
	}
	var flags [][]cli.Flag
	if c.Command != nil {
		flags = append(flags, c.Command.Flags)
	}
	if c.App != nil {
		flags = append(flags, c.App.Flags)
	}
	for _, fs := range flags {
		for _, f := range fs {
			if !slices.Contains(f.Names(), m[2]) {
				continue
			}
			switch f.(type) {
			case *cli.DurationFlag:
				return m[1] + ": want a duration like 90s, 5m or 1h30m"
			case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
				return m[1] + ": want a whole number, like 3"
			case *cli.BoolFlag:
				return m[1] + ": want true or false"
			}
		}
	}
	return msg
}
