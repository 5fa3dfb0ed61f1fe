package etcd

import "strings"

// Scope says how a key's place in the keyspace was read.
type Scope string

// The scopes of KeyParts.
const (
	ScopeNamespaced Scope = "namespaced" // PREFIX/RESOURCE/NAMESPACE/NAME
	ScopeCluster    Scope = "cluster"    // PREFIX/RESOURCE/NAME
	// ScopeOdd is a key under the prefix that is not shaped as
	// kube-apiserver writes them: kept and counted, never interpreted.
	ScopeOdd Scope = "odd"
	// ScopeOutside is a key outside the prefix (kube-apiserver's
	// compact_rev_key, breakglass's /breakglass/ keys, another program's).
	ScopeOutside Scope = "outside"
)

// KeyParts is what an etcd key says about the object stored under it.
type KeyParts struct {
	// Resource is the resource as the key spells it: "pods",
	// "services/specs", "minions", or GROUP/PLURAL for API groups stored
	// with their group ("apiregistration.k8s.io/apiservices", custom
	// resources). For an odd key, as much of it as could be read; for a
	// key outside the prefix, its first segment ("/breakglass", "compact_rev_key").
	Resource  string
	Namespace string
	Name      string
	Scope     Scope
}

// ParseKey reads an etcd key under kube-apiserver's --etcd-prefix prefix
// (normalized, e.g. /registry). The rules, from how kube-apiserver lays
// out its keys:
//   - Built-in resources are stored without their API group:
//     PREFIX/pods/NS/NAME, PREFIX/namespaces/NAME, PREFIX/deployments/NS/NAME;
//     a few under two segments: services/specs, services/endpoints.
//   - A first segment with a dot is an API group, followed by the plural:
//     PREFIX/GROUP/PLURAL/[NS/]NAME. kube-apiserver stores custom resources
//     (their group must hold a dot), APIServices
//     (apiregistration.k8s.io/apiservices) and CRDs
//     (apiextensions.k8s.io/customresourcedefinitions) this way; no built-in
//     resource name holds a dot.
//   - After the resource, two segments are NAMESPACE/NAME and one is the
//     NAME of a cluster-scoped object. Names and namespaces never hold a
//     slash, so the count decides; the key cannot say whether a custom
//     resource is declared namespaced (that is in its CRD, not read here),
//     only how it was stored. For resources known to be namespaced or
//     cluster-scoped, the other count is odd.
//   - Anything else (empty segments, too few or too many) is ScopeOdd.
func ParseKey(prefix, key string) KeyParts {
	under := underPrefix(prefix)
	rest, ok := strings.CutPrefix(key, under)
	if !ok {
		return KeyParts{Resource: firstSegment(key), Scope: ScopeOutside}
	}
	segs := strings.Split(rest, "/")
	odd := func(resource string) KeyParts { return KeyParts{Resource: resource, Name: rest, Scope: ScopeOdd} }
	for _, s := range segs {
		if s == "" {
			return odd(segs[0])
		}
	}
	var resource string
	var n int // segments the resource takes
	switch {
	case strings.Contains(segs[0], "."):
		if len(segs) < 3 {
			return odd(segs[0])
		}
		resource, n = segs[0]+"/"+segs[1], 2
	case segs[0] == "services" && len(segs) > 1 && (segs[1] == "specs" || segs[1] == "endpoints"):
		resource, n = segs[0]+"/"+segs[1], 2
	default:
		resource, n = segs[0], 1
	}
	known, isKnown := knownScopes[resource]
	switch left := segs[n:]; {
	case len(left) == 1 && (!isKnown || known == ScopeCluster):
		return KeyParts{Resource: resource, Name: left[0], Scope: ScopeCluster}
	case len(left) == 2 && (!isKnown || known == ScopeNamespaced):
		return KeyParts{Resource: resource, Namespace: left[0], Name: left[1], Scope: ScopeNamespaced}
	}
	return odd(resource)
}

// underPrefix is the string every key under prefix starts with.
func underPrefix(prefix string) string { return strings.TrimSuffix(normalizePrefix(prefix), "/") + "/" }

// firstSegment is a key's first path segment, with its leading slash:
// "/breakglass" for /breakglass/lock, the whole key when it has no slash.
func firstSegment(key string) string {
	if i := strings.IndexByte(key[min(1, len(key)):], '/'); i >= 0 {
		return key[:i+min(1, len(key))]
	}
	return key
}

// knownScopes are the built-in resources whose scope is certain, as their
// keys spell them (nodes are "minions", replicationcontrollers
// "controllers", ingresses "ingress"). Other resources are read by the
// segment count alone.
var knownScopes = func() map[string]Scope {
	m := map[string]Scope{}
	for _, r := range strings.Fields(`pods events configmaps secrets serviceaccounts services/specs services/endpoints
		endpointslices controllers limitranges resourcequotas podtemplates persistentvolumeclaims leases
		deployments replicasets statefulsets daemonsets controllerrevisions jobs cronjobs
		horizontalpodautoscalers poddisruptionbudgets roles rolebindings networkpolicies ingress
		csistoragecapacities resourceclaims resourceclaimtemplates`) {
		m[r] = ScopeNamespaced
	}
	for _, r := range strings.Fields(`namespaces minions persistentvolumes clusterroles clusterrolebindings
		storageclasses csidrivers csinodes volumeattachments priorityclasses runtimeclasses ingressclasses
		certificatesigningrequests flowschemas prioritylevelconfigurations servicecidrs ipaddresses
		validatingwebhookconfigurations mutatingwebhookconfigurations validatingadmissionpolicies
		validatingadmissionpolicybindings mutatingadmissionpolicies mutatingadmissionpolicybindings
		masterleases ranges deviceclasses resourceslices volumeattributesclasses clustertrustbundles
		apiregistration.k8s.io/apiservices apiextensions.k8s.io/customresourcedefinitions`) {
		m[r] = ScopeCluster
	}
	return m
}()
