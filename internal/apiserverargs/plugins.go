package apiserverargs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/closest"
)

// AdmissionPlugins are kube-apiserver's admission plugin names, from
// k8s.io/kubernetes pkg/kubeapiserver/options/plugins.go (AllOrderedPlugins)
// of v1.32 to v1.37, the versions the lab builds. kube-apiserver refuses to
// start on a name it does not know, so a misspelt plugin would take the API
// server down instead of bringing it back.
var AdmissionPlugins = []string{
	"AlwaysAdmit", "AlwaysDeny", "AlwaysPullImages", "CertificateApproval", "CertificateSigning",
	"CertificateSubjectRestriction", "ClusterTrustBundleAttest", "DefaultIngressClass", "DefaultStorageClass",
	"DefaultTolerationSeconds", "DenyServiceExternalIPs", "EventRateLimit", "ExtendedResourceToleration",
	"ImagePolicyWebhook", "LimitPodHardAntiAffinityTopology", "LimitRanger", "MutatingAdmissionPolicy",
	"MutatingAdmissionWebhook", "NamespaceAutoProvision", "NamespaceExists", "NamespaceLifecycle",
	"NodeDeclaredFeatureValidator", "NodeRestriction", "OwnerReferencesPermissionEnforcement",
	"PersistentVolumeClaimResize", "PodGroupProtection", "PodNodeSelector", "PodResizeValidator", "PodSecurity",
	"PodTolerationRestriction", "PodTopologyLabels", "Priority", "ResourceQuota", "RuntimeClass", "ServiceAccount",
	"StorageObjectInUseProtection", "TaintNodesByCondition", "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook",
}

// ValidPluginName reports whether s has the shape of an admission plugin
// name: an upper-case letter, then letters and digits
// (ValidatingAdmissionWebhook). Nothing else may be written into
// --disable-admission-plugins.
func ValidPluginName(s string) bool {
	if len(s) < 2 || len(s) > 100 || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// PluginError is a name that is not one of kube-apiserver's admission
// plugins; Suggestion is the one meant, when one is near.
type PluginError struct {
	Name, Suggestion string
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("%q is not a kube-apiserver admission plugin", e.Name)
}

// Hint names the plugin meant, or the usual ones.
func (e *PluginError) Hint() string {
	if e.Suggestion != "" {
		return "did you mean " + e.Suggestion + "?"
	}
	return "name plugins as kube-apiserver spells them, e.g. ValidatingAdmissionWebhook, MutatingAdmissionWebhook, ValidatingAdmissionPolicy"
}

// CheckPlugin returns a *PluginError when name is not an admission plugin.
func CheckPlugin(name string) error {
	if slices.Contains(AdmissionPlugins, name) {
		return nil
	}
	for _, p := range AdmissionPlugins {
		if strings.EqualFold(p, name) {
			return &PluginError{Name: name, Suggestion: p}
		}
	}
	return &PluginError{Name: name, Suggestion: closest.Typo(name, AdmissionPlugins)}
}
