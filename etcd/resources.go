package etcd

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is the resource segment of an etcd key: PREFIX/RESOURCE/NAME.
// kube-apiserver stores admission objects without an API group segment.
type Resource string

// The admission resources breakglass knows.
const (
	ValidatingWebhookConfigurations   Resource = "validatingwebhookconfigurations"
	MutatingWebhookConfigurations     Resource = "mutatingwebhookconfigurations"
	ValidatingAdmissionPolicies       Resource = "validatingadmissionpolicies"
	ValidatingAdmissionPolicyBindings Resource = "validatingadmissionpolicybindings"
	MutatingAdmissionPolicies         Resource = "mutatingadmissionpolicies"
	MutatingAdmissionPolicyBindings   Resource = "mutatingadmissionpolicybindings"
)

// AllResources lists every admission resource, in listing order.
var AllResources = []Resource{
	ValidatingWebhookConfigurations,
	MutatingWebhookConfigurations,
	ValidatingAdmissionPolicies,
	ValidatingAdmissionPolicyBindings,
	MutatingAdmissionPolicies,
	MutatingAdmissionPolicyBindings,
}

type resourceInfo struct {
	kind string
	// storage is the version kube-apiserver 1.34 writes; used when a value
	// does not say which version it is.
	storage schema.GroupVersion
	flag    string
}

var (
	gvV1       = schema.GroupVersion{Group: "admissionregistration.k8s.io", Version: "v1"}
	gvV1alpha1 = schema.GroupVersion{Group: "admissionregistration.k8s.io", Version: "v1alpha1"}
)

var resourceInfos = map[Resource]resourceInfo{
	ValidatingWebhookConfigurations:   {"ValidatingWebhookConfiguration", gvV1, "validating"},
	MutatingWebhookConfigurations:     {"MutatingWebhookConfiguration", gvV1, "mutating"},
	ValidatingAdmissionPolicies:       {"ValidatingAdmissionPolicy", gvV1, "validating-policy"},
	ValidatingAdmissionPolicyBindings: {"ValidatingAdmissionPolicyBinding", gvV1, "validating-policy-binding"},
	MutatingAdmissionPolicies:         {"MutatingAdmissionPolicy", gvV1alpha1, "mutating-policy"},
	MutatingAdmissionPolicyBindings:   {"MutatingAdmissionPolicyBinding", gvV1alpha1, "mutating-policy-binding"},
}

// Kind is the Kubernetes kind stored under r.
func (r Resource) Kind() string { return resourceInfos[r].kind }

// KindFlag is the --kind value that selects only r.
func (r Resource) KindFlag() string { return resourceInfos[r].flag }

func (r Resource) valid() bool { _, ok := resourceInfos[r]; return ok }

// KindValues are the accepted --kind values, for help text.
var KindValues = []string{"validating", "mutating", "policy", "all", "validating-policy", "validating-policy-binding", "mutating-policy", "mutating-policy-binding"}

// ParseKind turns a --kind value into resources. Besides the short names of
// KindValues it accepts a resource name (validatingwebhookconfigurations) or
// a kind (ValidatingWebhookConfiguration), case-insensitively; "" means all.
func ParseKind(s string) ([]Resource, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "all":
		return append([]Resource(nil), AllResources...), nil
	case "validating", "webhook-validating":
		return []Resource{ValidatingWebhookConfigurations}, nil
	case "mutating", "webhook-mutating":
		return []Resource{MutatingWebhookConfigurations}, nil
	case "webhook", "webhooks":
		return []Resource{ValidatingWebhookConfigurations, MutatingWebhookConfigurations}, nil
	case "policy", "policies":
		return []Resource{ValidatingAdmissionPolicies, ValidatingAdmissionPolicyBindings, MutatingAdmissionPolicies, MutatingAdmissionPolicyBindings}, nil
	}
	for _, r := range AllResources {
		if strings.EqualFold(s, string(r)) || strings.EqualFold(s, r.Kind()) || strings.EqualFold(s, r.KindFlag()) {
			return []Resource{r}, nil
		}
	}
	return nil, &ConfigError{Reason: fmt.Sprintf("unknown --kind %q", s), Hint: "--kind " + strings.Join(KindValues, "|")}
}

// normalizePrefix mirrors kube-apiserver, which joins its --etcd-prefix to "/".
func normalizePrefix(p string) string {
	if p == "" {
		p = DefaultPrefix
	}
	return path.Join("/", p)
}

// DefaultPrefix is kube-apiserver's default --etcd-prefix.
const DefaultPrefix = "/registry"

// resourcePrefix is the range prefix listing every object of r: PREFIX/RESOURCE/.
func resourcePrefix(prefix string, r Resource) string {
	return prefix + "/" + string(r) + "/"
}

// splitKey parses PREFIX/RESOURCE/NAME; ok is false for any other shape.
func splitKey(prefix, key string) (r Resource, name string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix+"/")
	if !found {
		return "", "", false
	}
	res, name, found := strings.Cut(rest, "/")
	if !found || name == "" || strings.Contains(name, "/") || !Resource(res).valid() {
		return "", "", false
	}
	return Resource(res), name, true
}
