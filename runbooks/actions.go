package runbooks

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Action names a built-in recovery action. The recovery package switches on
// it (or on the type of Step.Params, which is one of the *XxxParams below).
type Action string

// The built-in actions, in the order a recovery runs them.
const (
	ActionPreflight        Action = "preflight"
	ActionDiagnose         Action = "diagnose"
	ActionAdmissionDisable Action = "admission.disable"
	ActionAPIServerWait    Action = "apiserver.wait"
	ActionEtcdSnapshot     Action = "etcd.snapshot"
	ActionEtcdDelete       Action = "etcd.delete"
	ActionWebhookWait      Action = "webhook.wait"
	ActionAdmissionRestore Action = "admission.restore"
	ActionVerify           Action = "verify"
)

// Params are an action's parameters (a step's `with`), decoded strictly and
// with defaults applied. The concrete type tells the action:
// *PreflightParams, *DiagnoseParams, *AdmissionDisableParams, ...
type Params interface {
	Action() Action
	// check validates values after defaults are applied; it may normalise
	// (an empty list becomes a non-nil empty slice, for a stable JSON shape).
	check() []fieldError
}

// fieldError is a problem with one parameter; index points into a list value
// (-1 for the whole value), so the error can name the exact line.
type fieldError struct {
	field string
	index int
	msg   string
	hint  string
}

// PreflightParams: preflight takes no parameters.
type PreflightParams struct{}

// DiagnoseParams are diagnose's parameters.
type DiagnoseParams struct {
	// TailLines is how many lines of kube-apiserver's log to read per node.
	TailLines int `yaml:"tailLines" json:"tailLines"`
}

// AdmissionDisableParams are admission.disable's parameters.
type AdmissionDisableParams struct {
	// Plugins are added to kube-apiserver's --disable-admission-plugins.
	Plugins []string `yaml:"plugins" json:"plugins"`
	// RevertAfter, when set, applies the change in Talos try mode: the node
	// puts its config back by itself after this long. Zero means unset.
	RevertAfter Duration `yaml:"revertAfter,omitempty" json:"revertAfter,omitempty"`
}

// APIServerWaitParams are apiserver.wait's parameters.
type APIServerWaitParams struct {
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// Disabled are the admission plugins the run's diagnosis decided to
	// turn off: while it waits, the step watches the log for a webhook or
	// policy whose plugin is still on. The decision fills it; a runbook
	// cannot (yaml "-").
	Disabled []string `yaml:"-" json:"disabled,omitempty"`
}

// EtcdSnapshotParams are etcd.snapshot's parameters.
type EtcdSnapshotParams struct {
	// Always takes the snapshot even when no step removes objects (a
	// runbook that compacts etcd's history wants one first).
	Always bool `yaml:"always,omitempty" json:"always,omitempty"`
}

// EtcdDeleteParams are etcd.delete's parameters.
type EtcdDeleteParams struct {
	// Kind is which admission objects the names are, a --kind word: in a
	// runbook file one kind's short name (validating); the command line
	// may put any word kinds.Parse reads (all, policy).
	Kind string `yaml:"kind" json:"kind"`
	// Names of the objects to remove. Usually empty in the file and given on
	// the command line (--delete NAME, see Overrides); never nil after Load.
	Names []string `yaml:"names,omitempty" json:"names"`
}

// WebhookWaitParams are webhook.wait's parameters.
type WebhookWaitParams struct {
	Timeout Duration `yaml:"timeout" json:"timeout"`
}

// AdmissionRestoreParams: admission.restore takes no parameters.
type AdmissionRestoreParams struct{}

// VerifyParams: verify takes no parameters.
type VerifyParams struct{}

func (*PreflightParams) Action() Action        { return ActionPreflight }
func (*DiagnoseParams) Action() Action         { return ActionDiagnose }
func (*AdmissionDisableParams) Action() Action { return ActionAdmissionDisable }
func (*APIServerWaitParams) Action() Action    { return ActionAPIServerWait }
func (*EtcdSnapshotParams) Action() Action     { return ActionEtcdSnapshot }
func (*EtcdDeleteParams) Action() Action       { return ActionEtcdDelete }
func (*WebhookWaitParams) Action() Action      { return ActionWebhookWait }
func (*AdmissionRestoreParams) Action() Action { return ActionAdmissionRestore }
func (*VerifyParams) Action() Action           { return ActionVerify }

func (*PreflightParams) check() []fieldError        { return nil }
func (*EtcdSnapshotParams) check() []fieldError     { return nil }
func (*AdmissionRestoreParams) check() []fieldError { return nil }
func (*VerifyParams) check() []fieldError           { return nil }

// MaxTailLines is the most kube-apiserver log lines read per node.
const MaxTailLines = 10000

func (p *DiagnoseParams) check() []fieldError {
	if p.TailLines < 1 || p.TailLines > MaxTailLines {
		return []fieldError{{field: "tailLines", index: -1, msg: fmt.Sprintf("%d is out of range (1 to %d)", p.TailLines, MaxTailLines)}}
	}
	return nil
}

func (p *AdmissionDisableParams) check() []fieldError {
	var errs []fieldError
	if len(p.Plugins) == 0 {
		errs = append(errs, fieldError{field: "plugins", index: -1, msg: "empty list: name at least one admission plugin",
			hint: "leave plugins out for the default, ValidatingAdmissionWebhook"})
	}
	for i, pl := range p.Plugins {
		switch {
		case !apiserverargs.ValidPluginName(pl):
			errs = append(errs, fieldError{field: "plugins", index: i,
				msg:  fmt.Sprintf("%q is not an admission plugin name (an upper-case letter, then letters and digits)", pl),
				hint: "plugin names are written as kube-apiserver spells them: ValidatingAdmissionWebhook, MutatingAdmissionWebhook, ValidatingAdmissionPolicy"})
		case slices.Index(p.Plugins, pl) < i:
			errs = append(errs, fieldError{field: "plugins", index: i, msg: fmt.Sprintf("%q is listed twice", pl)})
		default:
			var pe *apiserverargs.PluginError
			if errors.As(apiserverargs.CheckPlugin(pl), &pe) {
				errs = append(errs, fieldError{field: "plugins", index: i, msg: pe.Error(), hint: pe.Hint()})
			}
		}
	}
	if p.RevertAfter != 0 && (p.RevertAfter.Std() < MinRevertAfter || p.RevertAfter.Std() > maxDuration) {
		errs = append(errs, fieldError{field: "revertAfter", index: -1, msg: fmt.Sprintf("%s is out of range (%s to %s)", p.RevertAfter, Duration(MinRevertAfter), Duration(maxDuration)),
			hint: "give revertAfter a duration from 2m to 24h, e.g. 30m, or leave it out for no automatic revert"})
	}
	return errs
}

func (p *APIServerWaitParams) check() []fieldError { return checkTimeout(p.Timeout) }
func (p *WebhookWaitParams) check() []fieldError   { return checkTimeout(p.Timeout) }

func checkTimeout(d Duration) []fieldError {
	if d.Std() < minDuration || d.Std() > maxDuration {
		return []fieldError{{field: "timeout", index: -1, msg: fmt.Sprintf("%s is out of range (%s to %s)", d, Duration(minDuration), Duration(maxDuration)),
			hint: "give timeout a duration from 1s to 24h, e.g. 5m"}}
	}
	return nil
}

func (p *EtcdDeleteParams) check() []fieldError {
	var errs []fieldError
	if _, ok := kinds.ByShort(p.Kind); !ok {
		errs = append(errs, fieldError{field: "kind", index: -1,
			msg: fmt.Sprintf("unknown kind %q (want one of %s)", p.Kind, strings.Join(kindStrings(), ", "))})
	}
	if p.Names == nil {
		p.Names = []string{}
	}
	for i, n := range p.Names {
		switch {
		case !ValidObjectName(n):
			errs = append(errs, fieldError{field: "names", index: i,
				msg: fmt.Sprintf("%q is not a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253)", n)})
		case slices.Index(p.Names, n) < i:
			errs = append(errs, fieldError{field: "names", index: i, msg: fmt.Sprintf("%q is listed twice", n)})
		}
	}
	return errs
}

// kindStrings are the kinds a runbook's etcd.delete step may name.
func kindStrings() []string {
	out := make([]string, len(kinds.All))
	for i, k := range kinds.All {
		out[i] = k.Short()
	}
	return out
}

// ValidObjectName reports whether s is a DNS subdomain, the rule Kubernetes
// applies to admission object names.
func ValidObjectName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if !dnsLabel(label, 63) {
			return false
		}
	}
	return true
}

// ValidName reports whether s can name a runbook or a step: a DNS label
// (lower-case letters, digits and '-', starting and ending with a letter or
// digit, at most 63 characters).
func ValidName(s string) bool { return dnsLabel(s, 63) }

func dnsLabel(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// ActionInfo describes a built-in action, for `runbook show`, help text and
// the recovery engine.
type ActionInfo struct {
	Name    Action `json:"name"`
	Summary string `json:"summary"`
	// ChangesCluster is true for actions that change the cluster (Talos
	// machine config, etcd). They always ask first unless --yes.
	ChangesCluster bool        `json:"changesCluster"`
	Params         []ParamInfo `json:"params"`

	newParams func() Params
	params    []paramDoc
}

// ParamInfo describes one parameter of an action.
type ParamInfo struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Default string `json:"default,omitempty"`
	Help    string `json:"help"`
	// Unset says what it means when the parameter has no value (only for
	// parameters without a default).
	Unset string `json:"unset,omitempty"`
}

type paramDoc struct{ name, typ, help, unset string }

// DefaultWait is how long a wait for kube-apiserver lasts unless told
// otherwise: the kubelet's manifest poll (20 s), the old pod's grace (30 s),
// Talos's status refresh (15 s) and a slow first start fit well inside it.
const DefaultWait = 5 * time.Minute

// actionTable is the single list of built-in actions: name, parameters
// (type and defaults), one-line summary, and whether it changes the cluster.
var actionTable = []ActionInfo{
	{
		Name:    ActionPreflight,
		Summary: "check that every node answers on the Talos API, the role may patch the machine config (os:admin), the nodes are control planes, and report Talos and Kubernetes versions",
		newParams: func() Params {
			return &PreflightParams{}
		},
	},
	{
		Name:      ActionDiagnose,
		Summary:   "read kube-apiserver's recent log, readiness checks and static pod status on every node and name the admission objects it fails on; changes nothing",
		newParams: func() Params { return &DiagnoseParams{TailLines: 200} },
		params:    []paramDoc{{"tailLines", "integer (1 to 10000)", "log lines read per node", ""}},
	},
	{
		Name:           ActionAdmissionDisable,
		Summary:        "add the plugins to kube-apiserver's disable-admission-plugins on every control-plane node through the Talos API, without a reboot; every policy they enforce is bypassed until admission.restore",
		ChangesCluster: true,
		newParams:      func() Params { return &AdmissionDisableParams{Plugins: []string{"ValidatingAdmissionWebhook"}} },
		params: []paramDoc{
			{"plugins", "list of admission plugin names", "plugins to disable, spelled as kube-apiserver spells them", ""},
			{"revertAfter", "duration", "apply in Talos try mode: the nodes put the flag back by themselves after this long", "the plugins stay disabled until admission.restore"},
		},
	},
	{
		Name:      ActionAPIServerWait,
		Summary:   "wait until kube-apiserver is ready on every node, showing the readiness checks that still fail",
		newParams: func() Params { return &APIServerWaitParams{Timeout: Duration(DefaultWait)} },
		params:    []paramDoc{{"timeout", "duration", "how long to wait before giving up", ""}},
	},
	{
		Name:      ActionEtcdSnapshot,
		Summary:   "save a full etcd snapshot through the Talos API into the incident directory and verify it; changes nothing",
		newParams: func() Params { return &EtcdSnapshotParams{} },
		params:    []paramDoc{{"always", "boolean", "take it even when no step removes objects from etcd", ""}},
	},
	{
		Name:           ActionEtcdDelete,
		Summary:        "remove the named admission objects straight from etcd, each only after its backup is written and verified, guarded by its revision",
		ChangesCluster: true,
		newParams:      func() Params { return &EtcdDeleteParams{Kind: kinds.Validating, Names: []string{}} },
		params: []paramDoc{
			{"kind", "one of " + strings.Join(kindStrings(), ", "), "what kind of admission object the names are", ""},
			{"names", "list of object names", "objects to remove; usually given on the command line with --delete NAME", "give them with --delete NAME"},
		},
	},
	{
		Name:      ActionWebhookWait,
		Summary:   "wait until the backends of the remaining fail-closed webhooks answer (their URL, or their pods ready), when that can be told",
		newParams: func() Params { return &WebhookWaitParams{Timeout: Duration(2 * time.Minute)} },
		params:    []paramDoc{{"timeout", "duration", "how long to wait before giving up", ""}},
	},
	{
		Name:           ActionAdmissionRestore,
		Summary:        "put every node's admission plugin flags back exactly as they were before admission.disable",
		ChangesCluster: true,
		newParams:      func() Params { return &AdmissionRestoreParams{} },
	},
	{
		Name:      ActionVerify,
		Summary:   "check that kube-apiserver is ready on every node with the admission plugins enabled again",
		newParams: func() Params { return &VerifyParams{} },
	},
}

func lookupAction(name Action) *ActionInfo {
	for i := range actionTable {
		if actionTable[i].Name == name {
			return &actionTable[i]
		}
	}
	return nil
}

// Actions lists the built-in actions in run order, with their parameters and
// defaults.
func Actions() []ActionInfo {
	out := make([]ActionInfo, len(actionTable))
	for i := range actionTable {
		out[i] = info(&actionTable[i])
	}
	return out
}

// LookupAction returns the built-in action called name.
func LookupAction(name Action) (ActionInfo, bool) {
	a := lookupAction(name)
	if a == nil {
		return ActionInfo{}, false
	}
	return info(a), true
}

// NewParams returns the parameters of action with their defaults, or nil for
// an unknown action.
func NewParams(action Action) Params {
	if a := lookupAction(action); a != nil {
		return a.newParams()
	}
	return nil
}

// TakesParams reports whether the action has parameters (a `with`).
func (a ActionInfo) TakesParams() bool { return len(a.Params) > 0 }

func info(a *ActionInfo) ActionInfo {
	out := *a
	out.Params = make([]ParamInfo, 0, len(a.params))
	defaults := reflect.ValueOf(a.newParams()).Elem()
	for _, d := range a.params {
		out.Params = append(out.Params, ParamInfo{
			Name:    d.name,
			Type:    d.typ,
			Default: formatValue(fieldByTag(defaults, d.name)),
			Help:    d.help,
			Unset:   d.unset,
		})
	}
	return out
}

func actionNames() []string {
	out := make([]string, len(actionTable))
	for i, a := range actionTable {
		out[i] = string(a.Name)
	}
	return out
}

// yamlName is a struct field's YAML key.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

func fieldByTag(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if yamlName(t.Field(i)) == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// formatValue renders a parameter value for people ("" when unset).
func formatValue(v reflect.Value) string {
	if !v.IsValid() {
		return ""
	}
	switch x := v.Interface().(type) {
	case Duration:
		if x == 0 {
			return ""
		}
		return x.String()
	case []string:
		return strings.Join(x, ", ")
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	}
	if v.Kind() == reflect.String {
		return v.String()
	}
	return fmt.Sprint(v.Interface())
}

// cloneParams deep-copies p (its list fields included).
func cloneParams(p Params) Params {
	if p == nil {
		return nil
	}
	src := reflect.ValueOf(p).Elem()
	dst := reflect.New(src.Type())
	dst.Elem().Set(src)
	for i := 0; i < src.NumField(); i++ {
		if f := dst.Elem().Field(i); f.Kind() == reflect.Slice && !f.IsNil() {
			c := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
			reflect.Copy(c, f)
			f.Set(c)
		}
	}
	return dst.Interface().(Params)
}
