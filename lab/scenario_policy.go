package lab

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/talos"
)

// The mutating-policy-servicecidr scenario: the incident with no webhook at
// all. A cluster on 1.32 has turned the MutatingAdmissionPolicy API on (an
// alpha there: the feature gate and the API versions in
// cluster.apiServer.extraArgs) and bound a policy that labels every
// ServiceCIDR with a JSONPatch. The patch adds to /metadata/labels, which
// fails on an object without labels: the default ServiceCIDR 1.34 creates
// at its first start has none, the policy fails closed, and the start-up
// never ends. Nothing needs to come back: the MutatingAdmissionPolicy
// plugin must be turned off (LAB.md, "Admission policies across the
// upgrade").
const (
	ScenarioMutatingPolicy = "mutating-policy-servicecidr"

	MutatingPolicy        = "add-team-label"
	MutatingPolicyBinding = "add-team-label-binding"
)

// MutatingPolicyArgs turn the MutatingAdmissionPolicy API on for 1.32 and
// 1.34 alike: the gate, v1alpha1 (what 1.32 serves) and v1beta1 (what the
// 1.34 plugin reads; with v1alpha1 alone 1.34 refuses every write, the trap
// `breakglass diagnose` knows).
var MutatingPolicyArgs = map[string]string{
	"feature-gates":  "MutatingAdmissionPolicy=true",
	"runtime-config": "admissionregistration.k8s.io/v1alpha1=true,admissionregistration.k8s.io/v1beta1=true",
}

// scenarioPlugins are the admission plugins each deadlocking scenario needs
// off, for what the lab prints next.
var scenarioPlugins = map[string][]string{
	ScenarioKyvernoServiceCIDR: RecoveryPlugins,
	ScenarioMutatingPolicy:     {"MutatingAdmissionPolicy"},
}

func runMutatingPolicy(ctx context.Context, l *Lab, tl *Timeline) error {
	if err := startOnOld(ctx, l, tl); err != nil {
		return err
	}
	if err := tl.Step("turn the MutatingAdmissionPolicy API on: cluster.apiServer.extraArgs "+describeArgs(MutatingPolicyArgs)+" through the Talos API (mode NO_REBOOT)", func() error {
		return SetAPIServerArgs(ctx, l, 3*time.Minute, MutatingPolicyArgs)
	}); err != nil {
		return err
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		return err
	}
	if err := tl.Step("install MutatingAdmissionPolicy "+MutatingPolicy+" (a JSONPatch adding a team label to every ServiceCIDR, failurePolicy Fail) and its binding", func() error {
		return installMutatingPolicy(ctx, kube)
	}); err != nil {
		return err
	}
	if err := upgradeStep(ctx, l, tl); err != nil {
		return err
	}
	return tl.Step("deadlock observed: readyz fails on "+DeadlockCheck+", log says '"+DeadlockLogLine+"'", func() error {
		_, err := ObserveDeadlock(ctx, l, 3*time.Minute)
		return err
	})
}

// MutatingPolicyManifest is the scenario's policy and binding, as 1.32
// serves them (v1alpha1); `lab replay -f` takes the same file.
//
//go:embed manifests/mutating-policy.yaml
var MutatingPolicyManifest []byte

// installMutatingPolicy creates the policy and its binding.
func installMutatingPolicy(ctx context.Context, kube *KubeClient) error {
	objs, err := parseReplayObjects([]ReplaySource{{Name: "manifests/mutating-policy.yaml", Data: MutatingPolicyManifest}})
	if err != nil {
		return err
	}
	return installReplayObjects(ctx, kube, objs, "", map[string]int{})
}

// SetAPIServerArgs gives every node's cluster.apiServer.extraArgs these
// keys and values, as an operator edits the config, and waits until each
// node runs a ready kube-apiserver of the new pod. The lab's generated
// configs have no extraArgs yet; one that has is refused.
func SetAPIServerArgs(ctx context.Context, l *Lab, timeout time.Duration, args map[string]string) error {
	if err := l.onEveryNode(ctx, func(tc *talos.Client, ip string) error { return applyAPIServerArgs(ctx, tc, ip, args) }); err != nil {
		return err
	}
	return l.waitReadyRuns(ctx, timeout, func(r ContainerRun) (bool, error) {
		for k, v := range args {
			if !slices.Contains(r.Args, "--"+k+"="+v) {
				return false, nil
			}
		}
		if !r.Exited.IsZero() && r.Ready.IsZero() {
			return false, fmt.Errorf("node %s: kube-apiserver exited on these flags: %s", r.Node, strings.TrimSpace(r.LastLog))
		}
		return true, nil
	})
}

// applyAPIServerArgs sets one node's cluster.apiServer.extraArgs, without
// waiting for the pod.
func applyAPIServerArgs(ctx context.Context, tc *talos.Client, node string, args map[string]string) error {
	cfg, err := tc.ReadMachineConfig(ctx, node)
	if err != nil {
		return err
	}
	text := string(cfg.Bytes)
	const anchor = "\n    apiServer:\n" // the generated config indents by four
	i := strings.Index(text, anchor)
	if i < 0 || strings.Contains(text, "        extraArgs:") {
		return fmt.Errorf("node %s: no apiServer section without extraArgs in the generated config", node)
	}
	ins := anchor + "        extraArgs:\n"
	for _, k := range slices.Sorted(maps.Keys(args)) {
		ins += "            " + k + ": " + strconv.Quote(args[k]) + "\n" // a YAML double-quoted scalar
	}
	text = text[:i] + ins + text[i+len(anchor):]
	_, err = tc.Apply(ctx, node, talos.ApplyRequest{Config: []byte(text), Mode: talos.NoReboot})
	return err
}

// describeArgs: "key=value, ..." in key order.
func describeArgs(args map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		out = append(out, k+"="+args[k])
	}
	return strings.Join(out, ", ")
}
