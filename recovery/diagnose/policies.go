package diagnose

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// startupRisks audits the admission objects of etcd together (a policy
// needs its bindings) and returns the worst risk of each object, keyed by
// "KIND/NAME": a webhook configuration by its webhooks, a policy and a
// binding by the bindings that tie them. A fail-closed webhook later in
// the chain never shows in the log (the first failure ends the request),
// and a policy's denial of the default ServiceCIDR is not logged at all at
// default verbosity: the audit names them.
func startupRisks(ctx context.Context, objs []etcd.Object) map[string]string {
	var cfgs []audit.Configuration
	for _, o := range objs {
		if o.Decoded == nil {
			continue
		}
		c, err := audit.FromObjects(o.Decoded)
		if err != nil {
			continue
		}
		cfgs = append(cfgs, c...)
	}
	out := map[string]string{}
	report, err := audit.AuditContext(ctx, cfgs, audit.Options{})
	if err != nil {
		return out
	}
	worst := func(key string, r audit.Risk) {
		if cur, ok := out[key]; !ok || severity(audit.Risk(cur)) < severity(r) {
			out[key] = string(r)
		}
	}
	for _, f := range report.Findings {
		switch f.ObjectKind {
		case "":
			kind := kinds.ValidatingWebhookConfiguration
			if f.Kind == audit.Mutating {
				kind = kinds.MutatingWebhookConfiguration
			}
			worst(kind+"/"+f.Configuration, f.Risk)
		default:
			worst(f.ObjectKind+"/"+f.Configuration, f.Risk)
			if f.Binding != "" {
				worst(f.ObjectKind+"Binding/"+f.Binding, f.Risk)
			}
		}
	}
	return out
}

func severity(r audit.Risk) int {
	return map[audit.Risk]int{audit.RiskDeadlock: 3, audit.RiskUnknown: 2, audit.RiskSlowStart: 1}[r]
}

// policyCulprits are the bindings in etcd whose policy the audit says
// deadlocks start-up: what a stuck start-up with no culprit in the log
// points to.
func policyCulprits(ee EtcdEvidence) []Culprit {
	var out []Culprit
	for _, b := range ee.Objects {
		plugin := ""
		switch b.Kind {
		case kinds.ValidatingAdmissionPolicyBinding:
			plugin = PluginValidatingPolicy
		case kinds.MutatingAdmissionPolicyBinding:
			plugin = PluginMutatingPolicy
		}
		if plugin == "" || b.StartupRisk != string(audit.RiskDeadlock) {
			continue
		}
		policyKind := strings.TrimSuffix(b.Kind, "Binding")
		c := Culprit{Kind: policyKind, Name: b.Policy, Binding: b.Name, Plugin: plugin}
		for _, p := range ee.Objects {
			if p.Kind == policyKind && p.Name == b.Policy {
				c.FailurePolicy, c.Key, c.FoundInEtcd = p.Failure, p.Key, true
			}
		}
		out = append(out, c)
	}
	return out
}

// The MutatingAdmissionPolicy trap (LAB.md): kube-apiserver 1.34+ with the
// MutatingAdmissionPolicy feature gate on while only the v1alpha1 API is
// enabled (1.32's flags carried over) refuses every write with "not yet
// ready to handle request": its plugin waits for the v1beta1 API forever.
// No admission object is involved; the flags are the fix.
var imageMinor = regexp.MustCompile(`:v?1\.(\d+)\.`)

func mapGateTrap(ne NodeEvidence) (string, bool) {
	m := imageMinor.FindStringSubmatch(ne.Image)
	if m == nil {
		return "", false
	}
	minor, _ := strconv.Atoi(m[1])
	gateOn, alpha, beta := false, false, false
	for _, g := range ne.FeatureGates {
		if strings.EqualFold(strings.ReplaceAll(g, " ", ""), "MutatingAdmissionPolicy=true") {
			gateOn = true
		}
	}
	for _, rc := range ne.RuntimeConfig {
		k, v, _ := strings.Cut(rc, "=")
		on := v == "" || v == "true"
		switch k {
		case "admissionregistration.k8s.io/v1alpha1":
			alpha = alpha || on
		case "admissionregistration.k8s.io/v1beta1", "api/all", "api/beta":
			beta = beta || on
		}
	}
	if minor < 34 || !gateOn || !alpha || beta {
		return "", false
	}
	return fmt.Sprintf("kube-apiserver 1.%d runs with --feature-gates MutatingAdmissionPolicy=true and --runtime-config %s: the MutatingAdmissionPolicy API is served as v1beta1 from 1.34, and with only v1alpha1 enabled its admission plugin never becomes ready, so every write is refused (not yet ready to handle request)",
		minor, strings.Join(ne.RuntimeConfig, ",")), true
}

// mapGateTrapNext is the flag change, through the machine config's extraArgs.
func mapGateTrapNext(ne NodeEvidence) []string {
	rc := append(append([]string{}, ne.RuntimeConfig...), "admissionregistration.k8s.io/v1beta1=true")
	patch := fmt.Sprintf(`[{"op":"add","path":"/cluster/apiServer/extraArgs/runtime-config","value":"%s"}]`, strings.Join(rc, ","))
	return []string{
		fmt.Sprintf("talosctl -n %s patch machineconfig --mode=no-reboot -p '%s'   # enable the v1beta1 API the gate needs (or drop MutatingAdmissionPolicy=true from feature-gates); nothing to delete in etcd", ne.Node, patch),
	}
}

func culpritNamed(cs []Culprit, kind, name string) bool {
	for _, c := range cs {
		if c.Kind == kind && c.Name == name {
			return true
		}
	}
	return false
}
