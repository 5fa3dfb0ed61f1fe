package audit

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func parseFile(t testing.TB, name string) []Configuration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := ParseNamed(name, b)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return cfgs
}

// testdataInputs are the webhook configuration files under testdata.
func testdataInputs() []string {
	files, _ := filepath.Glob("testdata/*.yaml")
	return append(files, "testdata/list.json")
}

// parseYAML is the configurations in a test's own YAML.
func parseYAML(t testing.TB, y string) []Configuration {
	t.Helper()
	cfgs, err := ParseWebhookConfigurations([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfgs
}

// auditYAML is the audit, with the default options, of a test's own YAML.
func auditYAML(t testing.TB, y string) Report {
	t.Helper()
	rep, err := Audit(parseYAML(t, y), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

type expect struct {
	configuration, webhook string
	risk                   Risk
	// hooks that must appear among the fatal blocked requests
	hooks []string
	// request IDs that must (not) be among the blocks
	blocked, notBlocked []string
}

// The matcher's verdicts against the catalogue's model, which has every
// kind of write (Roles in kube-public, APF updates, APIService status): the
// semantics of rules, selectors and conditions. What each recorded upgrade
// really sends is TestRecordedPairs's.
func TestAuditVerdicts(t *testing.T) {
	kyvernoCfg := "kyverno-resource-validating-webhook-cfg"
	for _, tc := range []struct {
		name, file string
		opts       Options
		want       []expect
	}{
		{name: "incident", file: "incident-kyverno-like.yaml", want: []expect{{
			configuration: kyvernoCfg, webhook: "validate.kyverno.svc-fail", risk: RiskDeadlock,
			hooks:      []string{hookServiceCIDR, hookIPRepair, hookRBAC, hookAPF, hookAutoreg},
			blocked:    []string{"servicecidr-create", "ipaddress-create", "clusterrole-create", "clusterrole-update", "apiservice-create", "flowschema-update"},
			notBlocked: []string{"servicecidr-status", "apiservice-status-update", "namespace-create-kube-system", "flowschema-delete"},
		}}},
		{name: "incident on 1.32: no ServiceCIDR yet, still RBAC", file: "incident-kyverno-like.yaml", opts: Options{KubernetesVersion: "1.32"}, want: []expect{{
			configuration: kyvernoCfg, webhook: "validate.kyverno.svc-fail", risk: RiskDeadlock,
			hooks: []string{hookRBAC}, notBlocked: []string{"servicecidr-create", "ipaddress-create"},
		}}},
		{name: "incident with new-cluster writes", file: "incident-kyverno-like.yaml", opts: Options{IncludeNewCluster: true}, want: []expect{{
			configuration: kyvernoCfg, webhook: "validate.kyverno.svc-fail", risk: RiskDeadlock,
			hooks: []string{hookPriority}, blocked: []string{"namespace-create-kube-system", "priorityclass-create"},
		}}},
		{name: "kind exclusions are not enough", file: "incident-kind-exclusions.yaml", want: []expect{{
			configuration: kyvernoCfg, webhook: "validate.kyverno.svc-fail", risk: RiskDeadlock,
			hooks:      []string{hookRBAC, hookAutoreg, hookAPF},
			notBlocked: []string{"servicecidr-create", "ipaddress-create"},
		}}},
		{name: "username exclusion", file: "incident-username-exclusion.yaml", opts: Options{IncludeNewCluster: true}, want: []expect{{
			configuration: kyvernoCfg, webhook: "validate.kyverno.svc-fail", risk: RiskNone,
		}}},
		{name: "namespaceSelector excluding kube-system does not spare cluster-scoped writes", file: "kyverno-catchall-namespace-excluded.yaml", want: []expect{{
			configuration: kyvernoCfg, webhook: "validate.kyverno.svc-fail", risk: RiskDeadlock,
			hooks:      []string{hookServiceCIDR, hookRBAC, hookAutoreg},
			blocked:    []string{"servicecidr-create", "clusterrole-create", "role-kube-public-create", "servicecidr-status", "apiservice-status-update", "flowschema-delete", "apiservice-delete"},
			notBlocked: []string{"role-kube-system-create", "rolebinding-kube-system-update", "lease-identity-update"},
		}}},
		{name: "kyverno defaults", file: "kyverno.yaml", want: []expect{
			{configuration: kyvernoCfg, webhook: "validate.kyverno.svc-fail", risk: RiskNone},
			{configuration: kyvernoCfg, webhook: "validate.kyverno.svc-ignore", risk: RiskNone, notBlocked: []string{"configmap-authentication-create"}},
			{configuration: "kyverno-resource-mutating-webhook-cfg", webhook: "mutate.kyverno.svc-fail", risk: RiskNone},
			{configuration: "kyverno-verify-mutating-webhook-cfg", webhook: "monitor-webhooks.kyverno.svc", risk: RiskNone, notBlocked: []string{"lease-identity-update"}},
			{configuration: "kyverno-policy-validating-webhook-cfg", webhook: "validate-policy.kyverno.svc", risk: RiskNone},
		}},
		{name: "gatekeeper defaults", file: "gatekeeper.yaml", want: []expect{
			{configuration: "gatekeeper-validating-webhook-configuration", webhook: "validation.gatekeeper.sh", risk: RiskNone, blocked: []string{"servicecidr-create"}},
			{configuration: "gatekeeper-validating-webhook-configuration", webhook: "check-ignore-label.gatekeeper.sh", risk: RiskNone, blocked: []string{"namespace-create-kube-node-lease"}},
			{configuration: "gatekeeper-mutating-webhook-configuration", webhook: "mutation.gatekeeper.sh", risk: RiskNone},
		}},
		{name: "gatekeeper on an empty etcd", file: "gatekeeper.yaml", opts: Options{IncludeNewCluster: true}, want: []expect{
			{configuration: "gatekeeper-validating-webhook-configuration", webhook: "check-ignore-label.gatekeeper.sh", risk: RiskDeadlock,
				hooks: []string{hookRBAC}, blocked: []string{"namespace-create-kube-system", "namespace-create-kube-public"}},
		}},
		{name: "gatekeeper with a slow-start threshold below its timeout", file: "gatekeeper.yaml", opts: Options{SlowTimeout: 2 * time.Second}, want: []expect{
			{configuration: "gatekeeper-validating-webhook-configuration", webhook: "validation.gatekeeper.sh", risk: RiskSlowStart},
			{configuration: "gatekeeper-mutating-webhook-configuration", webhook: "mutation.gatekeeper.sh", risk: RiskNone},
		}},
		{name: "gatekeeper fail-closed, kube-system ignored", file: "gatekeeper-fail-closed.yaml",
			opts: Options{NamespaceLabels: map[string]map[string]string{"kube-system": {"admission.gatekeeper.sh/ignore": "no-self-managing"}}},
			want: []expect{{configuration: "gatekeeper-validating-webhook-configuration", webhook: "validation.gatekeeper.sh", risk: RiskDeadlock,
				hooks:      []string{hookServiceCIDR, hookRBAC},
				blocked:    []string{"clusterrole-create", "role-kube-public-create", "servicecidr-create"},
				notBlocked: []string{"role-kube-system-create", "configmap-authentication-update", "apiservice-status-update", "servicecidr-status"},
			}}},
		{name: "cert-manager", file: "cert-manager.yaml", want: []expect{
			{configuration: "cert-manager-webhook", webhook: "webhook.cert-manager.io", risk: RiskNone},
		}},
		{name: "istio", file: "istio.yaml", want: []expect{
			{configuration: "istio-sidecar-injector", webhook: "rev.namespace.sidecar-injector.istio.io", risk: RiskNone},
			{configuration: "istio-sidecar-injector", webhook: "rev.object.sidecar-injector.istio.io", risk: RiskNone},
			{configuration: "istio-sidecar-injector", webhook: "namespace.sidecar-injector.istio.io", risk: RiskNone},
			{configuration: "istio-sidecar-injector", webhook: "object.sidecar-injector.istio.io", risk: RiskNone},
			{configuration: "istio-validator-istio-system", webhook: "rev.validation.istio.io", risk: RiskNone},
		}},
		{name: "authorizer", file: "authorizer-condition.yaml", want: []expect{
			{configuration: "policy-bypass", webhook: "authorizer-only.policy.example.com", risk: RiskUnknown, blocked: []string{"servicecidr-create"}},
			{configuration: "policy-bypass", webhook: "apiserver-or-authorizer.policy.example.com", risk: RiskNone},
		}},
		{name: "request.namespace on cluster-scoped objects errors", file: "request-namespace-condition.yaml", want: []expect{
			{configuration: "namespace-conditions", webhook: "skip-kube-system.example.com", risk: RiskDeadlock,
				blocked: []string{"servicecidr-create", "role-kube-public-create"}, notBlocked: []string{"role-kube-system-create"}},
			{configuration: "namespace-conditions", webhook: "skip-kube-system-has.example.com", risk: RiskDeadlock, notBlocked: []string{"role-kube-system-create"}},
			{configuration: "namespace-conditions", webhook: "skip-kube-system-ignore.example.com", risk: RiskSlowStart,
				blocked: []string{"role-kube-public-create"}, notBlocked: []string{"servicecidr-create", "role-kube-system-create"}},
		}},
		{name: "equivalent versions, default serving", file: "equivalent-match-policy.yaml", want: []expect{
			{configuration: "equivalent-versions", webhook: "servicecidr-v1beta1-equivalent.example.com", risk: RiskNone, notBlocked: []string{"servicecidr-create"}},
			{configuration: "equivalent-versions", webhook: "servicecidr-v1beta1-exact.example.com", risk: RiskNone},
			{configuration: "equivalent-versions", webhook: "events-equivalent.example.com", risk: RiskNone, blocked: []string{"event-servicecidr-create"}, notBlocked: []string{"event-servicecidr-update"}},
			{configuration: "equivalent-versions", webhook: "events-exact.example.com", risk: RiskNone, notBlocked: []string{"event-servicecidr-create"}},
		}},
		{name: "equivalent versions, networking v1beta1 served", file: "equivalent-match-policy.yaml", opts: Options{RuntimeConfig: []string{"networking.k8s.io/v1beta1"}}, want: []expect{
			{configuration: "equivalent-versions", webhook: "servicecidr-v1beta1-equivalent.example.com", risk: RiskDeadlock, hooks: []string{hookServiceCIDR}},
			{configuration: "equivalent-versions", webhook: "servicecidr-v1beta1-exact.example.com", risk: RiskNone},
		}},
		{name: "slow start", file: "slow-start.yaml", want: []expect{
			{configuration: "fail-open-mutators", webhook: "long-timeout.example.com", risk: RiskSlowStart, hooks: []string{hookServiceCIDR, hookRBAC}},
			{configuration: "fail-open-mutators", webhook: "short-timeout.example.com", risk: RiskNone},
			{configuration: "fail-open-mutators", webhook: "default-timeout.example.com", risk: RiskSlowStart},
		}},
		{name: "object selectors", file: "object-selector.yaml", want: []expect{
			{configuration: "object-selectors", webhook: "not-rbac-defaults-catchall.example.com", risk: RiskDeadlock,
				hooks: []string{hookServiceCIDR, hookAPF}, notBlocked: []string{"clusterrole-create", "rolebinding-kube-public-update"}},
			{configuration: "object-selectors", webhook: "not-rbac-defaults-rbac-only.example.com", risk: RiskNone},
		}},
		{name: "deletes of dropped APF objects", file: "apf-delete-guard.yaml", want: []expect{
			{configuration: "apf-delete-guard", webhook: "guard-flowschema-deletes.example.com", risk: RiskDeadlock,
				hooks: []string{hookAPF}, blocked: []string{"flowschema-delete"}, notBlocked: []string{"prioritylevel-delete", "apiservice-delete"}},
		}},
		{name: "List in JSON, scopes", file: "list.json", want: []expect{
			{configuration: "policy-engine", webhook: "validate.policy-engine.example.com", risk: RiskDeadlock,
				blocked: []string{"servicecidr-create", "clusterrole-update"}, notBlocked: []string{"role-kube-public-create", "lease-identity-create"}},
			{configuration: "policy-engine", webhook: "validate-namespaced.policy-engine.example.com", risk: RiskNone},
			{configuration: "defaults-injector", webhook: "inject.defaults.example.com", risk: RiskSlowStart,
				blocked: []string{"servicecidr-status", "apiservice-status-update"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.modelled = true
			rep, err := Audit(parseFile(t, tc.file), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				f, ok := rep.Find(w.configuration, w.webhook)
				if !ok {
					t.Fatalf("no finding for %s/%s", w.configuration, w.webhook)
				}
				if f.Risk != w.risk {
					t.Errorf("%s: risk %s, want %s; reasons %v; blocks %v", w.webhook, f.Risk, w.risk, f.Reasons, blockIDs(f))
				}
				if w.risk != RiskNone && f.Fix != ExcludeAPIServerExpression {
					t.Errorf("%s: fix %q", w.webhook, f.Fix)
				}
				fatalHooks := map[string]bool{}
				for _, b := range f.Blocks {
					if b.Fatal {
						fatalHooks[b.Hook] = true
					}
					if len(b.Why) == 0 {
						t.Errorf("%s: blocked %s without a reason", w.webhook, b.ID)
					}
				}
				for _, h := range w.hooks {
					if !fatalHooks[h] {
						t.Errorf("%s: hook %s not among the blocked fatal writes %v", w.webhook, h, fatalHooks)
					}
				}
				ids := blockIDs(f)
				for _, id := range w.blocked {
					if !slices.Contains(ids, id) {
						t.Errorf("%s: %s not blocked; blocks %v", w.webhook, id, ids)
					}
				}
				for _, id := range w.notBlocked {
					if slices.Contains(ids, id) {
						t.Errorf("%s: %s blocked, want not; why %v", w.webhook, id, whyOf(f, id))
					}
				}
			}
		})
	}
}

func blockIDs(f Finding) []string {
	var ids []string
	for _, b := range f.Blocks {
		ids = append(ids, b.ID)
	}
	return ids
}

func whyOf(f Finding, id string) []string {
	for _, b := range f.Blocks {
		if b.ID == id {
			return b.Why
		}
	}
	return nil
}

func TestAuditExplainsWhy(t *testing.T) {
	rep, err := Audit(parseFile(t, "kyverno-catchall-namespace-excluded.yaml"), Options{modelled: true})
	if err != nil {
		t.Fatal(err)
	}
	f := rep.Findings[0]
	why := strings.Join(whyOf(f, "servicecidr-create"), "\n")
	for _, s := range []string{"does not exempt cluster-scoped servicecidrs", "rule 1 (operations [CREATE UPDATE DELETE CONNECT], apiGroups [*], apiVersions [*], resources [*/*], scope *) matches"} {
		if !strings.Contains(why, s) {
			t.Errorf("why of servicecidr-create lacks %q:\n%s", s, why)
		}
	}
	why = strings.Join(whyOf(f, "role-kube-public-create"), "\n")
	if !strings.Contains(why, "matches namespace kube-public {kubernetes.io/metadata.name=kube-public}") {
		t.Errorf("why of role-kube-public-create:\n%s", why)
	}

	rep, _ = Audit(parseFile(t, "request-namespace-condition.yaml"), Options{})
	f, _ = rep.Find("namespace-conditions", "skip-kube-system.example.com")
	for _, b := range f.Blocks {
		if b.ID == "servicecidr-create" {
			if b.Outcome != OutcomeConditionError || !strings.Contains(strings.Join(b.Why, " "), "no such key: namespace") {
				t.Errorf("servicecidr-create: outcome %s, why %v", b.Outcome, b.Why)
			}
		}
	}
}

func TestSlowStartExplainsIPRepair(t *testing.T) {
	rep, err := Audit(parseFile(t, "slow-start.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for webhook, want := range map[string]string{"long-timeout.example.com": "from 3 Services on", "default-timeout.example.com": "from 7 Services on"} {
		f, _ := rep.Find("fail-open-mutators", webhook)
		if got := strings.Join(f.Reasons, "\n"); !strings.Contains(got, want) {
			t.Errorf("%s: reasons lack %q:\n%s", webhook, want, got)
		}
	}
}

func TestAuditReportOrderAndWorst(t *testing.T) {
	var cfgs []Configuration
	for _, f := range []string{"cert-manager.yaml", "slow-start.yaml", "authorizer-condition.yaml", "incident-kyverno-like.yaml"} {
		cfgs = append(cfgs, parseFile(t, f)...)
	}
	rep, err := Audit(cfgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Risk != RiskDeadlock {
		t.Fatalf("worst risk %s", rep.Risk)
	}
	var got []Risk
	for _, f := range rep.Findings {
		got = append(got, f.Risk)
	}
	for i := 1; i < len(got); i++ {
		if got[i].severity() > got[i-1].severity() {
			t.Fatalf("findings not ordered by severity: %v", got)
		}
	}
	if rep.Count(RiskDeadlock) != 1 || rep.Count(RiskUnknown) != 1 || rep.Count(RiskSlowStart) != 2 {
		t.Fatalf("counts: %v", got)
	}
}

func TestAuditUnsupportedVersion(t *testing.T) {
	for _, v := range []string{"1.31", "2.0", "1.38", "latest", "1.34.4.1"} {
		_, err := Audit(nil, Options{KubernetesVersion: v})
		var uv *UnsupportedVersionError
		if !errors.As(err, &uv) || !errors.Is(err, ErrInvalidInput) {
			t.Errorf("version %q: err %v", v, err)
		}
	}
	for _, v := range []string{"1.32", "v1.33.2", "1.34", "1.35", "v1.36.3", "1.37"} {
		if _, err := Audit(nil, Options{KubernetesVersion: v}); err != nil {
			t.Errorf("version %q: %v", v, err)
		}
	}
}

func TestStartupModel(t *testing.T) {
	reqs, err := ModelledStartupRequests("1.32", "1.34")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range reqs {
		if ids[r.ID] {
			t.Errorf("duplicate id %s", r.ID)
		}
		ids[r.ID] = true
		if r.Fatal != (r.Effect != EffectDegraded) || r.Hook == "" || r.Source == "" || r.When == "" {
			t.Errorf("%s: incomplete: %+v", r.ID, r)
		}
		// Cluster-scoped objects have no namespace in the request, except
		// a Namespace, whose namespace attribute is its own name
		// (k8s.io/apiserver/pkg/endpoints/handlers/create.go).
		if r.Resource == "namespaces" && r.Namespace != r.Name {
			t.Errorf("%s: namespace attribute %q", r.ID, r.Namespace)
		}
	}
	// The hooks seen failing in the lab (DESIGN.md) are all modelled as fatal.
	for _, h := range []string{hookServiceCIDR, hookIPRepair, hookRBAC, hookAutoreg} {
		found := false
		for _, r := range reqs {
			if r.Hook == h && r.Fatal {
				found = true
			}
		}
		if !found {
			t.Errorf("no fatal write for %s", h)
		}
	}
	old, _ := ModelledStartupRequests("1.32", "1.32")
	for _, r := range old {
		if r.Resource == "servicecidrs" || r.Resource == "ipaddresses" {
			t.Errorf("1.32 sends %s", r.ID)
		}
	}
}

func TestReportErr(t *testing.T) {
	for _, tc := range []struct {
		file string
		want error
	}{
		{"incident-kyverno-like.yaml", ErrDeadlockRisk},
		{"authorizer-condition.yaml", ErrUnknownRisk},
		{"slow-start.yaml", ErrSlowStartRisk},
		{"cert-manager.yaml", nil},
	} {
		rep, err := Audit(parseFile(t, tc.file), Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = rep.Err()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.file, err)
			}
			continue
		}
		var re *RiskError
		if !errors.Is(err, tc.want) || !errors.As(err, &re) || len(re.Hints()) == 0 || len(re.Webhooks) == 0 {
			t.Errorf("%s: %v", tc.file, err)
		}
	}
}
