// Package kinds names the admission objects breakglass handles, in each
// vocabulary it meets them in: the Kubernetes kind
// (ValidatingWebhookConfiguration), the resource, which is also the
// segment of the etcd key (validatingwebhookconfigurations), the short name
// that `breakglass etcd --kind` and a runbook's etcd.delete step take
// (validating), and the admission plugin that evaluates the objects
// (ValidatingAdmissionWebhook). It imports nothing of the project.
package kinds

// The Kubernetes kinds.
const (
	ValidatingWebhookConfiguration   = "ValidatingWebhookConfiguration"
	MutatingWebhookConfiguration     = "MutatingWebhookConfiguration"
	ValidatingAdmissionPolicy        = "ValidatingAdmissionPolicy"
	ValidatingAdmissionPolicyBinding = "ValidatingAdmissionPolicyBinding"
	MutatingAdmissionPolicy          = "MutatingAdmissionPolicy"
	MutatingAdmissionPolicyBinding   = "MutatingAdmissionPolicyBinding"
)

// The resources: PREFIX/RESOURCE/NAME in etcd (kube-apiserver stores
// admission objects without an API group segment).
const (
	ValidatingWebhookConfigurations   = "validatingwebhookconfigurations"
	MutatingWebhookConfigurations     = "mutatingwebhookconfigurations"
	ValidatingAdmissionPolicies       = "validatingadmissionpolicies"
	ValidatingAdmissionPolicyBindings = "validatingadmissionpolicybindings"
	MutatingAdmissionPolicies         = "mutatingadmissionpolicies"
	MutatingAdmissionPolicyBindings   = "mutatingadmissionpolicybindings"
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

// Info is one kind of admission object in every vocabulary.
type Info struct {
	Kind     string
	Resource string
	Short    string
	Plugin   string
}

// All lists every kind, in listing order: webhook configurations, then
// validating and mutating policies, each followed by its bindings.
var All = []Info{
	{ValidatingWebhookConfiguration, ValidatingWebhookConfigurations, Validating, PluginValidatingWebhook},
	{MutatingWebhookConfiguration, MutatingWebhookConfigurations, Mutating, PluginMutatingWebhook},
	{ValidatingAdmissionPolicy, ValidatingAdmissionPolicies, ValidatingPolicy, PluginValidatingPolicy},
	{ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindings, ValidatingPolicyBinding, PluginValidatingPolicy},
	{MutatingAdmissionPolicy, MutatingAdmissionPolicies, MutatingPolicy, PluginMutatingPolicy},
	{MutatingAdmissionPolicyBinding, MutatingAdmissionPolicyBindings, MutatingPolicyBinding, PluginMutatingPolicy},
}

// ByKind finds a kind by its Kubernetes kind, ByResource by its resource,
// ByShort by its short name; all exactly, case included.
func ByKind(kind string) (Info, bool) { return find(func(i Info) bool { return i.Kind == kind }) }

// ByResource: see ByKind.
func ByResource(resource string) (Info, bool) {
	return find(func(i Info) bool { return i.Resource == resource })
}

// ByShort: see ByKind.
func ByShort(short string) (Info, bool) { return find(func(i Info) bool { return i.Short == short }) }

func find(match func(Info) bool) (Info, bool) {
	for _, i := range All {
		if match(i) {
			return i, true
		}
	}
	return Info{}, false
}
