package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// UpOptions tune Up.
type UpOptions struct {
	Nodes    int
	Scenario string // "" boots OldVersion and stops there
	// BeforeUpgrade stops the scenario before its upgrade, on the minor
	// before it (BeforeUpgradeOf), for `breakglass upgrade-check`.
	BeforeUpgrade bool
	Dir           string // talosconfig, kubeconfig, state, certificates, etcd data
	KubeBinDir    string
	Out           io.Writer
	// Lab overrides ports and addresses; zero ports mean the real ones
	// (50000, 6443, 2379) here.
	Lab Options
}

// Up starts a lab in the foreground with the real Talos ports and the real
// kubelet and Talos times (unless opts.Lab sets others), plays the
// scenario if one is named, prints what to try next, and tears everything
// down when ctx ends (Ctrl-C).
func Up(ctx context.Context, opts UpOptions) error {
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	if opts.Scenario != "" && !slices.Contains(Scenarios(), opts.Scenario) {
		return fmt.Errorf("%w %q (known: %s)", ErrUnknownScenario, opts.Scenario, strings.Join(Scenarios(), ", "))
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return err
	}
	// A previous lab's data would not match this lab's new CAs: start afresh,
	// removing only what the lab itself writes.
	for _, sub := range []string{"etcd", "nodes", "talos", "state", "talosconfig", "kubeconfig"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	lo := opts.Lab
	lo.Dir, lo.Nodes, lo.KubeBinDir, lo.Log = dir, opts.Nodes, opts.KubeBinDir, out
	if isEtcdLossScenario(opts.Scenario) && opts.Nodes != EtcdScenarioNodes {
		return fmt.Errorf("lab: scenario %s needs %d nodes: --nodes %d", opts.Scenario, EtcdScenarioNodes, EtcdScenarioNodes)
	}
	if encryptionRegeneratesAllButLast(opts.Scenario) && opts.Nodes < 2 {
		return fmt.Errorf("lab: scenario %s regenerates every control plane's config but the last: --nodes 3", opts.Scenario)
	}
	if opts.Scenario == ScenarioEtcdNoSpace && lo.EtcdQuotaBytes == 0 {
		lo.EtcdQuotaBytes = NoSpaceQuota // small enough to fill in seconds
	}
	if lo.TalosPort == 0 {
		lo.TalosPort = 50000
	}
	if lo.APIPort == 0 {
		lo.APIPort = 6443
	}
	if lo.EtcdPort == 0 {
		lo.EtcdPort = 2379
	}
	if lo.EtcdPeerPort == 0 {
		lo.EtcdPeerPort = 2380
	}
	var before *BeforeUpgrade
	if opts.BeforeUpgrade {
		b, err := BeforeUpgradeOf(opts.Scenario)
		if err != nil {
			return err
		}
		before, lo.Version = &b, b.Runs
	}
	lo = lo.ForScenario(opts.Scenario)
	if opts.Scenario != "" || before != nil {
		need := []string{OldVersion, NewVersion}
		if isEncryptionScenario(opts.Scenario) {
			need = []string{lo.Version}
		}
		if before != nil {
			need = []string{before.Runs, before.ToVersion}
		}
		if lo.KubeBinDir, err = Binaries(ctx, lo.KubeBinDir, out, need...); err != nil {
			return err
		}
	}
	l, err := Start(ctx, lo)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "lab: stopping (kube-apiserver processes, Talos nodes, webhook backend, etcd)")
		l.Close()
		fmt.Fprintln(out, "lab: stopped")
	}()
	tl := NewTimeline(out)
	if before != nil {
		if err := RunBeforeUpgrade(ctx, l, opts.Scenario, tl); err != nil {
			return err
		}
	} else if opts.Scenario == "" {
		if err := tl.Step(fmt.Sprintf("kube-apiserver %s ready on %d node(s)", lo.versionOr(), len(l.Nodes())), func() error {
			return l.WaitReady(ctx, 3*time.Minute)
		}); err != nil {
			return err
		}
	} else if _, err := RunScenario(ctx, l, opts.Scenario, tl); err != nil {
		return err
	}
	kube := filepath.Join(dir, "kubeconfig")
	if kc, err := l.Cluster.AdminKubeconfig(); err == nil {
		_ = os.WriteFile(kube, kc, 0o600)
	}
	if before != nil {
		l.PrintBeforeUpgrade(out, opts.Scenario, *before)
	} else {
		l.PrintNext(out, opts.Scenario)
	}
	<-ctx.Done()
	return nil
}

func (o Options) versionOr() string {
	if o.Version == "" {
		return OldVersion
	}
	return o.Version
}

// PrintNext prints the lab's addresses and the exact commands to try after
// the scenario ("" for none): for a deadlock, the command an engineer
// types first, then the steps it takes, by hand.
func (l *Lab) PrintNext(w io.Writer, scenario string) {
	tc := "--talosconfig " + l.Talosconfig
	sd := "--state-dir " + filepath.Join(l.Dir, "state")
	first := l.Cluster.Nodes[0]
	fmt.Fprintf(w, "\nlab is up:\n")
	for i, n := range l.Cluster.ControlPlanes() {
		fmt.Fprintf(w, "  node %s (%s): Talos API %s, kube-apiserver %s\n", n.IP, n.Name, n.Addr, l.APIServers()[i])
	}
	fmt.Fprintf(w, "  etcd %s (client certificates from cluster.etcd.ca)\n", strings.Join(l.Etcd.Endpoints, ","))
	fmt.Fprintf(w, "  webhook backend %s (answers only while the service network is up)\n", l.Webhook.URL("/"))
	fmt.Fprintf(w, "  talosconfig %s (os:admin), kubeconfig %s\n", l.Talosconfig, filepath.Join(l.Dir, "kubeconfig"))
	fmt.Fprintf(w, "\ntry next (in another terminal):\n")
	plugins, deadlocked := scenarioPlugins[scenario]
	cmds := []string{
		fmt.Sprintf("breakglass %s %s diagnose", tc, sd),
		fmt.Sprintf("breakglass %s %s recover", tc, sd),
		"or by hand:",
		fmt.Sprintf("talosctl %s -n %s logs -k kube-system/kube-apiserver-%s:kube-apiserver --tail 20", tc, first.IP, first.Name),
		fmt.Sprintf("breakglass %s %s admission disable --plugins %s", tc, sd, strings.Join(plugins, ",")),
		fmt.Sprintf("breakglass %s %s apiserver wait", tc, sd),
		fmt.Sprintf("breakglass %s %s admission status", tc, sd),
		fmt.Sprintf("breakglass %s %s admission restore", tc, sd),
		fmt.Sprintf("breakglass %s %s apiserver wait", tc, sd),
	}
	if isFlagsScenario(scenario) {
		cmds = flagsNext(l, tc, sd)
	} else if scenario == ScenarioEtcdNoSpace {
		cmds = noSpaceNext(l, tc, sd)
	} else if isEtcdLossScenario(scenario) {
		cmds = etcdLossNext(l, scenario, tc, sd)
	} else if isEncryptionScenario(scenario) {
		cmds = encryptionNext(l, scenario, tc, sd)
	} else if !deadlocked {
		cmds = []string{
			fmt.Sprintf("breakglass %s %s apiserver wait", tc, sd),
			fmt.Sprintf("breakglass %s %s admission status", tc, sd),
			fmt.Sprintf("kubectl --kubeconfig %s get --raw /version", filepath.Join(l.Dir, "kubeconfig")),
		}
	}
	for _, c := range cmds {
		fmt.Fprintf(w, "  %s\n", c)
	}
	fmt.Fprintf(w, "\nCtrl-C stops the lab and removes nothing but its processes.\n")
}
