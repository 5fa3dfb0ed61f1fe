// Package failure is breakglass's one vocabulary of failures. Each Category
// is an exit code; every package's typed errors unwrap to one, so a command
// maps any error to its exit code with Code and never needs to know the
// package that raised it. It imports nothing of the project.
package failure

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Category is a kind of failure, or of outcome worth its own exit code. Its
// value is the exit code. It is an error, so errors.Is(err, failure.Conflict)
// tells the kind of any error that unwraps to it.
type Category int

// The categories. 1-19 are failures any command may end with; 20 and up are
// outcomes of one command (a finding, not a fault), rendered by it.
const (
	OK           Category = 0
	Unexpected   Category = 1
	BadInput     Category = 2
	Credentials  Category = 3
	Unreachable  Category = 4
	Partial      Category = 5
	Conflict     Category = 6
	Timeout      Category = 7
	Declined     Category = 8 // declined at a confirmation, or interrupted
	Refused      Category = 9
	Verification Category = 10
	Output       Category = 11 // standard output or standard error failed a write

	Disabled           Category = 20
	DiagnoseDeadlock   Category = 21
	DiagnoseOther      Category = 22
	DiagnoseUnknown    Category = 23
	AuditDeadlock      Category = 24
	AuditUnknown       Category = 25
	AuditSlowStart     Category = 26
	LabFailed          Category = 27
	LabNoBinaries      Category = 28
	DiagnoseFlags      Category = 29
	DiagnoseNoSpace    Category = 30
	DiagnoseMemberLost Category = 31
	DiagnoseQuorumLost Category = 32
	DiagnoseEncryption Category = 33
	// UpgradeNoGo is upgrade-check's no-go. 40, not 31: the codes after 30
	// are diagnose's verdicts, and more of them are coming.
	UpgradeNoGo Category = 40
)

// Table is every exit code with what it means, in order: every command's
// help prints it, and the README's table says the same (a test checks).
var Table = []struct {
	Category Category
	What     string
}{
	{OK, "success"},
	{Unexpected, "unexpected error"},
	{BadInput, "bad flags, arguments or input; nothing was changed"},
	{Credentials, "the Talos role or etcd credentials are not enough (e.g. an os:operator talosconfig cannot patch), or apid refuses the talosconfig's client certificate (expired, its key usage, another CA: the hints say how to make a new talosconfig)"},
	{Unreachable, "a node, etcd or the API server could not be reached"},
	{Partial, "partial failure: some nodes or objects done, others failed"},
	{Conflict, "changed by someone else meanwhile, or another run holds the lock"},
	{Timeout, "timed out waiting for the API server"},
	{Declined, "declined at the confirmation, or interrupted"},
	{Refused, "the node or etcd refused (invalid config, needs a reboot, not a control plane, its etcd unhealthy)"},
	{Verification, "a backup or snapshot failed verification"},
	{Output, "standard output or standard error could not be written (a closed pipe, a full disk); no change is made once it fails"},
	{Disabled, "admission status: admission plugins are disabled on at least one node"},
	{DiagnoseDeadlock, "diagnose: an admission deadlock was found"},
	{DiagnoseOther, "diagnose: kube-apiserver fails for another known reason"},
	{DiagnoseUnknown, "diagnose: could not tell"},
	{AuditDeadlock, "audit: a webhook can deadlock kube-apiserver's start-up; lab replay: the upgrade deadlocks"},
	{AuditUnknown, "audit: a webhook's risk could not be decided"},
	{AuditSlowStart, "audit: a webhook can slow kube-apiserver's start-up"},
	{LabFailed, "lab: the rehearsal's checks failed"},
	{LabNoBinaries, "lab: the kube-apiserver binaries are not built (make kube-apiserver)"},
	{DiagnoseFlags, "diagnose: kube-apiserver refuses its own flags (cluster.apiServer.extraArgs) and exits at once"},
	{DiagnoseNoSpace, "diagnose: etcd is full (NOSPACE alarm) and refuses every write"},
	{DiagnoseMemberLost, "diagnose: an etcd member is lost (down, corrupt or removed); quorum holds"},
	{DiagnoseQuorumLost, "diagnose: etcd has lost its quorum; no write goes through"},
	{DiagnoseEncryption, "diagnose: stored data does not decrypt with the control planes' encryption configuration"},
	{UpgradeNoGo, "upgrade-check: a check says no-go (with --strict, a warning too): do not upgrade yet"},
}

func (c Category) Error() string {
	for _, e := range Table {
		if e.Category == c {
			return e.What
		}
	}
	return fmt.Sprintf("exit code %d", int(c))
}

// Help is the exit-code table as a command's help prints it.
func Help() string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, e := range Table {
		fmt.Fprintf(&b, "\n  %2d  %s", int(e.Category), e.What)
	}
	return b.String()
}

// precedence decides between categories found in one error tree: an
// outcome first, then partial (it wraps each node's own failure), then the
// cause an operator can act on first.
var precedence = []Category{
	Disabled, DiagnoseDeadlock, DiagnoseFlags, DiagnoseNoSpace, DiagnoseMemberLost, DiagnoseQuorumLost, DiagnoseEncryption, DiagnoseOther, DiagnoseUnknown, AuditDeadlock, AuditUnknown, AuditSlowStart, UpgradeNoGo, LabFailed, LabNoBinaries,
	Partial, Declined, Credentials, Unreachable, Conflict, Timeout, Refused, Verification, BadInput, Output,
}

// Code is err's exit code: 0 for nil, the category it unwraps to (see
// precedence when it unwraps to several), Declined when the run was
// interrupted, Unexpected otherwise.
func Code(err error) int {
	if err == nil {
		return int(OK)
	}
	for _, c := range precedence {
		if errors.Is(err, c) || c == Declined && errors.Is(err, context.Canceled) {
			return int(c)
		}
	}
	return int(Unexpected)
}

// sentinel is a package's named kind of failure, of one category.
type sentinel struct {
	msg string
	cat Category
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.cat }

// New is a sentinel error with its own message that unwraps to cat: a
// package keeps its words (errors.Is(err, talos.ErrBusy)) and the exit code
// follows from the category.
func New(cat Category, msg string) error { return &sentinel{msg: msg, cat: cat} }

// Hinter is an error that names the next thing to try; the commands print
// each hint on its own "hint:" line.
type Hinter interface{ Hints() []string }

// Hints collects the hints of every error in err's tree, once each, in order.
func Hints(err error) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if h, ok := e.(Hinter); ok {
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

// Input is bad input (BadInput) with the next step to take, hint ("" for
// none): the one constructor of bad input, for every package. format is
// fmt.Errorf's: a cause wrapped with %w keeps its own hints and category
// (see precedence).
func Input(hint, format string, args ...any) error {
	e := &inputError{err: fmt.Errorf(format, args...)}
	if hint != "" {
		e.hints = []string{hint}
	}
	return e
}

type inputError struct {
	err   error
	hints []string
}

func (e *inputError) Error() string   { return e.err.Error() }
func (e *inputError) Unwrap() []error { return []error{BadInput, e.err} }
func (e *inputError) Hints() []string { return e.hints }

// Reported is an outcome the command has already rendered (a status, a
// verdict): it ends the command with cat's code and prints nothing more.
type Reported struct{ Category Category }

func (r Reported) Error() string { return r.Category.Error() }
func (r Reported) Unwrap() error { return r.Category }

// Hinted is err with the next steps to take; its category stays err's.
func Hinted(err error, hints ...string) error { return &hinted{err: err, hints: hints} }

type hinted struct {
	err   error
	hints []string
}

func (e *hinted) Error() string   { return e.err.Error() }
func (e *hinted) Unwrap() error   { return e.err }
func (e *hinted) Hints() []string { return e.hints }
