package etcd

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Resource is the resource segment of an etcd key: PREFIX/RESOURCE/NAME.
// kube-apiserver stores admission objects without an API group segment.
type Resource string

// The admission resources breakglass knows.
const (
	ValidatingWebhookConfigurations   Resource = kinds.ValidatingWebhookConfigurations
	MutatingWebhookConfigurations     Resource = kinds.MutatingWebhookConfigurations
	ValidatingAdmissionPolicies       Resource = kinds.ValidatingAdmissionPolicies
	ValidatingAdmissionPolicyBindings Resource = kinds.ValidatingAdmissionPolicyBindings
	MutatingAdmissionPolicies         Resource = kinds.MutatingAdmissionPolicies
	MutatingAdmissionPolicyBindings   Resource = kinds.MutatingAdmissionPolicyBindings
)

// AllResources lists every admission resource, in listing order.
var AllResources = func() []Resource {
	out := make([]Resource, len(kinds.All))
	for i, k := range kinds.All {
		out[i] = Resource(k.Resource)
	}
	return out
}()

var (
	gvV1       = schema.GroupVersion{Group: "admissionregistration.k8s.io", Version: "v1"}
	gvV1alpha1 = schema.GroupVersion{Group: "admissionregistration.k8s.io", Version: "v1alpha1"}
)

// storageVersions are the versions kube-apiserver 1.34 writes; used when a
// value does not say which version it is.
var storageVersions = map[Resource]schema.GroupVersion{
	ValidatingWebhookConfigurations:   gvV1,
	MutatingWebhookConfigurations:     gvV1,
	ValidatingAdmissionPolicies:       gvV1,
	ValidatingAdmissionPolicyBindings: gvV1,
	MutatingAdmissionPolicies:         gvV1alpha1,
	MutatingAdmissionPolicyBindings:   gvV1alpha1,
}

func (r Resource) info() kinds.Info { i, _ := kinds.ByResource(string(r)); return i }

// Kind is the Kubernetes kind stored under r.
func (r Resource) Kind() string { return r.info().Kind }

// KindFlag is the --kind value that selects only r.
func (r Resource) KindFlag() string { return r.info().Short }

func (r Resource) valid() bool { _, ok := kinds.ByResource(string(r)); return ok }

// KindValues are the accepted --kind values, for help text.
var KindValues = []string{kinds.Validating, kinds.Mutating, "policy", "all", kinds.ValidatingPolicy, kinds.ValidatingPolicyBinding, kinds.MutatingPolicy, kinds.MutatingPolicyBinding}

// ParseKind turns a --kind value into resources. Besides the short names of
// KindValues it accepts a resource name (validatingwebhookconfigurations) or
// a kind (ValidatingWebhookConfiguration), case-insensitively; "" means all.
func ParseKind(s string) ([]Resource, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "all":
		return append([]Resource(nil), AllResources...), nil
	case kinds.Validating, "webhook-validating":
		return []Resource{ValidatingWebhookConfigurations}, nil
	case kinds.Mutating, "webhook-mutating":
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
