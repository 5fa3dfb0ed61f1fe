package configedit

import (
	"errors"
	"fmt"
)

// ErrInvalidPlugin is returned for a plugin name that does not look like an admission plugin.
var ErrInvalidPlugin error = &hintedError{
	msg:   "invalid admission plugin name",
	hints: []string{"name plugins as kube-apiserver does, comma-separated: --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook"},
}

// ErrListOnStringOnly is returned when a node that takes string values only (Talos < 1.13) has a
// list value in one of the two keys: the node is not what the caller believes.
var ErrListOnStringOnly error = &hintedError{
	msg:   "extraArgs value is a list but the node accepts strings only",
	hints: []string{"check the node's Talos version: talosctl -n NODE version"},
}

// ErrNoClusterConfig is returned when the config has no v1alpha1 document with a cluster section,
// so there is no kube-apiserver configuration to change.
var ErrNoClusterConfig = errors.New("config has no v1alpha1 document with a cluster section")

// ErrBadRecord is returned by Restore for a record it cannot use.
var ErrBadRecord = errors.New("unusable restore record")

// ErrBadValue is returned when one of the two keys holds something other than a string or a list
// of strings.
var ErrBadValue = errors.New("extraArgs value is neither a string nor a list of strings")

// EditError is returned when neither the text edit nor the strategic merge could change the config.
type EditError struct {
	Op    string // disable, restore, remove plugins
	Text  error  // why the text edit refused
	Merge error  // why the strategic merge failed
}

func (e *EditError) Error() string {
	return fmt.Sprintf("cannot %s admission plugins in the machine config: text edit: %v; strategic merge: %v", e.Op, e.Text, e.Merge)
}

// Unwrap returns both causes.
func (e *EditError) Unwrap() []error { return []error{e.Text, e.Merge} }

// Hints tells the operator what to do by hand.
func (e *EditError) Hints() []string {
	return []string{
		"edit the key by hand: talosctl -n NODE edit machineconfig --mode no-reboot (cluster.apiServer.extraArgs)",
	}
}

// hintedError is a sentinel that carries next-step hints.
type hintedError struct {
	msg   string
	hints []string
}

func (e *hintedError) Error() string   { return e.msg }
func (e *hintedError) Hints() []string { return e.hints }

// refusal is why the text edit refused a config; Disable then falls back to the strategic merge.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(format string, a ...any) error { return &refusal{msg: fmt.Sprintf(format, a...)} }
