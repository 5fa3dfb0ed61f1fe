package lab

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// The upgrade killed by its own flags (issue 22), at the real kubelet's
// pace: 1.32 runs with feature-gates MultiCIDRServiceAllocator=false, the
// upgrade to 1.34 exits at once on every start. diagnose names the gate
// (exit 29), `recover --yes` with no flag brings kube-apiserver to ready,
// the config differs from before only in that gate, and revert is byte for
// byte what was there before the recovery.
func TestRecoverRefusedFlagsAsTyped(t *testing.T) {
	recoverRefusedFlags(t, ScenarioFlagsMultiCIDR, "MultiCIDRServiceAllocator", true)
}

// The same with --cloud-provider=external, which 1.32 accepts (deprecated,
// hidden from --help) and 1.34 does not know.
func TestRecoverRemovedFlagAsTyped(t *testing.T) {
	recoverRefusedFlags(t, ScenarioFlagsCloudProvider, "cloud-provider", false)
}

func recoverRefusedFlags(t *testing.T, scenario, name string, revert bool) {
	sc := FlagsScenarios[scenario]
	g := newGuidedWith(t, 1, func(ctx context.Context, l *Lab) error {
		_, err := RunScenario(ctx, l, scenario, NewTimeline(testWriter{t}))
		return err
	})
	ctx := context.Background()
	ip := g.l.Nodes()[0]
	cfg, err := g.tc.ReadMachineConfig(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	before := cfg.Bytes

	d := g.run("", append([]string{"diagnose", "-o", "json"}, g.etcdFlags()...)...)
	var rep struct {
		Verdict string `json:"verdict"`
		Flags   []struct {
			Flag, Item, Name, Refusal string
			Nodes                     []string
		} `json:"flags"`
		Next []string `json:"next"`
	}
	if err := json.Unmarshal([]byte(d.stdout), &rep); err != nil {
		t.Fatalf("diagnose -o json: %v\n%s\n%s", err, d.stdout, d.stderr)
	}
	if d.code != 29 || rep.Verdict != "flags-refused" || len(rep.Flags) != 1 || (rep.Flags[0].Name != name && rep.Flags[0].Flag != name) ||
		!strings.Contains(sc.Refusal, rep.Flags[0].Refusal) || !slices.Equal(rep.Flags[0].Nodes, []string{ip}) {
		t.Fatalf("diagnose: exit %d, %+v\n%s", d.code, rep, d.stderr)
	}
	if len(rep.Next) == 0 || !strings.HasPrefix(rep.Next[0], "breakglass recover") {
		t.Errorf("diagnose's next command: %v", rep.Next)
	}
	g.unchanged("after diagnose")

	incidents := g.incidents()
	start := time.Now()
	r := g.run("", append([]string{"recover", "--yes", "-o", "json"}, g.etcdFlags()...)...)
	took := time.Since(start)
	t.Logf("recover --yes took %s:\n%s", took.Round(time.Millisecond), r.stderr)
	if r.code != 0 {
		t.Fatalf("recover --yes: exit %d\n%s", r.code, r.stdout)
	}
	res := decodeResult(t, r.stdout)
	if res.Outcome != "completed" || res.Decision == nil || res.Decision.Verdict != "flags-refused" || len(res.Decision.Of.(*recovery.FlagsDecision).Flags) != 1 {
		t.Fatalf("outcome %q, decision %+v", res.Outcome, res.Decision)
	}
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, s.Name)
		if s.Outcome != recovery.OutcomeOK {
			t.Errorf("step %s: %s (%s)", s.Name, s.Outcome, s.Message)
		}
	}
	if !slices.Equal(steps, []string{"preflight", "diagnose", "remove-flags", "wait-apiserver"}) {
		t.Errorf("steps %v: want the apiserver-flags runbook's after diagnose", steps)
	}
	if !strings.Contains(r.stderr, "meant to stay") || !strings.Contains(r.stderr, "Omni") {
		t.Errorf("the summary does not say the edit stays, and where else to make it:\n%s", r.stderr)
	}
	g.wantReady("after recovery")
	cfg, err = g.tc.ReadMachineConfig(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := changedLines(before, cfg.Bytes), changedLines(renderArgsLines(sc.Args), renderArgsLines(sc.Recovered)); !slices.Equal(got, want) {
		t.Errorf("the config changed in %q, want only %q", got, want)
	}
	if !revert {
		return
	}
	id := g.newIncident(incidents)
	rv := g.run("", append([]string{"revert", "--yes", id}, g.etcdFlags()...)...)
	if rv.code != 0 {
		t.Fatalf("revert: exit %d\n%s\n%s", rv.code, rv.stdout, rv.stderr)
	}
	cfg, err = g.tc.ReadMachineConfig(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.Bytes) != string(before) {
		t.Errorf("revert: the config is not byte-identical to before the recovery: %q", changedLines(before, cfg.Bytes))
	}
	if !strings.Contains(rv.stderr+rv.stdout, "byte-identical") {
		t.Errorf("revert does not say it is byte-identical:\n%s", rv.stderr)
	}
}

// lab rehearse --scenario flags-multicidr: the guided recovery's time on
// the lab, every check holding.
func TestRehearseRefusedFlags(t *testing.T) {
	bin := needBinaries(t, OldVersion, NewVersion)
	var out strings.Builder
	rep, err := Rehearse(context.Background(), RehearseOptions{Scenario: ScenarioFlagsMultiCIDR, Nodes: 1, KubeBinDir: bin, Out: &out, ToolVersion: "test"})
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Recovery <= 0 || len(rep.Checks) < 4 {
		t.Errorf("recovery %s, checks %+v", rep.Recovery, rep.Checks)
	}
	t.Logf("guided recovery on the lab: %s", rep.Recovery.Round(time.Millisecond))
}

// wantReady: kube-apiserver is ready on every node.
func (g *guided) wantReady(when string) {
	g.t.Helper()
	health, err := recovery.CheckHealth(context.Background(), g.tc)
	if err != nil {
		g.t.Fatalf("health %s: %v", when, err)
	}
	for _, h := range health {
		if !h.Ready {
			g.t.Errorf("node %s not ready %s: %s", h.Node, when, h.Summary())
		}
	}
}
