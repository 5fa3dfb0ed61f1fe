package etcd_test

import (
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
)

func TestParseKey(t *testing.T) {
	ns, cl, odd, out := etcd.ScopeNamespaced, etcd.ScopeCluster, etcd.ScopeOdd, etcd.ScopeOutside
	for _, tc := range []struct {
		prefix, key string
		want        etcd.KeyParts
	}{
		// Built-in resources, stored without their group.
		{"", "/registry/pods/default/web-0", etcd.KeyParts{Resource: "pods", Namespace: "default", Name: "web-0", Scope: ns}},
		{"", "/registry/events/flood/web-0.17a2b3c4d5e6f708", etcd.KeyParts{Resource: "events", Namespace: "flood", Name: "web-0.17a2b3c4d5e6f708", Scope: ns}},
		{"", "/registry/leases/kube-system/kube-scheduler", etcd.KeyParts{Resource: "leases", Namespace: "kube-system", Name: "kube-scheduler", Scope: ns}},
		{"", "/registry/namespaces/kube-system", etcd.KeyParts{Resource: "namespaces", Name: "kube-system", Scope: cl}},
		{"", "/registry/minions/cp1", etcd.KeyParts{Resource: "minions", Name: "cp1", Scope: cl}},
		{"", "/registry/masterleases/10.5.0.2", etcd.KeyParts{Resource: "masterleases", Name: "10.5.0.2", Scope: cl}},
		{"", "/registry/ranges/serviceips", etcd.KeyParts{Resource: "ranges", Name: "serviceips", Scope: cl}},
		{"", "/registry/deployments/kube-system/coredns", etcd.KeyParts{Resource: "deployments", Namespace: "kube-system", Name: "coredns", Scope: ns}},
		{"", "/registry/validatingwebhookconfigurations/kyverno", etcd.KeyParts{Resource: "validatingwebhookconfigurations", Name: "kyverno", Scope: cl}},
		// Two-segment built-ins.
		{"", "/registry/services/specs/default/kubernetes", etcd.KeyParts{Resource: "services/specs", Namespace: "default", Name: "kubernetes", Scope: ns}},
		{"", "/registry/services/endpoints/default/kubernetes", etcd.KeyParts{Resource: "services/endpoints", Namespace: "default", Name: "kubernetes", Scope: ns}},
		// API groups stored with their group: APIServices, CRDs, custom resources.
		{"", "/registry/apiregistration.k8s.io/apiservices/v1.apps", etcd.KeyParts{Resource: "apiregistration.k8s.io/apiservices", Name: "v1.apps", Scope: cl}},
		{"", "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", etcd.KeyParts{Resource: "apiextensions.k8s.io/customresourcedefinitions", Name: "widgets.example.com", Scope: cl}},
		{"", "/registry/example.com/widgets/team-a/w1", etcd.KeyParts{Resource: "example.com/widgets", Namespace: "team-a", Name: "w1", Scope: ns}},
		{"", "/registry/example.com/clusterwidgets/w1", etcd.KeyParts{Resource: "example.com/clusterwidgets", Name: "w1", Scope: cl}},
		{"", "/registry/cilium.io/ciliumendpoints/kube-system/coredns-abc", etcd.KeyParts{Resource: "cilium.io/ciliumendpoints", Namespace: "kube-system", Name: "coredns-abc", Scope: ns}},
		// A resource breakglass does not know: the segment count decides.
		{"", "/registry/newthings/x", etcd.KeyParts{Resource: "newthings", Name: "x", Scope: cl}},
		{"", "/registry/newthings/team-a/x", etcd.KeyParts{Resource: "newthings", Namespace: "team-a", Name: "x", Scope: ns}},
		// Names are kept as they are (rendering makes them safe).
		{"", "/registry/pods/default/evil\x1b[31m", etcd.KeyParts{Resource: "pods", Namespace: "default", Name: "evil\x1b[31m", Scope: ns}},
		// Odd: a known scope with the other count, empty segments, too few or too many.
		{"", "/registry/pods/default", etcd.KeyParts{Resource: "pods", Name: "pods/default", Scope: odd}},
		{"", "/registry/namespaces/a/b", etcd.KeyParts{Resource: "namespaces", Name: "namespaces/a/b", Scope: odd}},
		{"", "/registry/services/specs/x", etcd.KeyParts{Resource: "services/specs", Name: "services/specs/x", Scope: odd}},
		{"", "/registry/", etcd.KeyParts{Resource: "", Name: "", Scope: odd}},
		{"", "/registry//x", etcd.KeyParts{Resource: "", Name: "/x", Scope: odd}},
		{"", "/registry/pods/default/", etcd.KeyParts{Resource: "pods", Name: "pods/default/", Scope: odd}},
		{"", "/registry/pods", etcd.KeyParts{Resource: "pods", Name: "pods", Scope: odd}},
		{"", "/registry/example.com/widgets", etcd.KeyParts{Resource: "example.com", Name: "example.com/widgets", Scope: odd}},
		{"", "/registry/example.com/widgets/a/b/c", etcd.KeyParts{Resource: "example.com/widgets", Name: "example.com/widgets/a/b/c", Scope: odd}},
		{"", "/registry/newthings/a/b/c", etcd.KeyParts{Resource: "newthings", Name: "newthings/a/b/c", Scope: odd}},
		// Outside the prefix.
		{"", "/registry", etcd.KeyParts{Resource: "/registry", Scope: out}},
		{"", "/registryx/pods/a/b", etcd.KeyParts{Resource: "/registryx", Scope: out}},
		{"", "compact_rev_key", etcd.KeyParts{Resource: "compact_rev_key", Scope: out}},
		{"", "/breakglass/lock", etcd.KeyParts{Resource: "/breakglass", Scope: out}},
		{"", "/", etcd.KeyParts{Resource: "/", Scope: out}},
		// --etcd-prefix.
		{"/custom", "/custom/pods/a/b", etcd.KeyParts{Resource: "pods", Namespace: "a", Name: "b", Scope: ns}},
		{"custom/", "/custom/namespaces/a", etcd.KeyParts{Resource: "namespaces", Name: "a", Scope: cl}},
		{"/custom", "/registry/pods/a/b", etcd.KeyParts{Resource: "/registry", Scope: out}},
		{"/a/b", "/a/b/pods/x/y", etcd.KeyParts{Resource: "pods", Namespace: "x", Name: "y", Scope: ns}},
	} {
		if got := etcd.ParseKey(tc.prefix, tc.key); got != tc.want {
			t.Errorf("ParseKey(%q, %q) = %+v, want %+v", tc.prefix, tc.key, got, tc.want)
		}
	}
}

// What ParseKey reads as namespaced or cluster-scoped is the key, spelled
// back exactly; a key under the prefix is never read as outside it.
func FuzzParseKey(f *testing.F) {
	prefixes := []string{"/registry", "/custom", "/a/b"}
	for _, k := range []string{"/registry/pods/a/b", "/registry/example.com/w/a/b", "/registry/services/specs/a/b", "/registry//", "compact_rev_key", "/registry/namespaces/x"} {
		f.Add(uint8(0), k)
	}
	f.Add(uint8(1), "/custom/a.b/c/d")
	f.Add(uint8(2), "/a/b/pods/x/y")
	f.Fuzz(func(t *testing.T, which uint8, key string) {
		prefix := prefixes[int(which)%len(prefixes)]
		p := etcd.ParseKey(prefix, key)
		under := prefix + "/"
		switch p.Scope {
		case etcd.ScopeNamespaced:
			if got := under + p.Resource + "/" + p.Namespace + "/" + p.Name; got != key || p.Namespace == "" || p.Name == "" {
				t.Fatalf("%q read as %+v", key, p)
			}
		case etcd.ScopeCluster:
			if got := under + p.Resource + "/" + p.Name; got != key || p.Namespace != "" || p.Name == "" {
				t.Fatalf("%q read as %+v", key, p)
			}
		case etcd.ScopeOdd:
			if !strings.HasPrefix(key, under) || under+p.Name != key {
				t.Fatalf("%q read as %+v", key, p)
			}
		case etcd.ScopeOutside:
			if strings.HasPrefix(key, under) || !strings.HasPrefix(key, p.Resource) {
				t.Fatalf("%q read as %+v", key, p)
			}
		default:
			t.Fatalf("%q: scope %q", key, p.Scope)
		}
		if p.Scope == etcd.ScopeNamespaced || p.Scope == etcd.ScopeCluster {
			if strings.Contains(p.Name, "/") || strings.Contains(p.Namespace, "/") {
				t.Fatalf("%q: a slash in %+v", key, p)
			}
		}
	})
}
