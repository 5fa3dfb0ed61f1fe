package lab

// Each scenario stopped before its upgrade: the cluster as it stands when
// someone is about to run talosctl upgrade-k8s, with the scenario's cause
// in place, for `breakglass upgrade-check` to judge (issue 31).
//
// The scenarios upgrade v1.32.13 to v1.34.4 in one step, as the incident
// did; talosctl upgrade-k8s refuses that path (one minor at a time), so
// before the upgrade each stands on the minor before the one its cause
// breaks, and the upgrade it is checked for is one minor:
//
//	(none)                       v1.33.13, the upgrade to 1.34
//	kyverno-servicecidr          v1.33.13 with the fail-closed catch-all webhooks: 1.34's start-up
//	                             writes RBAC bootstrap roles and an APIService through them
//	                             (the default ServiceCIDR exists already: 1.33 made it)
//	kyverno-servicecidr-excluded v1.33.13 with the same webhooks excluding system:apiserver: a go
//	mutating-policy-servicecidr  v1.32.13 with the MutatingAdmissionPolicy on ServiceCIDRs, the
//	                             upgrade to 1.33: the first 1.33+ start creates the default
//	                             ServiceCIDR, which the policy's patch fails on
//	flags-multicidr              v1.33.13 with MultiCIDRServiceAllocator=false (1.33 warns, 1.34
//	                             locks it to true), the upgrade to 1.34
//	flags-cloud-provider         v1.32.13 with --cloud-provider=external, the upgrade to 1.33
//	                             (1.33 already refuses the flag: no 1.33 cluster can hold it)
//	etcd-nospace                 v1.33.13 with etcd filled to its quota (NOSPACE), the upgrade to 1.34
//	encryption-key-renamed       v1.34.4 on Talos 1.14, Secrets stored under secretbox key2, and the
//	                             machine config regenerated for the 1.14 contract (key1) written to
//	                             a file, not applied: the change the gate judges (--candidate-config)
//	encryption-secret-regenerated the same, the file holding key2 with a new bundle's secret
//	encryption-provider-dropped  Secrets stored under aescbc key1 (a cluster created before Talos
//	                             1.3), the file holding secretbox key2 and identity, no aescbc

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// BeforeUpgrade is where a scenario stands before its upgrade.
type BeforeUpgrade struct {
	// Runs is the Kubernetes version the lab boots, vX.Y.Z.
	Runs string
	// To is the minor of the upgrade it stands before, "1.34", and ToVersion
	// the lab's binary of it.
	To, ToVersion string
	// Candidate: the change it stands before is a machine config, written
	// to CandidateConfig(lab) and not applied, for upgrade-check
	// --candidate-config.
	Candidate bool
}

// beforeUpgrade are the scenarios' places (see the top of this file).
var beforeUpgrade = map[string]BeforeUpgrade{
	"":                         {Runs: "v1.33.13", To: "1.34", ToVersion: NewVersion},
	ScenarioKyvernoServiceCIDR: {Runs: "v1.33.13", To: "1.34", ToVersion: NewVersion},
	ScenarioExcluded:           {Runs: "v1.33.13", To: "1.34", ToVersion: NewVersion},
	ScenarioMutatingPolicy:     {Runs: OldVersion, To: "1.33", ToVersion: "v1.33.13"},
	ScenarioFlagsMultiCIDR:     {Runs: "v1.33.13", To: "1.34", ToVersion: NewVersion},
	ScenarioFlagsCloudProvider: {Runs: OldVersion, To: "1.33", ToVersion: "v1.33.13"},
	ScenarioEtcdNoSpace:        {Runs: "v1.33.13", To: "1.34", ToVersion: NewVersion},
	// The encryption scenarios' change is a regenerated machine config (any
	// restart reads it: the next minor's is the one upgrade-k8s makes).
	ScenarioEncryptionKeyRenamed:        {Runs: NewVersion, To: "1.35", ToVersion: "v1.35.4", Candidate: true},
	ScenarioEncryptionSecretRegenerated: {Runs: NewVersion, To: "1.35", ToVersion: "v1.35.4", Candidate: true},
	ScenarioEncryptionProviderDropped:   {Runs: NewVersion, To: "1.35", ToVersion: "v1.35.4", Candidate: true},
}

// BeforeUpgradeOf is where the scenario ("" for none) stands before its upgrade.
func BeforeUpgradeOf(scenario string) (BeforeUpgrade, error) {
	b, ok := beforeUpgrade[scenario]
	if !ok && slices.Contains(Scenarios(), scenario) {
		var with []string
		for _, s := range Scenarios() {
			if _, ok := beforeUpgrade[s]; ok {
				with = append(with, s)
			}
		}
		return BeforeUpgrade{}, fmt.Errorf("%w: scenario %s has no state before an upgrade (no upgrade brings it; play it without --before-upgrade); those with one: %s",
			ErrUnknownScenario, scenario, strings.Join(with, ", "))
	}
	if !ok {
		return BeforeUpgrade{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownScenario, scenario, strings.Join(Scenarios(), ", "))
	}
	return b, nil
}

// RunBeforeUpgrade plays the scenario on a lab booted at its Runs version
// (Options.Version) up to its upgrade, and stops there.
func RunBeforeUpgrade(ctx context.Context, l *Lab, scenario string, tl *Timeline) error {
	b, err := BeforeUpgradeOf(scenario)
	if err != nil {
		return err
	}
	if l.opts.Version != b.Runs {
		return fmt.Errorf("scenario %q stands before its upgrade on %s: start the lab with Options.Version %s, not %s", scenario, b.Runs, b.Runs, l.opts.Version)
	}
	if err := tl.Step(fmt.Sprintf("kube-apiserver %s ready on %d node(s)", b.Runs, len(l.Nodes())), func() error {
		return l.WaitReady(ctx, 3*time.Minute)
	}); err != nil {
		return err
	}
	switch scenario {
	case ScenarioKyvernoServiceCIDR, ScenarioExcluded:
		kube, err := l.Kube(ctx)
		if err != nil {
			return err
		}
		var conds []admissionregistrationv1.MatchCondition
		what := "fail-closed Kyverno-like validating and mutating webhooks"
		if scenario == ScenarioExcluded {
			conds = []admissionregistrationv1.MatchCondition{{Name: "exclude-kube-apiserver", Expression: ExcludeAPIServer}}
			what += " with matchCondition " + ExcludeAPIServer
		}
		if err := tl.Step("install "+what+" (url "+l.Webhook.URL("/")+")", func() error {
			return InstallWebhooks(ctx, kube, l.Webhook, conds...)
		}); err != nil {
			return err
		}
		return tl.Step("webhook backend answers a review", func() error {
			return ProbeWebhook(ctx, kube, l.Webhook, "before-upgrade")
		})
	case ScenarioMutatingPolicy:
		if err := tl.Step("turn the MutatingAdmissionPolicy API on: cluster.apiServer.extraArgs "+describeArgs(MutatingPolicyArgs)+" (mode NO_REBOOT)", func() error {
			return SetAPIServerArgs(ctx, l, 3*time.Minute, MutatingPolicyArgs)
		}); err != nil {
			return err
		}
		kube, err := l.Kube(ctx)
		if err != nil {
			return err
		}
		return tl.Step("install MutatingAdmissionPolicy "+MutatingPolicy+" (a JSONPatch adding a team label to every ServiceCIDR, failurePolicy Fail) and its binding", func() error {
			return installMutatingPolicy(ctx, kube)
		})
	case ScenarioFlagsMultiCIDR, ScenarioFlagsCloudProvider:
		sc := FlagsScenarios[scenario]
		return tl.Step("cluster.apiServer.extraArgs "+describeArgs(sc.Args)+" (mode NO_REBOOT): "+b.Runs+" accepts them", func() error {
			return SetAPIServerArgs(ctx, l, 3*time.Minute, sc.Args)
		})
	case ScenarioEncryptionKeyRenamed, ScenarioEncryptionSecretRegenerated, ScenarioEncryptionProviderDropped:
		return encryptionBeforeUpgrade(ctx, l, scenario, tl)
	case ScenarioEtcdNoSpace:
		if q := l.opts.EtcdQuotaBytes; q <= 0 || q > 64<<20 {
			return fmt.Errorf("scenario %s fills etcd through kube-apiserver: start the lab with Options.EtcdQuotaBytes = NoSpaceQuota", ScenarioEtcdNoSpace)
		}
		if err := tl.Step("fill etcd through kube-apiserver until it refuses: an event flood and a status rewritten in a loop", func() error {
			_, err := FillEtcd(ctx, l, 2*time.Minute)
			return err
		}); err != nil {
			return err
		}
		return tl.Step("etcd raised NOSPACE (listed through the Talos API on every node); kube-apiserver "+b.Runs+" limps", func() error {
			return observeLimping(ctx, l, time.Minute)
		})
	}
	return nil
}

// PrintBeforeUpgrade prints the lab's addresses and the gate to run before
// the scenario's upgrade, with what fixes its cause.
func (l *Lab) PrintBeforeUpgrade(w io.Writer, scenario string, b BeforeUpgrade) {
	tc := "--talosconfig " + l.Talosconfig
	name := scenario
	if name == "" {
		name = "no scenario"
	}
	fmt.Fprintf(w, "\nlab is up, before its upgrade (%s): kube-apiserver %s, the upgrade to %s next\n", name, b.Runs, b.To)
	for i, n := range l.Cluster.ControlPlanes() {
		fmt.Fprintf(w, "  node %s (%s): Talos API %s, kube-apiserver %s\n", n.IP, n.Name, n.Addr, l.APIServers()[i])
	}
	fmt.Fprintf(w, "  etcd %s, talosconfig %s (os:admin), kubeconfig %s\n", strings.Join(l.Etcd.Endpoints, ","), l.Talosconfig, filepath.Join(l.Dir, "kubeconfig"))
	etcdFlag := ""
	if !strings.HasSuffix(l.Etcd.Endpoints[0], ":2379") {
		etcdFlag = " --etcd-endpoints " + strings.Join(l.Etcd.Endpoints, ",")
	}
	before := "talosctl upgrade-k8s"
	if b.Candidate {
		etcdFlag += " --candidate-config " + CandidateConfig(l)
		before = "the regenerated machine config is applied (talosctl apply-config)"
		fmt.Fprintf(w, "  the regenerated machine config, not applied: %s\n", CandidateConfig(l))
	}
	fmt.Fprintf(w, "\nthe gate, before %s (in another terminal):\n  breakglass %s upgrade-check --to %s%s\n", before, tc, b.To, etcdFlag)
	fmt.Fprintf(w, "it prints each no-go's fix; apply it, then run it again.\n")
	fmt.Fprintf(w, "\nCtrl-C stops the lab and removes nothing but its processes.\n")
}
