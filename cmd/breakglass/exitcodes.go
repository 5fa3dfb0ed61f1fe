package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/lab"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/recovery/audit"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// Exit codes. Each kind of failure has its own code, listed in the README and
// in the help text; this file is the only place errors become codes.
const (
	exitOK          = 0
	exitFailure     = 1  // an unexpected error
	exitUsage       = 2  // bad flags, arguments or input: nothing was changed
	exitPermission  = 3  // the Talos role or etcd credentials are not enough
	exitUnreachable = 4  // a node, etcd or the API server could not be reached
	exitPartial     = 5  // some nodes or objects were done, others failed
	exitConflict    = 6  // someone else changed it meanwhile, or holds the lock
	exitTimeout     = 7  // waited too long for the API server
	exitAborted     = 8  // declined at the confirmation, or interrupted
	exitRefused     = 9  // the node or etcd refused the change (invalid, needs reboot, not a control plane)
	exitCorrupt     = 10 // a backup or snapshot failed its verification
	exitDisabled    = 20 // status: admission plugins are disabled on at least one node

	exitDiagnoseDeadlock = 21 // diagnose: an admission deadlock was found
	exitDiagnoseFailure  = 22 // diagnose: kube-apiserver fails for another known reason
	exitDiagnoseUnknown  = 23 // diagnose: could not tell

	exitAuditDeadlock  = 24 // audit: a webhook can deadlock kube-apiserver's start-up
	exitAuditUnknown   = 25 // audit: a webhook's risk could not be decided
	exitAuditSlowStart = 26 // audit: a webhook can slow kube-apiserver's start-up

	exitLabFailed     = 27 // lab: the rehearsal's checks failed
	exitLabNoBinaries = 28 // lab: the kube-apiserver binaries are not built
)

var exitCodeTable = []struct {
	code int
	what string
}{
	{exitOK, "success"},
	{exitFailure, "unexpected error"},
	{exitUsage, "bad flags, arguments or input; nothing was changed"},
	{exitPermission, "Talos role or etcd credentials insufficient"},
	{exitUnreachable, "a node, etcd or the API server could not be reached"},
	{exitPartial, "partial failure: some nodes or objects done, others failed"},
	{exitConflict, "changed by someone else meanwhile, or another run holds the lock"},
	{exitTimeout, "timed out waiting for the API server"},
	{exitAborted, "declined at the confirmation, or interrupted"},
	{exitRefused, "the node or etcd refused (invalid config, needs a reboot, not a control plane, its etcd unhealthy)"},
	{exitCorrupt, "a backup or snapshot failed verification"},
	{exitDisabled, "status: admission plugins are disabled on at least one node"},
	{exitDiagnoseDeadlock, "diagnose: an admission deadlock was found"},
	{exitDiagnoseFailure, "diagnose: kube-apiserver fails for another known reason"},
	{exitDiagnoseUnknown, "diagnose: could not tell"},
	{exitAuditDeadlock, "audit: a webhook can deadlock kube-apiserver's start-up"},
	{exitAuditUnknown, "audit: a webhook's risk could not be decided"},
	{exitAuditSlowStart, "audit: a webhook can slow kube-apiserver's start-up"},
	{exitLabFailed, "lab: the rehearsal's checks failed"},
	{exitLabNoBinaries, "lab: the kube-apiserver binaries are not built (make kube-apiserver)"},
}

func exitCodeHelp() string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, e := range exitCodeTable {
		fmt.Fprintf(&b, "\n  %2d  %s", e.code, e.what)
	}
	return b.String()
}

// exitCodeOf maps an error to its exit code. Order matters: a partial
// failure wraps the per-node errors, and is reported as partial.
func exitCodeOf(err error) int {
	var usage usageError
	var status statusCode
	var notDeadlock *recovery.NotDeadlockError
	switch {
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &notDeadlock):
		if code, ok := diagnoseExit(notDeadlock.Verdict).(statusCode); ok {
			return int(code)
		}
		return exitDiagnoseUnknown
	case errors.As(err, &usage):
		return exitUsage
	case errors.Is(err, recovery.ErrPartial):
		return exitPartial
	case errors.Is(err, recovery.ErrAborted), errors.Is(err, context.Canceled):
		return exitAborted
	case errors.Is(err, talos.ErrPermission):
		return exitPermission
	case errors.Is(err, talos.ErrUnreachable):
		return exitUnreachable
	case errors.Is(err, talos.ErrBusy), errors.Is(err, recovery.ErrConflict):
		return exitConflict
	case errors.Is(err, recovery.ErrTimeout):
		return exitTimeout
	case errors.Is(err, talos.ErrRejected), errors.Is(err, talos.ErrNotControlPlane), errors.Is(err, talos.ErrNeedsReboot), errors.Is(err, talos.ErrEtcdUnhealthy):
		return exitRefused
	case errors.Is(err, recovery.ErrInvalidInput), errors.Is(err, talos.ErrConfig):
		return exitUsage
	}
	switch {
	case errors.Is(err, lab.ErrRehearsalFailed):
		return exitLabFailed
	case errors.Is(err, lab.ErrNoKubeBinary):
		return exitLabNoBinaries
	case errors.Is(err, audit.ErrDeadlockRisk):
		return exitAuditDeadlock
	case errors.Is(err, audit.ErrUnknownRisk):
		return exitAuditUnknown
	case errors.Is(err, audit.ErrSlowStartRisk):
		return exitAuditSlowStart
	case errors.Is(err, audit.ErrInvalidInput):
		return exitUsage
	case errors.Is(err, audit.ErrFixUnsafe):
		return exitRefused
	}
	if code, ok := etcdExitCode(err); ok {
		return code
	}
	if errors.Is(err, runbooks.ErrInvalid) || errors.Is(err, runbooks.ErrNotFound) || isCLIUsage(err) {
		return exitUsage
	}
	return exitFailure
}

// etcdExitCode maps the etcd package's typed errors.
func etcdExitCode(err error) (int, bool) {
	var (
		cfg       *etcd.ConfigError
		unreach   *etcd.UnreachableError
		notFound  *etcd.NotFoundError
		ambiguous *etcd.AmbiguousNameError
		empty     *etcd.EmptyPlanError
		changed   *etcd.ChangedError
		conflict  *etcd.ConflictError
		exists    *etcd.FileExistsError
		badFile   *etcd.BackupFileError
		foreign   *etcd.ForeignClusterError
		prefix    *etcd.PrefixMismatchError
		snap      *etcd.SnapshotError
	)
	switch {
	case errors.As(err, &unreach) && unreach.TLS:
		return exitPermission, true // etcd answered but refused the certificate
	case errors.As(err, &unreach):
		return exitUnreachable, true
	case errors.As(err, &changed), errors.As(err, &conflict):
		return exitConflict, true
	case errors.As(err, &badFile), errors.As(err, &snap):
		return exitCorrupt, true
	case errors.As(err, &foreign), errors.As(err, &prefix):
		return exitRefused, true
	case errors.As(err, &cfg), errors.As(err, &notFound), errors.As(err, &ambiguous), errors.As(err, &empty), errors.As(err, &exists):
		return exitUsage, true
	}
	return 0, false
}

// reportError prints err the way an engineer mid-incident needs it: what
// failed, then the next commands as hint lines. It returns the exit code.
func reportError(w io.Writer, err error) int {
	var status statusCode
	if errors.As(err, &status) {
		return int(status) // already rendered by the command
	}
	msg := strings.TrimPrefix(err.Error(), "breakglass: ")
	for _, line := range strings.Split(msg, "\n") {
		fmt.Fprintf(w, "breakglass: %s\n", line)
	}
	for _, h := range hintsOf(err) {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
	return exitCodeOf(err)
}

// hintsOf collects the hints of every error in err's tree, once each.
func hintsOf(err error) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if h, ok := e.(interface{ Hints() []string }); ok {
			for _, s := range h.Hints() {
				if !seen[s] {
					seen[s] = true
					out = append(out, s)
				}
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// usageError is bad input caught by the command layer.
type usageError struct{ msg, hint string }

func (e usageError) Error() string { return e.msg }
func (e usageError) Hints() []string {
	if e.hint == "" {
		return nil
	}
	return []string{e.hint}
}

// statusCode lets a command that has already rendered its result (status,
// diagnose) end with a non-zero code that is not an error.
type statusCode int

func (s statusCode) Error() string { return fmt.Sprintf("exit status %d", int(s)) }

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
