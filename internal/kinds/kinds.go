// Package kinds names the admission objects breakglass handles, in each
// vocabulary it meets them in: the Kubernetes kind
// (ValidatingWebhookConfiguration), the resource, which is also the
// segment of the etcd key (validatingwebhookconfigurations), the short name
// that `breakglass etcd --kind` and a runbook's etcd.delete step take
// (validating), and the admission plugin that evaluates the objects
// (ValidatingAdmissionWebhook). Kind is the one type for them; Parse reads
// a --kind word, once, where it enters. It imports nothing of the project
// but internal/failure.
package kinds

import (
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// The Kubernetes kinds.
const (
	ValidatingWebhookConfiguration   = "ValidatingWebhookConfiguration"
	MutatingWebhookConfiguration     = "MutatingWebhookConfiguration"
	ValidatingAdmissionPolicy        = "ValidatingAdmissionPolicy"
	ValidatingAdmissionPolicyBinding = "ValidatingAdmissionPolicyBinding"
	MutatingAdmissionPolicy          = "MutatingAdmissionPolicy"
	MutatingAdmissionPolicyBinding   = "MutatingAdmissionPolicyBinding"
)

// Kind is one kind of admission object. Its value is the resource:
// PREFIX/RESOURCE/NAME in etcd (kube-apiserver stores admission objects
// without an API group segment), as backups and listings write it.
type Kind string

// The kinds, by resource.
const (
	ValidatingWebhookConfigurations   Kind = "validatingwebhookconfigurations"
	MutatingWebhookConfigurations     Kind = "mutatingwebhookconfigurations"
	ValidatingAdmissionPolicies       Kind = "validatingadmissionpolicies"
	ValidatingAdmissionPolicyBindings Kind = "validatingadmissionpolicybindings"
	MutatingAdmissionPolicies         Kind = "mutatingadmissionpolicies"
	MutatingAdmissionPolicyBindings   Kind = "mutatingadmissionpolicybindings"
)

// The short names.
const (
	Validating              = "validating"
	Mutating                = "mutating"
	ValidatingPolicy        = "validating-policy"
	ValidatingPolicyBinding = "validating-policy-binding"
	MutatingPolicy          = "mutating-policy"
	MutatingPolicyBinding   = "mutating-policy-binding"
)

// The admission plugins (kube-apiserver --disable-admission-plugins).
const (
	PluginValidatingWebhook = "ValidatingAdmissionWebhook"
	PluginMutatingWebhook   = "MutatingAdmissionWebhook"
	PluginValidatingPolicy  = "ValidatingAdmissionPolicy"
	PluginMutatingPolicy    = "MutatingAdmissionPolicy"
)

// names are each kind's other vocabularies.
var names = map[Kind]struct{ kind, short, plugin string }{
	ValidatingWebhookConfigurations:   {ValidatingWebhookConfiguration, Validating, PluginValidatingWebhook},
	MutatingWebhookConfigurations:     {MutatingWebhookConfiguration, Mutating, PluginMutatingWebhook},
	ValidatingAdmissionPolicies:       {ValidatingAdmissionPolicy, ValidatingPolicy, PluginValidatingPolicy},
	ValidatingAdmissionPolicyBindings: {ValidatingAdmissionPolicyBinding, ValidatingPolicyBinding, PluginValidatingPolicy},
	MutatingAdmissionPolicies:         {MutatingAdmissionPolicy, MutatingPolicy, PluginMutatingPolicy},
	MutatingAdmissionPolicyBindings:   {MutatingAdmissionPolicyBinding, MutatingPolicyBinding, PluginMutatingPolicy},
}

// All lists every kind, in listing order: webhook configurations, then
// validating and mutating policies, each followed by its bindings.
var All = []Kind{
	ValidatingWebhookConfigurations, MutatingWebhookConfigurations,
	ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings,
	MutatingAdmissionPolicies, MutatingAdmissionPolicyBindings,
}

// Valid reports whether k is one of All.
func (k Kind) Valid() bool { _, ok := names[k]; return ok }

// Resource is the segment of the etcd key: the value of k.
func (k Kind) Resource() string { return string(k) }

// Kind is the Kubernetes kind stored under k.
func (k Kind) Kind() string { return names[k].kind }

// Short is the --kind value that selects only k.
func (k Kind) Short() string { return names[k].short }

// Plugin is the admission plugin that evaluates objects of k.
func (k Kind) Plugin() string { return names[k].plugin }

// ByResource finds a kind by its resource, ByShort by its short name; both
// exactly, case included.
func ByResource(resource string) (Kind, bool) {
	k := Kind(resource)
	return k, k.Valid()
}

// ByShort: see ByResource.
func ByShort(short string) (Kind, bool) {
	for _, k := range All {
		if k.Short() == short {
			return k, true
		}
	}
	return "", false
}

// Values are the accepted --kind values, for help text.
var Values = []string{Validating, Mutating, "policy", "all", ValidatingPolicy, ValidatingPolicyBinding, MutatingPolicy, MutatingPolicyBinding}

// Parse turns a --kind value into kinds. Besides the short names of Values
// it accepts a resource name (validatingwebhookconfigurations) or a
// Kubernetes kind (ValidatingWebhookConfiguration), case-insensitively; ""
// means all. It is bad input (failure.BadInput) otherwise.
func Parse(s string) ([]Kind, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "all":
		return append([]Kind(nil), All...), nil
	case Validating, "webhook-validating":
		return []Kind{ValidatingWebhookConfigurations}, nil
	case Mutating, "webhook-mutating":
		return []Kind{MutatingWebhookConfigurations}, nil
	case "webhook", "webhooks":
		return []Kind{ValidatingWebhookConfigurations, MutatingWebhookConfigurations}, nil
	case "policy", "policies":
		return []Kind{ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings, MutatingAdmissionPolicies, MutatingAdmissionPolicyBindings}, nil
	}
	for _, k := range All {
		if strings.EqualFold(s, string(k)) || strings.EqualFold(s, k.Kind()) || strings.EqualFold(s, k.Short()) {
			return []Kind{k}, nil
		}
	}
	return nil, failure.Input("--kind "+strings.Join(Values, "|"), "unknown --kind %q", s)
}
