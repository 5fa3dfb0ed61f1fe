package etcd

import (
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

var (
	gvV1       = schema.GroupVersion{Group: "admissionregistration.k8s.io", Version: "v1"}
	gvV1alpha1 = schema.GroupVersion{Group: "admissionregistration.k8s.io", Version: "v1alpha1"}
)

// storageVersions are the versions kube-apiserver 1.34 writes; used when a
// value does not say which version it is.
var storageVersions = map[kinds.Kind]schema.GroupVersion{
	kinds.ValidatingWebhookConfigurations:   gvV1,
	kinds.MutatingWebhookConfigurations:     gvV1,
	kinds.ValidatingAdmissionPolicies:       gvV1,
	kinds.ValidatingAdmissionPolicyBindings: gvV1,
	kinds.MutatingAdmissionPolicies:         gvV1alpha1,
	kinds.MutatingAdmissionPolicyBindings:   gvV1alpha1,
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

// resourcePrefix is the range prefix listing every object of a resource: PREFIX/RESOURCE/.
func resourcePrefix(prefix, resource string) string {
	return prefix + "/" + resource + "/"
}

// splitKey parses PREFIX/RESOURCE/NAME; ok is false for any other shape.
func splitKey(prefix, key string) (k kinds.Kind, name string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix+"/")
	if !found {
		return "", "", false
	}
	res, name, found := strings.Cut(rest, "/")
	k, known := kinds.ByResource(res)
	if !found || name == "" || strings.Contains(name, "/") || !known {
		return "", "", false
	}
	return k, name, true
}
