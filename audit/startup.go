package audit

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/breakglass-dev/breakglass/internal/startupwrites"
)

// The identity of kube-apiserver's loopback client. Every write below is
// sent through it. Source: k8s.io/apiserver/pkg/server/config.go
// (AuthorizeClientBearerToken: Name user.APIServerUser, UID a fresh UUID per
// process, Groups {user.AllAuthenticated, user.SystemPrivilegedGroup}, in this
// order; no extra) and k8s.io/apiserver/pkg/authentication/user/user.go.
const (
	APIServerUser         = "system:apiserver"
	groupAuthenticated    = "system:authenticated"
	groupSystemMasters    = "system:masters"
	apiServerUIDForModel  = "00000000-0000-0000-0000-000000000000" // random per process: treated as unknown in CEL
	labelMetadataName     = "kubernetes.io/metadata.name"
	labelRBACBootstrap    = "kubernetes.io/bootstrapping"
	annotationRBACUpdate  = "rbac.authorization.kubernetes.io/autoupdate"
	annotationAPFUpdate   = "apf.kubernetes.io/autoupdate-spec"
	labelAggregatorManage = "kube-aggregator.kubernetes.io/automanaged"
)

// APIServerGroups are the groups of the loopback identity, in the order
// kube-apiserver sets them.
var APIServerGroups = []string{groupAuthenticated, groupSystemMasters}

// Effect is what a rejected start-up write does to kube-apiserver.
type Effect string

const (
	// EffectExit: a post-start hook gives up and returns an error; the process
	// exits (klog.Fatalf in k8s.io/apiserver/pkg/server/hooks.go runPostStartHook).
	EffectExit Effect = "exit"
	// EffectNotReady: a post-start hook or boot check never completes;
	// /readyz and /livez keep failing and kubelet restarts the container.
	EffectNotReady Effect = "not-ready"
	// EffectDegraded: the write is logged and retried later; start-up goes on.
	EffectDegraded Effect = "degraded"
)

// StartupRequest is one admission request kube-apiserver sends to itself while
// it starts (or right after), modelled as the webhook dispatcher sees it.
type StartupRequest struct {
	ID          string `json:"id"`
	Description string `json:"description"`
	Operation   string `json:"operation"`
	Group       string `json:"group"`
	Version     string `json:"version"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Kind        string `json:"kind"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name"`
	// Fatal is true when a rejected write stops start-up (Effect exit or not-ready).
	Fatal  bool   `json:"fatal"`
	Effect Effect `json:"effect"`
	// Hook is the post-start hook or boot check that fails, as /readyz?verbose names it.
	Hook string `json:"hook"`
	// Deadline is how long kube-apiserver keeps trying before the effect shows.
	Deadline string `json:"deadline"`
	// When says on which starts the write happens at all.
	When string `json:"when"`
	// Source is the Kubernetes source file that issues the write (v1.34.4).
	Source string `json:"source"`
	// NewClusterOnly: the write happens only on an empty etcd, where no
	// webhook configuration can exist yet (the objects cannot be deleted:
	// immortal namespaces, system PriorityClasses).
	NewClusterOnly bool `json:"newClusterOnly,omitempty"`
	// Recorded names the binaries that sent it ("v1.33.13 -> v1.34.4"):
	// the write was recorded from them (internal/startupwrites), not modelled.
	Recorded string `json:"recorded,omitempty"`

	minMinor     int               // first minor version that sends it
	maxMinor     int               // last minor version that sends it; 0: every later one
	existsFrom   int               // every version from this minor creates it: not written again after one ran
	labels       map[string]string // object labels (objectSelector, object.metadata.labels)
	annotations  map[string]string
	fields       []string // top-level object fields besides apiVersion/kind/metadata (not modelled: unknown in CEL)
	unknownName  bool     // the name varies per cluster (IP address, hash, generated)
	fieldManager string
	equivalents  []equivalent
	user         *authenticationv1.UserInfo // nil: the loopback identity
}

// equivalent is another served group/version of the same storage, used by
// matchPolicy Equivalent (k8s.io/apiserver/pkg/admission/plugin/webhook/generic/webhook.go
// ShouldCallHook; the registry is keyed by storage prefix, config.go
// NewEquivalentResourceRegistryWithIdentity).
type equivalent struct {
	gvr schema.GroupVersionResource
	gvk schema.GroupVersionKind
	// runtimeConfig is the --runtime-config group/version that must be
	// enabled for it to be served; "" when served by default.
	runtimeConfig string
}

// GVR returns the request's group/version/resource.
func (r StartupRequest) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// GVK returns the request's group/version/kind.
func (r StartupRequest) GVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
}

// String is a short human form: "CREATE networking.k8s.io/v1 servicecidrs kubernetes".
func (r StartupRequest) String() string {
	gv := r.Version
	if r.Group != "" {
		gv = r.Group + "/" + r.Version
	}
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	name := r.Name
	if r.Namespace != "" && r.Resource != "namespaces" {
		name = r.Namespace + "/" + r.Name
	}
	return fmt.Sprintf("%s %s %s %s", r.Operation, gv, res, name)
}

// Labels returns a copy of the modelled object's labels.
func (r StartupRequest) Labels() map[string]string {
	out := make(map[string]string, len(r.labels))
	for k, v := range r.labels {
		out[k] = v
	}
	return out
}

// clusterScoped tells whether the request has no namespace in the admission
// attributes. For a Namespace object the namespace attribute is its own name.
func (r StartupRequest) clusterScoped() bool { return r.Namespace == "" }

// StartupRequests returns the writes kube-apiserver `to` sends itself on
// its first start on the etcd data of a cluster that ran `from` (minor
// versions such as "1.33" or "v1.33.13"; "" from means the oldest
// modelled, 1.32, "" to means 1.34; from == to is a restart or a patch
// upgrade), including those that happen only on an empty etcd. For a pair
// recorded from the real binaries (internal/startupwrites: each minor
// after the one before it, and 1.32 -> 1.34) they are the recorded writes;
// for any other, the catalogue's model (ModelledStartupRequests).
func StartupRequests(from, to string) ([]StartupRequest, error) {
	f, t, err := parseVersions(from, to)
	if err != nil {
		return nil, err
	}
	if rec, ok := startupwrites.For(f, t); ok {
		return recordedRequests(rec)
	}
	return modelled(f, t), nil
}

// ModelledStartupRequests is the catalogue's model of the writes, for any
// pair: what the sources say a version may write, a superset of what an
// upgrade sends. What is written depends on both versions: an object every
// version from 1.33 on creates (the default ServiceCIDR) is already there
// when upgrading from 1.33.
func ModelledStartupRequests(from, to string) ([]StartupRequest, error) {
	f, t, err := parseVersions(from, to)
	if err != nil {
		return nil, err
	}
	return modelled(f, t), nil
}

func modelled(f, t int) []StartupRequest {
	var out []StartupRequest
	for _, r := range startupCatalogue() {
		if r.sentOn(f, t) {
			out = append(out, r)
		}
	}
	return out
}

// sentOn tells whether the write happens when minor `to` starts on the data
// of minor `from`.
func (r StartupRequest) sentOn(from, to int) bool {
	if to < r.minMinor || (r.maxMinor != 0 && to > r.maxMinor) {
		return false
	}
	// Written once per cluster by every version from existsFrom on: a
	// cluster that already ran such a version has it.
	return r.existsFrom == 0 || from < r.existsFrom
}

// SupportedVersions lists the Kubernetes versions the model was checked against.
var SupportedVersions = []string{"1.32", "1.33", "1.34", "1.35", "1.36", "1.37"}

const (
	minModelled, maxModelled = 32, 37
	defaultFrom, defaultTo   = 32, 34 // the incident's upgrade
)

// NormalizeVersion returns "1.NN" for a modelled version ("1.35", "v1.35.4",
// "1.35.4"), or an *UnsupportedVersionError.
func NormalizeVersion(v string) (string, error) {
	m, err := parseMinor(v, 0)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("1.%d", m), nil
}

// NextVersion is the minor after v ("1.33" -> "1.34"), or an
// *UnsupportedVersionError when that one is not modelled.
func NextVersion(v string) (string, error) {
	m, err := parseMinor(v, 0)
	if err != nil {
		return "", err
	}
	return NormalizeVersion(fmt.Sprintf("1.%d", m+1))
}

// parseVersions resolves the pair; from must not be newer than to.
func parseVersions(from, to string) (int, int, error) {
	f, err := parseMinor(from, defaultFrom)
	if err != nil {
		return 0, 0, err
	}
	t, err := parseMinor(to, defaultTo)
	if err != nil {
		return 0, 0, err
	}
	if from == "" && f > t {
		f = t
	}
	if f > t {
		return 0, 0, &VersionOrderError{From: from, To: to}
	}
	return f, t, nil
}

func parseMinor(v string, def int) (int, error) {
	if v == "" && def != 0 {
		return def, nil
	}
	m := versionShape.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return 0, &UnsupportedVersionError{Version: v, Reason: "want 1.NN or 1.NN.P, as 1.34 or v1.34.4"}
	}
	major, minor, patch := m[1], m[2], m[3]
	for _, part := range []struct{ what, s string }{{"minor", minor}, {"patch", patch}} {
		switch {
		case part.s == "":
		case strings.Trim(part.s, "0123456789") != "":
			return 0, &UnsupportedVersionError{Version: v, Reason: fmt.Sprintf("its %s %q is not a number", part.what, part.s)}
		case len(part.s) > 1 && part.s[0] == '0':
			return 0, &UnsupportedVersionError{Version: v, Reason: fmt.Sprintf("its %s %q has a leading zero", part.what, part.s)}
		default:
			if _, err := strconv.ParseUint(part.s, 10, 31); err != nil {
				return 0, &UnsupportedVersionError{Version: v, Reason: fmt.Sprintf("its %s %q is out of range", part.what, part.s)}
			}
		}
	}
	n, _ := strconv.Atoi(minor)
	if major != "1" || n < minModelled || n > maxModelled {
		return 0, &UnsupportedVersionError{Version: v}
	}
	return n, nil
}

// versionShape is a Kubernetes version as people, images and /version
// write it: [v]MAJOR.MINOR[.PATCH[-PRERELEASE][+BUILD]]. Minor and patch
// are checked as numbers after (so that "x" is said to be no number).
var versionShape = regexp.MustCompile(`^v?([0-9]+)\.([0-9A-Za-z]+)(?:\.([0-9A-Za-z]+)(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?:\+[0-9A-Za-z]+(?:[.-][0-9A-Za-z]+)*)?)?$`)

const (
	hookServiceCIDR = "poststarthook/start-kubernetes-service-cidr-controller"
	hookIPRepair    = "poststarthook/start-service-ip-repair-controllers"
	hookRBAC        = "poststarthook/rbac/bootstrap-roles"
	hookPriority    = "poststarthook/scheduling/bootstrap-system-priority-classes"
	hookAPF         = "poststarthook/priority-and-fairness-config-producer"
	hookAutoreg     = "autoregister-completion"

	srcServiceCIDR = "pkg/controlplane/controller/defaultservicecidr/default_servicecidr_controller.go"
	srcRepairIP    = "pkg/registry/core/service/ipallocator/controller/repairip.go, pkg/registry/core/rest/storage_core.go"
	srcRBAC        = "pkg/registry/rbac/rest/storage_rbac.go, plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
	srcPriority    = "pkg/registry/scheduling/rest/storage_scheduling.go"
	srcAPF         = "pkg/registry/flowcontrol/rest/storage_flowcontrol.go"
	srcAPFStatus   = "k8s.io/apiserver/pkg/util/flowcontrol/apf_controller.go"
	srcAutoreg     = "k8s.io/kube-aggregator/pkg/controllers/autoregister, pkg/controlplane/apiserver/aggregator.go"
	srcAvailable   = "k8s.io/kube-aggregator/pkg/controllers/status/local/local_available_controller.go"
	srcK8sService  = "pkg/controlplane/controller/kubernetesservice/controller.go"
	srcEndpoints   = "pkg/controlplane/reconcilers/lease.go, endpointsadapter.go"
	srcNamespaces  = "pkg/controlplane/controller/systemnamespaces, pkg/controlplane/apiserver/options/options.go"
	srcLease       = "pkg/controlplane/apiserver/server.go (start-kube-apiserver-identity-lease-controller)"
	srcAuthnCM     = "pkg/controlplane/controller/clusterauthenticationtrust"
	srcLegacyCM    = "pkg/controlplane/controller/legacytokentracking/controller.go"
)

var (
	rbacLabels      = map[string]string{labelRBACBootstrap: "rbac-defaults"}
	rbacAnnotations = map[string]string{annotationRBACUpdate: "true"}
	apfAnnotations  = map[string]string{annotationAPFUpdate: "true"}
	ipLabels        = map[string]string{"ipaddress.kubernetes.io/ip-family": "IPv4", "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"}
	networkingBeta  = "networking.k8s.io/v1beta1"
)

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// startupCatalogue is the list, checked against the v1.34.4 sources (and the
// v1.32.13 ones for what 1.32 does not send). Fatal writes first.
func startupCatalogue() []StartupRequest {
	var c []StartupRequest
	add := func(r StartupRequest) {
		r.Fatal = r.Effect != EffectDegraded
		c = append(c, r)
	}
	netEq := func(resource, kind string) []equivalent {
		return []equivalent{{
			gvr:           schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1beta1", Resource: resource},
			gvk:           schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1beta1", Kind: kind},
			runtimeConfig: networkingBeta,
		}}
	}

	// Default ServiceCIDR (KEP-1880, MultiCIDRServiceAllocator on by default from 1.33).
	add(StartupRequest{ID: "servicecidr-create", Description: "default ServiceCIDR \"kubernetes\" from --service-cluster-ip-range",
		Operation: "CREATE", Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs", Kind: "ServiceCIDR", Name: "kubernetes",
		Effect: EffectNotReady, Hook: hookServiceCIDR, Deadline: "never: the hook retries every 100ms and does not return",
		When: "first start of 1.33+ (the object does not exist yet)", Source: srcServiceCIDR,
		minMinor: 33, existsFrom: 33, fields: []string{"spec", "status"}, equivalents: netEq("servicecidrs", "ServiceCIDR")})
	add(StartupRequest{ID: "ipaddress-create", Description: "IPAddress for each existing Service ClusterIP (repair loop)",
		Operation: "CREATE", Group: "networking.k8s.io", Version: "v1", Resource: "ipaddresses", Kind: "IPAddress", Name: "10.96.0.1",
		Effect: EffectExit, Hook: hookIPRepair, Deadline: "1m, then the process exits (unable to perform initial IP and Port allocation check)",
		When: "first start of 1.33+, once per Service; later for every new Service", Source: srcRepairIP,
		minMinor: 33, existsFrom: 33, labels: ipLabels, fields: []string{"spec"}, unknownName: true, equivalents: netEq("ipaddresses", "IPAddress")})
	add(StartupRequest{ID: "priorityclass-create", Description: "system PriorityClass system-node-critical",
		Operation: "CREATE", Group: "scheduling.k8s.io", Version: "v1", Resource: "priorityclasses", Kind: "PriorityClass", Name: "system-node-critical",
		Effect: EffectExit, Hook: hookPriority, Deadline: "first non-503 error (a failed webhook call is a 500), at most 30s, then the process exits",
		When: "when missing: only on an empty etcd (system PriorityClasses cannot be deleted)", Source: srcPriority, NewClusterOnly: true,
		fields: []string{"value", "globalDefault", "description", "preemptionPolicy"}})
	add(StartupRequest{ID: "priorityclass-create-cluster-critical", Description: "system PriorityClass system-cluster-critical",
		Operation: "CREATE", Group: "scheduling.k8s.io", Version: "v1", Resource: "priorityclasses", Kind: "PriorityClass", Name: "system-cluster-critical",
		Effect: EffectExit, Hook: hookPriority, Deadline: "first non-503 error, at most 30s, then the process exits",
		When: "when missing: only on an empty etcd (system PriorityClasses cannot be deleted)", Source: srcPriority, NewClusterOnly: true,
		fields: []string{"value", "globalDefault", "description", "preemptionPolicy"}})

	// RBAC bootstrap policy: reconciled on every start; CREATE when missing,
	// UPDATE when the stored object lacks rules/labels/annotations (upgrades).
	rbacWhen := map[string]string{
		"CREATE": "when missing: first start, and roles new in this version (upgrades)",
		"UPDATE": "when the stored object lacks rules, subjects, labels or annotations of the bootstrap policy (upgrades)",
	}
	rbacDeadline := "30s of failed reconciliation, then the process exits (unable to initialize roles)"
	type rbacObj struct {
		id, resource, kind, ns, name string
		labels                       map[string]string
		fields                       []string
	}
	rbacObjs := []rbacObj{
		{"clusterrole", "clusterroles", "ClusterRole", "", "cluster-admin", rbacLabels, []string{"rules", "aggregationRule"}},
		{"clusterrole-system", "clusterroles", "ClusterRole", "", "system:aggregate-to-edit", merge(rbacLabels, map[string]string{"rbac.authorization.k8s.io/aggregate-to-edit": "true"}), []string{"rules", "aggregationRule"}},
		{"clusterrole-controller", "clusterroles", "ClusterRole", "", "system:controller:namespace-controller", rbacLabels, []string{"rules", "aggregationRule"}},
		{"clusterrolebinding", "clusterrolebindings", "ClusterRoleBinding", "", "cluster-admin", rbacLabels, []string{"subjects", "roleRef"}},
		{"clusterrolebinding-system", "clusterrolebindings", "ClusterRoleBinding", "", "system:controller:namespace-controller", rbacLabels, []string{"subjects", "roleRef"}},
		{"role-kube-system", "roles", "Role", "kube-system", "extension-apiserver-authentication-reader", rbacLabels, []string{"rules"}},
		{"role-kube-public", "roles", "Role", "kube-public", "system:controller:bootstrap-signer", rbacLabels, []string{"rules"}},
		{"rolebinding-kube-system", "rolebindings", "RoleBinding", "kube-system", "system::extension-apiserver-authentication-reader", rbacLabels, []string{"subjects", "roleRef"}},
		{"rolebinding-kube-public", "rolebindings", "RoleBinding", "kube-public", "system:controller:bootstrap-signer", rbacLabels, []string{"subjects", "roleRef"}},
	}
	for _, op := range []string{"CREATE", "UPDATE"} {
		for _, o := range rbacObjs {
			add(StartupRequest{ID: o.id + "-" + strings.ToLower(op), Description: "RBAC bootstrap " + o.kind + " (" + strings.ToLower(op) + ")",
				Operation: op, Group: "rbac.authorization.k8s.io", Version: "v1", Resource: o.resource, Kind: o.kind, Namespace: o.ns, Name: o.name,
				Effect: EffectExit, Hook: hookRBAC, Deadline: rbacDeadline, When: rbacWhen[op], Source: srcRBAC,
				labels: o.labels, annotations: rbacAnnotations, fields: o.fields})
		}
	}
	// RoleModifier creates kube-system and kube-public when missing; a
	// failure there fails the namespaced roles (reconciliation/namespace.go
	// tryEnsureNamespace ignores only Forbidden).
	for _, ns := range []string{"kube-system", "kube-public"} {
		add(StartupRequest{ID: "namespace-create-" + ns, Description: "system Namespace " + ns,
			Operation: "CREATE", Group: "", Version: "v1", Resource: "namespaces", Kind: "Namespace", Namespace: ns, Name: ns,
			Effect: EffectExit, Hook: hookRBAC, Deadline: rbacDeadline, When: "when missing: only on an empty etcd (the namespace cannot be deleted)", NewClusterOnly: true,
			Source: srcNamespaces + ", pkg/registry/rbac/reconciliation/namespace.go",
			labels: map[string]string{labelMetadataName: ns}, fields: []string{"spec", "status"}})
	}

	// API Priority and Fairness bootstrap configuration.
	apfDeadline := "5m of failures, then the process exits (unable to initialize APF bootstrap configuration)"
	for _, op := range []string{"CREATE", "UPDATE"} {
		when := "when missing (first start, new objects on upgrades)"
		if op == "UPDATE" {
			when = "when a mandatory object, or a suggested one with autoupdate-spec, differs from the built-in spec (upgrades)"
		}
		add(StartupRequest{ID: "flowschema-" + strings.ToLower(op), Description: "APF bootstrap FlowSchema",
			Operation: op, Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas", Kind: "FlowSchema", Name: "system-leader-election",
			Effect: EffectExit, Hook: hookAPF, Deadline: apfDeadline, When: when, Source: srcAPF,
			annotations: apfAnnotations, fields: []string{"spec", "status"}, fieldManager: "api-priority-and-fairness-config-producer-v1"})
		add(StartupRequest{ID: "prioritylevel-" + strings.ToLower(op), Description: "APF bootstrap PriorityLevelConfiguration",
			Operation: op, Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "prioritylevelconfigurations", Kind: "PriorityLevelConfiguration", Name: "workload-high",
			Effect: EffectExit, Hook: hookAPF, Deadline: apfDeadline, When: when, Source: srcAPF,
			annotations: apfAnnotations, fields: []string{"spec", "status"}, fieldManager: "api-priority-and-fairness-config-producer-v1"})
	}

	// Bootstrap objects dropped from the built-in configuration are deleted
	// by the same ensurer (removeDanglingBootstrapConfiguration); a failed
	// delete fails the whole ensure pass.
	for _, res := range []struct{ resource, kind, name string }{
		{"flowschemas", "FlowSchema", "endpoint-controller"},
		{"prioritylevelconfigurations", "PriorityLevelConfiguration", "workload-low"},
	} {
		add(StartupRequest{ID: strings.TrimSuffix(strings.ToLower(res.kind), "configuration") + "-delete", Description: "APF bootstrap " + res.kind + " no longer built in",
			Operation: "DELETE", Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: res.resource, Kind: res.kind, Name: res.name,
			Effect: EffectExit, Hook: hookAPF, Deadline: apfDeadline,
			When: "upgrades that drop a suggested object that still carries autoupdate-spec", Source: srcAPF + ", pkg/registry/flowcontrol/ensurer/strategy.go",
			annotations: apfAnnotations, fields: []string{"spec", "status"}, unknownName: true})
	}

	// APIServices of the built-in groups: autoregister-completion waits until
	// every one exists and is Available (status written by the local
	// availability controller).
	add(StartupRequest{ID: "apiservice-create", Description: "APIService of a built-in group/version (autoregister)",
		Operation: "CREATE", Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices", Kind: "APIService", Name: "v1.resource.k8s.io",
		Effect: EffectNotReady, Hook: hookAutoreg, Deadline: "never ready: the boot check waits for every built-in APIService",
		When: "when missing (first start, group/versions new in this version)", Source: srcAutoreg,
		labels: map[string]string{labelAggregatorManage: "onstart"}, fields: []string{"spec", "status"}, unknownName: true})
	add(StartupRequest{ID: "apiservice-update", Description: "APIService of a built-in group/version (autoregister sync on start)",
		Operation: "UPDATE", Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices", Kind: "APIService", Name: "v1.apps",
		Effect: EffectNotReady, Hook: hookAutoreg, Deadline: "never ready",
		When: "when the stored spec differs from the built-in one (upgrades)", Source: srcAutoreg,
		labels: map[string]string{labelAggregatorManage: "onstart"}, fields: []string{"spec", "status"}, unknownName: true})

	// Non-fatal: logged, retried, or only after readiness.
	// Local APIServices are created Available (kube-aggregator
	// pkg/registry/apiservice/strategy.go PrepareForCreate), so readiness
	// does not wait for this status write.
	add(StartupRequest{ID: "apiservice-status-update", Description: "APIService Available condition (local availability controller)",
		Operation: "UPDATE", Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices", Subresource: "status", Kind: "APIService", Name: "v1.resource.k8s.io",
		Effect: EffectDegraded, Hook: "poststarthook/apiservice-status-local-available-controller", Deadline: "retried",
		When: "only when a stored local APIService is not Available", Source: srcAvailable,
		labels: map[string]string{labelAggregatorManage: "onstart"}, fields: []string{"spec", "status"}, unknownName: true})
	add(StartupRequest{ID: "apiservice-delete", Description: "APIService of a group/version no longer served (autoregister)",
		Operation: "DELETE", Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices", Kind: "APIService", Name: "v1beta3.flowcontrol.apiserver.k8s.io",
		Effect: EffectDegraded, Hook: "poststarthook/kube-apiserver-autoregistration", Deadline: "retried; readiness waits only for the served ones",
		When: "upgrades that stop serving a group/version", Source: srcAutoreg,
		labels: map[string]string{labelAggregatorManage: "onstart"}, fields: []string{"spec", "status"}, unknownName: true})
	add(StartupRequest{ID: "servicecidr-status", Description: "default ServiceCIDR Ready condition (server-side apply)",
		Operation: "UPDATE", Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs", Subresource: "status", Kind: "ServiceCIDR", Name: "kubernetes",
		Effect: EffectDegraded, Hook: hookServiceCIDR, Deadline: "logged and retried (a missing Ready condition counts as ready)",
		When: "after the create, while the Ready condition is missing", Source: srcServiceCIDR,
		minMinor: 33, existsFrom: 33, fields: []string{"spec", "status"}, fieldManager: "kubernetes-service-cidr-controller", equivalents: netEq("servicecidrs", "ServiceCIDR")})
	add(StartupRequest{ID: "servicecidr-update", Description: "default ServiceCIDR single- to dual-stack",
		Operation: "UPDATE", Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs", Kind: "ServiceCIDR", Name: "kubernetes",
		Effect: EffectDegraded, Hook: hookServiceCIDR, Deadline: "logged and retried",
		When: "only when a second service CIDR is added to the flags", Source: srcServiceCIDR,
		minMinor: 33, fields: []string{"spec", "status"}, equivalents: netEq("servicecidrs", "ServiceCIDR")})
	add(StartupRequest{ID: "flowschema-status", Description: "APF FlowSchema status (Dangling condition, server-side apply)",
		Operation: "UPDATE", Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Resource: "flowschemas", Subresource: "status", Kind: "FlowSchema", Name: "system-leader-election",
		Effect: EffectDegraded, Hook: "poststarthook/priority-and-fairness-config-consumer", Deadline: "logged and retried",
		When: "when a FlowSchema's Dangling condition changes", Source: srcAPFStatus,
		annotations: apfAnnotations, fields: []string{"spec", "status"}, fieldManager: "api-priority-and-fairness-config-consumer-v1"})
	for _, ns := range []string{"default", "kube-node-lease"} {
		add(StartupRequest{ID: "namespace-create-" + ns, Description: "system Namespace " + ns,
			Operation: "CREATE", Group: "", Version: "v1", Resource: "namespaces", Kind: "Namespace", Namespace: ns, Name: ns,
			Effect: EffectDegraded, Hook: "poststarthook/start-system-namespaces-controller", Deadline: "retried every minute",
			When: "when missing (default cannot be deleted; kube-node-lease can)", NewClusterOnly: ns == "default", Source: srcNamespaces,
			labels: map[string]string{labelMetadataName: ns}, fields: []string{"spec", "status"}})
	}
	add(StartupRequest{ID: "service-kubernetes", Description: "the default/kubernetes Service",
		Operation: "CREATE", Group: "", Version: "v1", Resource: "services", Kind: "Service", Namespace: "default", Name: "kubernetes",
		Effect: EffectDegraded, Hook: "poststarthook/bootstrap-controller", Deadline: "written only once /readyz passes, retried",
		When: "when missing, or its ports changed", Source: srcK8sService,
		labels: map[string]string{"provider": "kubernetes", "component": "apiserver"}, fields: []string{"spec", "status"}})
	add(StartupRequest{ID: "endpoints-kubernetes", Description: "the default/kubernetes Endpoints (lease reconciler)",
		Operation: "UPDATE", Group: "", Version: "v1", Resource: "endpoints", Kind: "Endpoints", Namespace: "default", Name: "kubernetes",
		Effect: EffectDegraded, Hook: "poststarthook/bootstrap-controller", Deadline: "after readiness, retried",
		When: "every start, when the set of API server addresses changes", Source: srcEndpoints,
		labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}, fields: []string{"subsets"}})
	add(StartupRequest{ID: "endpointslice-kubernetes", Description: "the default/kubernetes EndpointSlice (lease reconciler)",
		Operation: "UPDATE", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices", Kind: "EndpointSlice", Namespace: "default", Name: "kubernetes",
		Effect: EffectDegraded, Hook: "poststarthook/bootstrap-controller", Deadline: "after readiness, retried",
		When: "every start, when the set of API server addresses changes", Source: srcEndpoints,
		labels: map[string]string{"kubernetes.io/service-name": "kubernetes"}, fields: []string{"addressType", "endpoints", "ports"}})
	for _, op := range []string{"CREATE", "UPDATE"} {
		add(StartupRequest{ID: "lease-identity-" + strings.ToLower(op), Description: "kube-apiserver identity Lease in kube-system",
			Operation: op, Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Kind: "Lease", Namespace: "kube-system", Name: "apiserver-<hash>",
			Effect: EffectDegraded, Hook: "poststarthook/start-kube-apiserver-identity-lease-controller", Deadline: "retried every 10s",
			When: "every start (create when missing, then renewed)", Source: srcLease,
			labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver", "kubernetes.io/hostname": "control-plane"}, fields: []string{"spec"}, unknownName: true})
	}
	// Recorded on 1.34 -> 1.35: the new process deleted the lease 1.34 left.
	add(StartupRequest{ID: "lease-identity-delete", Description: "another kube-apiserver's identity Lease, expired or without renewTime (garbage collector)",
		Operation: "DELETE", Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Kind: "Lease", Namespace: "kube-system", Name: "apiserver-<hash>",
		Effect: EffectDegraded, Hook: "poststarthook/start-kube-apiserver-identity-lease-garbage-collector", Deadline: "logged, tried again next period",
		When: "when a stale identity lease is found", Source: "pkg/controlplane/controller/apiserverleasegc/gc_controller.go",
		labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver", "kubernetes.io/hostname": "control-plane"}, fields: []string{"spec"}, unknownName: true})
	for _, op := range []string{"CREATE", "UPDATE"} {
		add(StartupRequest{ID: "configmap-authentication-" + strings.ToLower(op), Description: "kube-system/extension-apiserver-authentication ConfigMap",
			Operation: op, Group: "", Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "kube-system", Name: "extension-apiserver-authentication",
			Effect: EffectDegraded, Hook: "poststarthook/start-cluster-authentication-info-controller", Deadline: "logged and retried",
			When: "when missing or the client CA bundles changed", Source: srcAuthnCM, fields: []string{"data", "binaryData", "immutable"}})
	}
	add(StartupRequest{ID: "configmap-legacy-token-tracking", Description: "kube-system/kube-apiserver-legacy-service-account-token-tracking ConfigMap",
		Operation: "CREATE", Group: "", Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "kube-system", Name: "kube-apiserver-legacy-service-account-token-tracking",
		Effect: EffectDegraded, Hook: "poststarthook/start-legacy-token-tracking-controller", Deadline: "logged and retried",
		When: "when missing (first start of a cluster)", Source: srcLegacyCM, fields: []string{"data", "binaryData", "immutable"}})
	// The ServiceCIDR controller's recorder writes events.k8s.io/v1 Events
	// (created, then updated as a series); core/v1 events share their storage.
	eventFields := []string{"eventTime", "series", "reportingController", "reportingInstance", "action", "reason", "regarding", "related",
		"note", "type", "deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount"}
	coreEvents := []equivalent{{gvr: schema.GroupVersionResource{Version: "v1", Resource: "events"}, gvk: schema.GroupVersionKind{Version: "v1", Kind: "Event"}}}
	for _, op := range []string{"CREATE", "UPDATE"} {
		add(StartupRequest{ID: "event-servicecidr-" + strings.ToLower(op), Description: "Event about the default ServiceCIDR",
			Operation: op, Group: "events.k8s.io", Version: "v1", Resource: "events", Kind: "Event", Namespace: "default", Name: "kubernetes.<hash>",
			Effect: EffectDegraded, Hook: hookServiceCIDR, Deadline: "dropped",
			When: "when the default ServiceCIDR controller records an event", Source: srcServiceCIDR,
			minMinor: 33, existsFrom: 33, unknownName: true, fields: eventFields, equivalents: coreEvents})
	}

	sort.SliceStable(c, func(i, j int) bool { return c[i].Fatal && !c[j].Fatal })
	return c
}

// admissionRequest builds the AdmissionRequest the CEL variable `request` is
// made from, the way k8s.io/apiserver/pkg/admission/plugin/cel/condition.go
// CreateAdmissionRequest does: kind/resource are the (possibly equivalent)
// ones the webhook matched, requestKind/requestResource the original ones,
// dryRun always set, options the operation's options object.
func (r StartupRequest) admissionRequest(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, user authenticationv1.UserInfo) *admissionv1.AdmissionRequest {
	dryRun := false
	var opts runtime.Object
	switch r.Operation {
	case "CREATE":
		o := &metav1.CreateOptions{FieldManager: r.fieldManager}
		o.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("CreateOptions"))
		opts = o
	case "UPDATE":
		o := &metav1.UpdateOptions{FieldManager: r.fieldManager}
		o.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("UpdateOptions"))
		opts = o
	case "DELETE":
		o := &metav1.DeleteOptions{}
		o.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("DeleteOptions"))
		opts = o
	}
	return &admissionv1.AdmissionRequest{
		Kind:               metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource:           metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource},
		SubResource:        r.Subresource,
		RequestKind:        &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind},
		RequestResource:    &metav1.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
		RequestSubResource: r.Subresource,
		Name:               r.Name,
		Namespace:          r.Namespace,
		Operation:          admissionv1.Operation(r.Operation),
		UserInfo:           user,
		DryRun:             &dryRun,
		Options:            runtime.RawExtension{Object: opts},
	}
}

// userInfo is who sends the request: kube-apiserver's loopback identity
// unless the request models someone else (ordinary requests of the fix check).
func (r StartupRequest) userInfo() authenticationv1.UserInfo {
	if r.user != nil {
		return *r.user
	}
	return apiServerUserInfo()
}

// apiServerUserInfo is the loopback identity as the request carries it.
func apiServerUserInfo() authenticationv1.UserInfo {
	return authenticationv1.UserInfo{
		Username: APIServerUser,
		UID:      apiServerUIDForModel,
		Groups:   append([]string(nil), APIServerGroups...),
		Extra:    map[string]authenticationv1.ExtraValue{},
	}
}

// object models the object as the webhook would see it, converted to a
// given group/version: apiVersion, kind and metadata (name, namespace,
// labels, annotations). Other fields are not modelled (see unknownPatterns).
func (r StartupRequest) object(gvk schema.GroupVersionKind) map[string]interface{} {
	md := map[string]interface{}{"name": r.Name}
	if r.Namespace != "" && r.Resource != "namespaces" {
		md["namespace"] = r.Namespace
	}
	if len(r.labels) > 0 {
		l := map[string]interface{}{}
		for k, v := range r.labels {
			l[k] = v
		}
		md["labels"] = l
	}
	if len(r.annotations) > 0 {
		a := map[string]interface{}{}
		for k, v := range r.annotations {
			a[k] = v
		}
		md["annotations"] = a
	}
	return map[string]interface{}{
		"apiVersion": gvk.GroupVersion().String(),
		"kind":       gvk.Kind,
		"metadata":   md,
	}
}

// hasObject: every request but DELETE carries the new object.
func (r StartupRequest) hasObject() bool { return r.Operation != "DELETE" }

// hasOldObject: UPDATE and DELETE requests carry the stored object.
func (r StartupRequest) hasOldObject() bool {
	return r.Operation == "UPDATE" || r.Operation == "DELETE"
}

// unmodelledMetadata are metadata fields whose values the model cannot know
// (server-set, random, or set only after mutating admission).
var unmodelledMetadata = []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
	"ownerReferences", "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName", "selfLink"}
