package audit

import (
	"strings"
	"testing"
)

// celOracle holds the results the real Kubernetes evaluator gives for these
// expressions on these modelled requests. They were produced by compiling
// and evaluating each expression with k8s.io/apiserver v0.34.4
// (admission/plugin/cel.NewConditionCompiler over
// cel/environment.MustBaseEnvSet(1.34), HasAuthorizer, StrictCost, then
// ForInput with CreateAdmissionRequest) fed the same AdmissionRequest,
// object and oldObject as the audit builds. Over 1947 expression/request
// pairs (every modelled start-up and ordinary request, CREATE, UPDATE and
// DELETE) the audit agreed on all 1814 it could decide; it reports the other
// 133 unknown (per-cluster names, oldObject compared as a whole).
var celOracle = []struct {
	request, expr string
	want          conditionResult
}{
	{"servicecidr-create", "request.userInfo.username != 'system:apiserver'", condFalse},
	{"servicecidr-create", "!(request.kind.kind == \"ServiceCIDR\")", condFalse},
	{"servicecidr-create", "!(request.kind.kind == \"IPAddress\")", condTrue},
	{"servicecidr-create", "request.namespace != 'kube-system'", condError},
	{"servicecidr-create", "!has(request.namespace) || request.namespace != 'kube-system'", condTrue},
	{"servicecidr-create", "!('system:masters' in request.userInfo.groups)", condFalse},
	{"servicecidr-create", "request.userInfo.groups.exists(g, g == 'system:authenticated')", condTrue},
	{"servicecidr-create", "request.resource.group == 'networking.k8s.io'", condTrue},
	{"servicecidr-create", "request.subResource == 'status'", condError},
	{"servicecidr-create", "has(request.subResource)", condFalse},
	{"servicecidr-create", "request.operation == 'UPDATE'", condFalse},
	{"servicecidr-create", "request.name.startsWith('system:')", condFalse},
	{"servicecidr-create", "object.metadata.name.startsWith('system:')", condFalse},
	{"servicecidr-create", "has(object.metadata.labels) && object.metadata.labels['kubernetes.io/bootstrapping'] == 'rbac-defaults'", condFalse},
	{"servicecidr-create", "object.metadata.labels['kubernetes.io/bootstrapping'] != 'rbac-defaults'", condError},
	{"servicecidr-create", "oldObject == null", condTrue},
	{"servicecidr-create", "oldObject != null && oldObject.metadata.name == object.metadata.name", condFalse},
	{"servicecidr-create", "request.options.kind == 'CreateOptions'", condTrue},
	{"servicecidr-create", "request.dryRun != true", condTrue},
	{"servicecidr-create", "has(request.userInfo.extra)", condFalse},
	{"servicecidr-create", "request.requestKind.version == 'v1'", condTrue},
	{"servicecidr-create", "object.metadata.?labels.orValue({}).size() == 0", condTrue},
	{"servicecidr-create", "request.kind.group in ['rbac.authorization.k8s.io', 'flowcontrol.apiserver.k8s.io']", condFalse},
	{"servicecidr-create", "'kubernetes.io/metadata.name' in object.metadata.labels", condError},
	{"servicecidr-create", "object.kind == request.kind.kind", condTrue},
	{"servicecidr-create", "request.userInfo.username.matches('^system:(apiserver|kube-.*)$')", condTrue},
	{"role-kube-system-create", "request.userInfo.username != 'system:apiserver'", condFalse},
	{"role-kube-system-create", "!(request.kind.kind == \"ServiceCIDR\")", condTrue},
	{"role-kube-system-create", "!(request.kind.kind == \"IPAddress\")", condTrue},
	{"role-kube-system-create", "request.namespace != 'kube-system'", condFalse},
	{"role-kube-system-create", "!has(request.namespace) || request.namespace != 'kube-system'", condFalse},
	{"role-kube-system-create", "!('system:masters' in request.userInfo.groups)", condFalse},
	{"role-kube-system-create", "request.userInfo.groups.exists(g, g == 'system:authenticated')", condTrue},
	{"role-kube-system-create", "request.resource.group == 'networking.k8s.io'", condFalse},
	{"role-kube-system-create", "request.subResource == 'status'", condError},
	{"role-kube-system-create", "has(request.subResource)", condFalse},
	{"role-kube-system-create", "request.operation == 'UPDATE'", condFalse},
	{"role-kube-system-create", "request.name.startsWith('system:')", condFalse},
	{"role-kube-system-create", "object.metadata.name.startsWith('system:')", condFalse},
	{"role-kube-system-create", "has(object.metadata.labels) && object.metadata.labels['kubernetes.io/bootstrapping'] == 'rbac-defaults'", condTrue},
	{"role-kube-system-create", "object.metadata.labels['kubernetes.io/bootstrapping'] != 'rbac-defaults'", condFalse},
	{"role-kube-system-create", "oldObject == null", condTrue},
	{"role-kube-system-create", "oldObject != null && oldObject.metadata.name == object.metadata.name", condFalse},
	{"role-kube-system-create", "request.options.kind == 'CreateOptions'", condTrue},
	{"role-kube-system-create", "request.dryRun != true", condTrue},
	{"role-kube-system-create", "has(request.userInfo.extra)", condFalse},
	{"role-kube-system-create", "request.requestKind.version == 'v1'", condTrue},
	{"role-kube-system-create", "object.metadata.?labels.orValue({}).size() == 0", condFalse},
	{"role-kube-system-create", "request.kind.group in ['rbac.authorization.k8s.io', 'flowcontrol.apiserver.k8s.io']", condTrue},
	{"role-kube-system-create", "'kubernetes.io/metadata.name' in object.metadata.labels", condFalse},
	{"role-kube-system-create", "object.kind == request.kind.kind", condTrue},
	{"role-kube-system-create", "request.userInfo.username.matches('^system:(apiserver|kube-.*)$')", condTrue},
	{"clusterrole-update", "request.userInfo.username != 'system:apiserver'", condFalse},
	{"clusterrole-update", "!(request.kind.kind == \"ServiceCIDR\")", condTrue},
	{"clusterrole-update", "!(request.kind.kind == \"IPAddress\")", condTrue},
	{"clusterrole-update", "request.namespace != 'kube-system'", condError},
	{"clusterrole-update", "!has(request.namespace) || request.namespace != 'kube-system'", condTrue},
	{"clusterrole-update", "!('system:masters' in request.userInfo.groups)", condFalse},
	{"clusterrole-update", "request.userInfo.groups.exists(g, g == 'system:authenticated')", condTrue},
	{"clusterrole-update", "request.resource.group == 'networking.k8s.io'", condFalse},
	{"clusterrole-update", "request.subResource == 'status'", condError},
	{"clusterrole-update", "has(request.subResource)", condFalse},
	{"clusterrole-update", "request.operation == 'UPDATE'", condTrue},
	{"clusterrole-update", "request.name.startsWith('system:')", condFalse},
	{"clusterrole-update", "object.metadata.name.startsWith('system:')", condFalse},
	{"clusterrole-update", "has(object.metadata.labels) && object.metadata.labels['kubernetes.io/bootstrapping'] == 'rbac-defaults'", condTrue},
	{"clusterrole-update", "object.metadata.labels['kubernetes.io/bootstrapping'] != 'rbac-defaults'", condFalse},
	{"clusterrole-update", "request.options.kind == 'CreateOptions'", condFalse},
	{"clusterrole-update", "request.dryRun != true", condTrue},
	{"clusterrole-update", "has(request.userInfo.extra)", condFalse},
	{"clusterrole-update", "request.requestKind.version == 'v1'", condTrue},
	{"clusterrole-update", "object.metadata.?labels.orValue({}).size() == 0", condFalse},
	{"clusterrole-update", "request.kind.group in ['rbac.authorization.k8s.io', 'flowcontrol.apiserver.k8s.io']", condTrue},
	{"clusterrole-update", "'kubernetes.io/metadata.name' in object.metadata.labels", condFalse},
	{"clusterrole-update", "object.kind == request.kind.kind", condTrue},
	{"clusterrole-update", "request.userInfo.username.matches('^system:(apiserver|kube-.*)$')", condTrue},
	{"namespace-create-kube-system", "request.userInfo.username != 'system:apiserver'", condFalse},
	{"namespace-create-kube-system", "!(request.kind.kind == \"ServiceCIDR\")", condTrue},
	{"namespace-create-kube-system", "!(request.kind.kind == \"IPAddress\")", condTrue},
	{"namespace-create-kube-system", "request.namespace != 'kube-system'", condFalse},
	{"namespace-create-kube-system", "!has(request.namespace) || request.namespace != 'kube-system'", condFalse},
	{"namespace-create-kube-system", "!('system:masters' in request.userInfo.groups)", condFalse},
	{"namespace-create-kube-system", "request.userInfo.groups.exists(g, g == 'system:authenticated')", condTrue},
	{"namespace-create-kube-system", "request.resource.group == 'networking.k8s.io'", condFalse},
	{"namespace-create-kube-system", "request.subResource == 'status'", condError},
	{"namespace-create-kube-system", "has(request.subResource)", condFalse},
	{"namespace-create-kube-system", "request.operation == 'UPDATE'", condFalse},
	{"namespace-create-kube-system", "request.name.startsWith('system:')", condFalse},
	{"namespace-create-kube-system", "object.metadata.name.startsWith('system:')", condFalse},
	{"namespace-create-kube-system", "has(object.metadata.labels) && object.metadata.labels['kubernetes.io/bootstrapping'] == 'rbac-defaults'", condError},
	{"namespace-create-kube-system", "object.metadata.labels['kubernetes.io/bootstrapping'] != 'rbac-defaults'", condError},
	{"namespace-create-kube-system", "oldObject == null", condTrue},
	{"namespace-create-kube-system", "oldObject != null && oldObject.metadata.name == object.metadata.name", condFalse},
	{"namespace-create-kube-system", "request.options.kind == 'CreateOptions'", condTrue},
	{"namespace-create-kube-system", "request.dryRun != true", condTrue},
	{"namespace-create-kube-system", "has(request.userInfo.extra)", condFalse},
	{"namespace-create-kube-system", "request.requestKind.version == 'v1'", condTrue},
	{"namespace-create-kube-system", "object.metadata.?labels.orValue({}).size() == 0", condFalse},
	{"namespace-create-kube-system", "request.kind.group in ['rbac.authorization.k8s.io', 'flowcontrol.apiserver.k8s.io']", condFalse},
	{"namespace-create-kube-system", "'kubernetes.io/metadata.name' in object.metadata.labels", condTrue},
	{"namespace-create-kube-system", "object.kind == request.kind.kind", condTrue},
	{"namespace-create-kube-system", "request.userInfo.username.matches('^system:(apiserver|kube-.*)$')", condTrue},
	{"servicecidr-status", "request.userInfo.username != 'system:apiserver'", condFalse},
	{"servicecidr-status", "!(request.kind.kind == \"ServiceCIDR\")", condFalse},
	{"servicecidr-status", "!(request.kind.kind == \"IPAddress\")", condTrue},
	{"servicecidr-status", "request.namespace != 'kube-system'", condError},
	{"servicecidr-status", "!has(request.namespace) || request.namespace != 'kube-system'", condTrue},
	{"servicecidr-status", "!('system:masters' in request.userInfo.groups)", condFalse},
	{"servicecidr-status", "request.userInfo.groups.exists(g, g == 'system:authenticated')", condTrue},
	{"servicecidr-status", "request.resource.group == 'networking.k8s.io'", condTrue},
	{"servicecidr-status", "request.subResource == 'status'", condTrue},
	{"servicecidr-status", "has(request.subResource)", condTrue},
	{"servicecidr-status", "request.operation == 'UPDATE'", condTrue},
	{"servicecidr-status", "request.name.startsWith('system:')", condFalse},
	{"servicecidr-status", "object.metadata.name.startsWith('system:')", condFalse},
	{"servicecidr-status", "has(object.metadata.labels) && object.metadata.labels['kubernetes.io/bootstrapping'] == 'rbac-defaults'", condFalse},
	{"servicecidr-status", "object.metadata.labels['kubernetes.io/bootstrapping'] != 'rbac-defaults'", condError},
	{"servicecidr-status", "request.options.kind == 'CreateOptions'", condFalse},
	{"servicecidr-status", "request.dryRun != true", condTrue},
	{"servicecidr-status", "has(request.userInfo.extra)", condFalse},
	{"servicecidr-status", "request.requestKind.version == 'v1'", condTrue},
	{"servicecidr-status", "object.metadata.?labels.orValue({}).size() == 0", condTrue},
	{"servicecidr-status", "request.kind.group in ['rbac.authorization.k8s.io', 'flowcontrol.apiserver.k8s.io']", condFalse},
	{"servicecidr-status", "'kubernetes.io/metadata.name' in object.metadata.labels", condError},
	{"servicecidr-status", "object.kind == request.kind.kind", condTrue},
	{"servicecidr-status", "request.userInfo.username.matches('^system:(apiserver|kube-.*)$')", condTrue},
	{"ordinary-pod", "request.userInfo.username != 'system:apiserver'", condTrue},
	{"ordinary-pod", "!(request.kind.kind == \"ServiceCIDR\")", condTrue},
	{"ordinary-pod", "!(request.kind.kind == \"IPAddress\")", condTrue},
	{"ordinary-pod", "request.namespace != 'kube-system'", condTrue},
	{"ordinary-pod", "!has(request.namespace) || request.namespace != 'kube-system'", condTrue},
	{"ordinary-pod", "!('system:masters' in request.userInfo.groups)", condTrue},
	{"ordinary-pod", "request.userInfo.groups.exists(g, g == 'system:authenticated')", condTrue},
	{"ordinary-pod", "request.resource.group == 'networking.k8s.io'", condFalse},
	{"ordinary-pod", "request.subResource == 'status'", condError},
	{"ordinary-pod", "has(request.subResource)", condFalse},
	{"ordinary-pod", "request.operation == 'UPDATE'", condFalse},
	{"ordinary-pod", "request.name.startsWith('system:')", condFalse},
	{"ordinary-pod", "object.metadata.name.startsWith('system:')", condFalse},
	{"ordinary-pod", "has(object.metadata.labels) && object.metadata.labels['kubernetes.io/bootstrapping'] == 'rbac-defaults'", condFalse},
	{"ordinary-pod", "object.metadata.labels['kubernetes.io/bootstrapping'] != 'rbac-defaults'", condError},
	{"ordinary-pod", "oldObject == null", condTrue},
	{"ordinary-pod", "oldObject != null && oldObject.metadata.name == object.metadata.name", condFalse},
	{"ordinary-pod", "request.options.kind == 'CreateOptions'", condTrue},
	{"ordinary-pod", "request.dryRun != true", condTrue},
	{"ordinary-pod", "has(request.userInfo.extra)", condFalse},
	{"ordinary-pod", "request.requestKind.version == 'v1'", condTrue},
	{"ordinary-pod", "object.metadata.?labels.orValue({}).size() == 0", condTrue},
	{"ordinary-pod", "request.kind.group in ['rbac.authorization.k8s.io', 'flowcontrol.apiserver.k8s.io']", condFalse},
	{"ordinary-pod", "'kubernetes.io/metadata.name' in object.metadata.labels", condError},
	{"ordinary-pod", "object.kind == request.kind.kind", condTrue},
	{"ordinary-pod", "request.userInfo.username.matches('^system:(apiserver|kube-.*)$')", condFalse},
}

func findRequest(t *testing.T, id string) StartupRequest {
	t.Helper()
	if id == "ordinary-pod" {
		return ordinaryRequests()[0]
	}
	reqs, err := ModelledStartupRequests("1.32", "1.34")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no start-up request %q", id)
	return StartupRequest{}
}

func celInputFor(t *testing.T, r StartupRequest) celInput {
	t.Helper()
	req, err := toUnstructured(r.admissionRequest(r.GVR(), r.GVK(), r.userInfo()))
	if err != nil {
		t.Fatal(err)
	}
	in := celInput{request: req, unknown: r.unknownPatterns()}
	if r.hasObject() {
		in.object = r.object(r.GVK())
	}
	if r.hasOldObject() {
		in.oldObject = r.object(r.GVK())
	}
	return in
}

func TestConditionsAgreeWithKubernetes(t *testing.T) {
	for _, tc := range celOracle {
		r := findRequest(t, tc.request)
		got, detail := compileCondition("c", tc.expr).eval(celInputFor(t, r))
		if got != tc.want {
			t.Errorf("%s: %s = %s (%s), Kubernetes gives %s", tc.request, tc.expr, got, detail, tc.want)
		}
	}
}

func TestConditionsUnknown(t *testing.T) {
	r := findRequest(t, "servicecidr-create")
	in := celInputFor(t, r)
	for _, tc := range []struct {
		expr, why string
		want      conditionResult
	}{
		{"authorizer.group('').resource('pods').check('get').allowed()", "authorizer", condUnknown},
		{"authorizer.requestResource.check('bypass').allowed()", "authorizer", condUnknown},
		{"authorizer.serviceAccount('ns', 'sa').path('/healthz').check('get').allowed()", "authorizer", condUnknown},
		// Short-circuit decides without the authorizer.
		{"request.userInfo.username == 'system:apiserver' || authorizer.requestResource.check('x').allowed()", "", condTrue},
		{"request.userInfo.username != 'system:apiserver' && authorizer.requestResource.check('x').allowed()", "", condFalse},
		// Object fields beyond metadata are not modelled.
		{"object.spec.cidrs.size() > 0", "object.spec", condUnknown},
		{"has(object.spec)", "object.spec", condUnknown},
		{"object.metadata.uid != ''", "uid", condUnknown},
		// The loopback UID is random per process.
		{"request.userInfo.uid == 'x'", "uid", condUnknown},
		// Not declared for webhooks, or Kubernetes-only libraries.
		{"params.enabled", "does not compile", condUnknown},
		{"url('https://example.com').getHost() == 'example.com'", "does not compile", condUnknown},
		{"quantity('1Gi').isGreaterThan(quantity('1Mi'))", "does not compile", condUnknown},
	} {
		got, detail := compileCondition("c", tc.expr).eval(in)
		if got != tc.want || !strings.Contains(detail, tc.why) {
			t.Errorf("%s = %s (%s), want %s mentioning %q", tc.expr, got, detail, tc.want, tc.why)
		}
	}
}

func TestConditionTypes(t *testing.T) {
	// Typed like Kubernetes' kubernetes.AdmissionRequest: these do not
	// compile there either (webhook validation rejects them).
	for _, e := range []string{
		"request.name",                         // string, not bool
		"request.userinfo.username == 'x'",     // misspelt field
		"request.uid == ''",                    // uid is not declared for CEL
		"request.namespace == 1",               // string compared to int
		"request.userInfo.groups.exists(g, g)", // string used as bool
		"1 + 1",
	} {
		if c := compileCondition("c", e); c.compileErr == nil {
			t.Errorf("%s compiled", e)
		}
	}
	// Nor does a dyn result: Kubernetes wants exactly bool.
	if c := compileCondition("c", "request.options"); c.compileErr == nil {
		t.Error("dyn expression compiled")
	}
	if c := compileCondition("c", "namespaceObject == null"); c.compileErr != nil {
		t.Errorf("namespaceObject: %v", c.compileErr)
	}
}
