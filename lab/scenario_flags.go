package lab

// The upgrade that kills kube-apiserver through its own flags (issue 22):
// cluster.apiServer.extraArgs that 1.32 accepts are carried to 1.34, which
// refuses them and exits at once, on every start; the kubelet restarts it
// with back-off. No admission object is involved: the machine configs are
// the fix.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// The flags scenarios.
const (
	// ScenarioFlagsMultiCIDR: feature-gates MultiCIDRServiceAllocator=false
	// (beside a gate both minors accept), which 1.34 locks to true.
	ScenarioFlagsMultiCIDR = "flags-multicidr"
	// ScenarioFlagsCloudProvider: --cloud-provider=external, deprecated and
	// hidden on 1.32, gone from 1.33.
	ScenarioFlagsCloudProvider = "flags-cloud-provider"
)

// FlagsScenario is one of them: the extraArgs it sets on OldVersion, what
// NewVersion exits with, and the extraArgs the recovery must leave.
type FlagsScenario struct {
	Args map[string]string
	// Refusal is NewVersion's own line (its error, after the klog header).
	Refusal string
	// Recovered are the extraArgs after the recovery: only the refused
	// flag gone.
	Recovered map[string]string
}

// FlagsScenarios are the flags scenarios by name.
var FlagsScenarios = map[string]FlagsScenario{
	ScenarioFlagsMultiCIDR: {
		Args:      map[string]string{"feature-gates": "APIResponseCompression=true,MultiCIDRServiceAllocator=false"},
		Refusal:   `"command failed" err="cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true"`,
		Recovered: map[string]string{"feature-gates": "APIResponseCompression=true"},
	},
	ScenarioFlagsCloudProvider: {
		Args:      map[string]string{"cloud-provider": "external", "event-ttl": "2h0m0s"},
		Refusal:   "Error: unknown flag: --cloud-provider",
		Recovered: map[string]string{"event-ttl": "2h0m0s"},
	},
}

func isFlagsScenario(name string) bool { _, ok := FlagsScenarios[name]; return ok }

// runFlagsScenario: the extraArgs on OldVersion (it starts, ready), the
// upgrade to NewVersion, and NewVersion refusing them on every node, in a
// crash loop.
func runFlagsScenario(ctx context.Context, l *Lab, name string, tl *Timeline) error {
	sc := FlagsScenarios[name]
	if err := startOnOld(ctx, l, tl); err != nil {
		return err
	}
	if err := tl.Step("cluster.apiServer.extraArgs "+describeArgs(sc.Args)+" through the Talos API (mode NO_REBOOT): "+OldVersion+" accepts them", func() error {
		return SetAPIServerArgs(ctx, l, 3*time.Minute, sc.Args)
	}); err != nil {
		return err
	}
	if err := upgradeStep(ctx, l, tl); err != nil {
		return err
	}
	return tl.Step(NewVersion+" never starts: it exits with '"+sc.Refusal+"', the kubelet restarts it with back-off (CrashLoopBackOff)", func() error {
		return ObserveRefusal(ctx, l, sc.Refusal, 3*time.Minute)
	})
}

// ObserveRefusal waits until kube-apiserver NewVersion has exited on every
// node with the refusal as its last word, and the kubelet shows the back-off
// in the static pod status (CrashLoopBackOff, a restart).
func ObserveRefusal(ctx context.Context, l *Lab, refusal string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return err
	}
	defer tc.Close()
	for i, ip := range l.Nodes() {
		name := l.Cluster.Nodes[i].Name
		for {
			exited := 0
			for _, r := range l.Runs() {
				if r.Node == ip && strings.HasSuffix(r.Image, ":"+NewVersion) && !r.Exited.IsZero() && strings.Contains(r.LastLog, refusal) {
					exited++
				}
			}
			st, err := tc.ReadAPIServerStatus(ctx, ip, name)
			if exited >= 2 && err == nil && st.RestartCount >= 1 && st.WaitingReason == "CrashLoopBackOff" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %s: kube-apiserver %s did not crash-loop on %q: %d exits seen, status %+v (%v)", ip, NewVersion, refusal, exited, st, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// rehearseFlags recovers a flags scenario with the guided recovery, as
// `breakglass recover --yes` runs it (runbook webhook-deadlock, no expert
// flag: the diagnosis picks apiserver-flags), and checks that kube-apiserver
// NewVersion is ready and the configs differ only in the refused flag.
func rehearseFlags(ctx context.Context, l *Lab, name string, rep *Rehearsal, tl *Timeline, out io.Writer, toolVersion string) error {
	sc := FlagsScenarios[name]
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return err
	}
	defer tc.Close()
	before := map[string][]byte{}
	for _, ip := range l.Nodes() {
		cfg, err := tc.ReadMachineConfig(ctx, ip)
		if err != nil {
			return err
		}
		before[ip] = cfg.Bytes
	}
	res, check := guidedRecovery(ctx, l, tc, "apiserver-flags", rep, tl, out, toolVersion)
	if res != nil && res.Decision != nil {
		var flags []string
		if f, ok := res.Decision.Of.(*recovery.FlagsDecision); ok {
			flags = f.Flags
		}
		check("the diagnosis named the refused flag (verdict flags-refused)", res.Decision.Verdict == "flags-refused" && len(flags) > 0,
			fmt.Sprintf("%s %v", res.Decision.Verdict, flags))
	}
	health, herr := recovery.CheckHealth(ctx, tc)
	ready := herr == nil && len(health) == len(l.Nodes())
	for _, h := range health {
		ready = ready && h.Ready
	}
	check("kube-apiserver "+NewVersion+" ready on every node", ready, fmt.Sprint(herr))
	for _, ip := range l.Nodes() {
		cfg, err := tc.ReadMachineConfig(ctx, ip)
		if err != nil {
			check("node "+ip+": config read", false, err.Error())
			continue
		}
		diff := changedLines(before[ip], cfg.Bytes)
		want := changedLines(renderArgsLines(sc.Args), renderArgsLines(sc.Recovered))
		check("node "+ip+": the config differs from before only in the refused flag", slices.Equal(diff, want), fmt.Sprintf("changed lines %q, want %q", diff, want))
	}
	for _, r := range l.Runs() {
		if strings.HasSuffix(r.Image, ":"+NewVersion) && !r.Ready.IsZero() {
			for k := range sc.Args {
				if _, stays := sc.Recovered[k]; !stays && slices.ContainsFunc(r.Args, func(a string) bool { return strings.HasPrefix(a, "--"+k+"=") }) {
					check("node "+r.Node+": the ready kube-apiserver has no --"+k, false, strings.Join(r.Args, " "))
				}
			}
		}
	}
	return nil
}

// renderArgsLines is how SetAPIServerArgs writes extraArgs, one line a key.
func renderArgsLines(args map[string]string) []byte {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(args)) {
		fmt.Fprintf(&b, "            %s: %q\n", k, args[k])
	}
	return []byte(b.String())
}

// changedLines are the lines of a that b lacks, then those of b that a
// lacks, each marked - or +.
func changedLines(a, b []byte) []string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	var out []string
	for _, l := range la {
		if !slices.Contains(lb, l) {
			out = append(out, "-"+strings.TrimSpace(l))
		}
	}
	for _, l := range lb {
		if !slices.Contains(la, l) {
			out = append(out, "+"+strings.TrimSpace(l))
		}
	}
	return out
}

// flagsNext is what the lab prints to try after a flags scenario.
func flagsNext(l *Lab, tc, sd string) []string {
	first := l.Cluster.Nodes[0]
	return []string{
		fmt.Sprintf("breakglass %s %s diagnose", tc, sd),
		fmt.Sprintf("breakglass %s %s recover", tc, sd),
		"or by hand:",
		fmt.Sprintf("talosctl %s -n %s logs -k kube-system/kube-apiserver-%s:kube-apiserver --tail 20", tc, first.IP, first.Name),
		fmt.Sprintf("talosctl %s -n %s edit machineconfig --mode=no-reboot   # take the refused flag out of cluster.apiServer.extraArgs", tc, first.IP),
		fmt.Sprintf("breakglass %s %s apiserver wait", tc, sd),
	}
}
