package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/talos"
)

// Issue 31: `breakglass upgrade-check` on each scenario stopped before its
// upgrade (RunBeforeUpgrade), real kube-apiserver binaries and etcd,
// through the real command: a no-go (exit 40) naming the cause, then the
// fix the gate prints, applied the way it says (breakglass, kubectl-like
// through the API server, or the talosctl patch through the Talos API),
// then a go (exit 0). A plain lab and the excluded webhooks are a go from
// the start. Where the fix is in, the upgrade itself is then done, with
// the webhook backend held down where there is one, and must be ready: the
// gate's go is the upgrade's.
func TestUpgradeGateOnEveryScenario(t *testing.T) {
	t.Parallel()
	needBinaries(t, "v1.33.13")
	for _, tc := range []struct {
		scenario string
		nodes    int
		// cause is the check that must be no-go, says what its line says.
		cause, says string
		fix         func(t *testing.T, g *guided, gate result)
		// upgrade: after the fix, upgrade and wait for it to be ready.
		upgrade bool
		// unfixed: upgrade without the fix, the backend down, and see the
		// target exit as the gate said (the no-go is real).
		unfixed bool
	}{
		{scenario: "", nodes: 3},
		{scenario: ScenarioExcluded, nodes: 1},
		{scenario: ScenarioKyvernoServiceCIDR, nodes: 1, cause: "admission", says: "would stop kube-apiserver 1.34's start (webhook backends assumed down, as when they run in the cluster): " + ValidatingWebhookConfig,
			fix: fixAdmission("1.33", "1.34"), upgrade: true},
		{scenario: ScenarioKyvernoServiceCIDR, nodes: 1, cause: "admission", says: ValidatingWebhookConfig, unfixed: true},
		{scenario: ScenarioMutatingPolicy, nodes: 1, cause: "admission", says: "MutatingAdmissionPolicy " + MutatingPolicy,
			fix: fixAdmission("1.32", "1.33")},
		{scenario: ScenarioFlagsMultiCIDR, nodes: 1, cause: "apiserver-flags", says: "kube-apiserver v1.34.4 refuses --feature-gates MultiCIDRServiceAllocator=false",
			fix: fixFlags, upgrade: true},
		{scenario: ScenarioFlagsCloudProvider, nodes: 1, cause: "apiserver-flags", says: "kube-apiserver v1.33.13 refuses --cloud-provider",
			fix: fixFlags},
		{scenario: ScenarioEtcdNoSpace, nodes: 1, cause: "etcd-alarms", says: "NOSPACE",
			fix: fixNoSpace, upgrade: true},
		// The change is the regenerated machine config (--candidate-config);
		// its "upgrade" is that config applied to every node.
		{scenario: ScenarioEncryptionKeyRenamed, nodes: 3, cause: "encryption", says: "the candidate machine config",
			fix: fixCandidate, upgrade: true},
		{scenario: ScenarioEncryptionSecretRegenerated, nodes: 1, cause: "encryption", says: "the candidate machine config",
			fix: fixCandidate, upgrade: true},
		{scenario: ScenarioEncryptionProviderDropped, nodes: 1, cause: "encryption", says: "the candidate machine config",
			fix: fixCandidate, upgrade: true},
	} {
		name := tc.scenario
		switch {
		case name == "":
			name = "plain"
		case tc.unfixed:
			name += "-unfixed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := BeforeUpgradeOf(tc.scenario)
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Nodes: tc.nodes, Version: b.Runs}.ForScenario(tc.scenario)
			if tc.scenario == ScenarioEtcdNoSpace {
				opts.EtcdQuotaBytes = NoSpaceQuota
			}
			l := startLabWith(t, opts)
			ctx := context.Background()
			if err := RunBeforeUpgrade(ctx, l, tc.scenario, NewTimeline(testWriter{t})); err != nil {
				t.Fatalf("before the upgrade: %v", err)
			}
			g := guidedOn(t, l)
			gate := func(when string) result {
				t.Helper()
				start := time.Now()
				args := append([]string{"upgrade-check", "--to", b.To}, g.etcdFlags()...)
				if b.Candidate {
					args = append(args, "--candidate-config", CandidateConfig(l))
				}
				r := g.run("", args...)
				t.Logf("upgrade-check --to %s %s: exit %d in %s\n%s%s", b.To, when, r.code, round(time.Since(start)), r.stdout, r.stderr)
				return r
			}
			r := gate("before the fix")
			if tc.cause == "" {
				if r.code != 0 || strings.Contains(r.stdout, "\nno-go") {
					t.Fatalf("a go was expected: exit %d", r.code)
				}
				return
			}
			line := regexp.MustCompile(`(?m)^no-go +` + regexp.QuoteMeta(tc.cause) + ` +.*` + regexp.QuoteMeta(tc.says))
			if r.code != 40 || !line.MatchString(r.stdout) || !strings.HasPrefix(strings.SplitN(r.stdout, "\n", 4)[3], "no-go") {
				t.Fatalf("want exit 40 with a no-go %s saying %q first; got exit %d", tc.cause, tc.says, r.code)
			}
			if tc.unfixed {
				upgradeFails(t, l, b.ToVersion)
				return
			}
			tc.fix(t, g, r)
			if r := gate("after the fix"); r.code != 0 || strings.Contains(r.stdout, "\nno-go") {
				t.Fatalf("after the fix: exit %d", r.code)
			}
			if !tc.upgrade {
				return
			}
			if l.Webhook.Serving() {
				l.Webhook.Hold(true) // the backend down: the fix, not the backend, lets it start
				defer l.Webhook.Hold(false)
			}
			start := time.Now()
			if b.Candidate {
				applyCandidate(t, l)
				return
			}
			if err := Upgrade(ctx, l, b.ToVersion); err != nil {
				t.Fatal(err)
			}
			if err := l.WaitReadyVersion(ctx, b.ToVersion, 3*time.Minute); err != nil {
				t.Fatalf("the upgrade the gate let through is not ready: %v", err)
			}
			t.Logf("upgraded to %s: ready %s after the apply", b.ToVersion, round(time.Since(start)))
		})
	}
}

// upgradeFails upgrades to version with the webhook backend held down
// and waits for what the gate predicted: the target's start-up writes
// refused, its post-start hook giving up, the process exiting, never ready.
func upgradeFails(t *testing.T, l *Lab, version string) {
	t.Helper()
	l.Webhook.Hold(true)
	defer l.Webhook.Hold(false)
	ctx := withTimeout(t, context.Background(), 4*time.Minute)
	if err := Upgrade(ctx, l, version); err != nil {
		t.Fatal(err)
	}
	for {
		for _, r := range l.Runs() {
			if !strings.HasSuffix(r.Image, ":"+version) {
				continue
			}
			if !r.Ready.IsZero() {
				t.Fatalf("kube-apiserver %s became ready with the backend down: the gate's no-go was wrong", version)
			}
			if !r.Exited.IsZero() && strings.Contains(r.LastLog, "PostStartHook") {
				t.Logf("kube-apiserver %s exited %s after its start, as the gate said: %s", version, round(r.Exited.Sub(r.Started)), strings.TrimSpace(r.LastLog))
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kube-apiserver %s neither ready nor exited on a post-start hook: %+v", version, l.Runs())
		case <-time.After(time.Second):
		}
	}
}

// fixAdmission runs the fix the gate prints for admission, `breakglass
// audit --from-etcd --fix`, and applies its manifests through the API
// server (what kubectl apply -f fixed.yaml does: each object replaced at
// its current resourceVersion).
func fixAdmission(from, to string) func(t *testing.T, g *guided, gate result) {
	return func(t *testing.T, g *guided, gate result) {
		t.Helper()
		if !strings.Contains(gate.stdout, "audit --from-etcd --fix --from "+from+" --to "+to+" > fixed.yaml") {
			t.Fatalf("the gate's fix is not the audit's")
		}
		r := g.run("", append([]string{"audit", "--from-etcd", "--fix", "--from", from, "--to", to}, g.etcdFlags()...)...)
		if r.code != 0 {
			t.Fatalf("audit --fix: exit %d\n%s", r.code, r.stderr)
		}
		ctx := withTimeout(t, context.Background(), time.Minute)
		kube, err := g.l.Kube(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, err := replaceAll(ctx, kube, []byte(r.stdout))
		if err != nil || n == 0 {
			t.Fatalf("apply the fix: %d objects, %v\n%s", n, err, r.stdout)
		}
	}
}

// replaceAll PUTs every object of the manifests (Lists included) at its
// live resourceVersion, and returns how many.
func replaceAll(ctx context.Context, kube *KubeClient, data []byte) (int, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return n, err
		}
		items := []any{doc}
		if doc["kind"] == "List" {
			items, _ = doc["items"].([]any)
		}
		for _, it := range items {
			obj, _ := it.(map[string]any)
			md, _ := obj["metadata"].(map[string]any)
			kind, _ := obj["kind"].(string)
			plural := strings.ToLower(kind) + "s"
			if strings.HasSuffix(plural, "ys") {
				plural = strings.TrimSuffix(plural, "ys") + "ies"
			}
			path := fmt.Sprintf("/apis/%s/%s/%s", obj["apiVersion"], plural, md["name"])
			var live struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if err := kube.Do(ctx, "GET", path, nil, &live); err != nil {
				return n, fmt.Errorf("GET %s: %w", path, err)
			}
			md["resourceVersion"] = live.Metadata.ResourceVersion
			if err := kube.Do(ctx, "PUT", path, obj, nil); err != nil {
				return n, fmt.Errorf("PUT %s: %w", path, err)
			}
			n++
		}
	}
}

// fixFlags applies the talosctl patch the gate prints for each node, as
// talosctl patch does (configpatcher, then the node, no reboot), and waits
// for kube-apiserver to run the patched flags.
func fixFlags(t *testing.T, g *guided, gate result) {
	t.Helper()
	ctx := withTimeout(t, context.Background(), 3*time.Minute)
	patched := 0
	for _, line := range strings.Split(gate.stdout, "\n") {
		cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "fix: talosctl ")
		if !ok {
			continue
		}
		node := regexp.MustCompile(`-n (\S+) patch machineconfig --mode=no-reboot`).FindStringSubmatch(cmd)
		if node == nil {
			t.Fatalf("not a talosctl patch: %s", cmd)
		}
		var patches []string
		for _, p := range strings.Split(cmd, " -p '")[1:] {
			patches = append(patches, strings.TrimSuffix(p, "'"))
		}
		cfg, err := g.tc.ReadMachineConfig(ctx, node[1])
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := configpatcher.LoadPatches(patches)
		if err != nil {
			t.Fatal(err)
		}
		out, err := configpatcher.Apply(configpatcher.WithBytes(cfg.Bytes), loaded)
		if err != nil {
			t.Fatal(err)
		}
		b, err := out.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.tc.Apply(ctx, node[1], talos.ApplyRequest{Config: b, Mode: talos.NoReboot}); err != nil {
			t.Fatal(err)
		}
		patched++
	}
	if patched != len(g.l.Nodes()) {
		t.Fatalf("%d talosctl patches for %d nodes", patched, len(g.l.Nodes()))
	}
	if err := g.l.WaitReady(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// fixNoSpace runs the recovery the gate names: breakglass recover (the
// diagnosis picks runbook etcd-nospace on a limping kube-apiserver too).
func fixNoSpace(t *testing.T, g *guided, gate result) {
	t.Helper()
	if !strings.Contains(gate.stdout, "recover (runbook etcd-nospace") {
		t.Fatalf("the gate's fix is not the recovery")
	}
	r := g.run("", append([]string{"recover", "--yes"}, g.etcdFlags()...)...)
	t.Logf("recover --yes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("recover: exit %d", r.code)
	}
}

// labBuilt is breakglass-lab built beside the tests' breakglass, where
// `breakglass upgrade-check --replay` finds it (as `breakglass lab` does).
var labBuilt struct {
	once sync.Once
	err  error
}

func buildLabBeside(t *testing.T, breakglass string) {
	t.Helper()
	labBuilt.once.Do(func() {
		cmd := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(breakglass), "breakglass-lab"), "./cmd/breakglass-lab")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			labBuilt.err = fmt.Errorf("go build ./cmd/breakglass-lab: %v\n%s", err, out)
		}
	})
	if labBuilt.err != nil {
		t.Fatal(labBuilt.err)
	}
}

// --replay: the upgrade replayed by breakglass-lab (handed over by the
// on-call binary) on this cluster's admission objects, the real v1.34.4
// with every webhook backend down: a no-go before the fix, a go after it.
func TestUpgradeGateReplay(t *testing.T) {
	t.Parallel()
	needBinaries(t, "v1.33.13")
	b, _ := BeforeUpgradeOf(ScenarioKyvernoServiceCIDR)
	l := startLabWith(t, Options{Nodes: 1, Version: b.Runs})
	if err := RunBeforeUpgrade(context.Background(), l, ScenarioKyvernoServiceCIDR, NewTimeline(testWriter{t})); err != nil {
		t.Fatal(err)
	}
	g := guidedOn(t, l)
	buildLabBeside(t, g.bin)
	gate := func(when string) result {
		t.Helper()
		start := time.Now()
		r := g.run("", append([]string{"upgrade-check", "--to", b.To, "--replay"}, g.etcdFlags()...)...)
		t.Logf("upgrade-check --replay %s: exit %d in %s\n%s%s", when, r.code, round(time.Since(start)), r.stdout, r.stderr)
		return r
	}
	r := gate("before the fix")
	replayNoGo := regexp.MustCompile(`(?m)^no-go +replay +kube-apiserver v1.34.4 never became ready on the replay`)
	if r.code != 40 || !replayNoGo.MatchString(r.stdout) {
		t.Fatalf("want the replay's no-go, exit 40; got exit %d", r.code)
	}
	fixAdmission("1.33", "1.34")(t, g, r)
	r = gate("after the fix")
	if r.code != 0 || !regexp.MustCompile(`(?m)^go +replay +kube-apiserver v1.34.4 was ready in \S+ with every webhook backend down`).MatchString(r.stdout) {
		t.Fatalf("want the replay's go, exit 0; got exit %d", r.code)
	}
}

// A 3-member etcd with a member down keeps quorum with no margin: the
// gate's no-go (issue 31), with every Talos API still answering.
func TestUpgradeGateMemberDown(t *testing.T) {
	t.Parallel()
	needBinaries(t, "v1.33.13")
	b, _ := BeforeUpgradeOf("")
	l := startLabWith(t, Options{Nodes: 3, Version: b.Runs})
	if err := RunBeforeUpgrade(context.Background(), l, "", NewTimeline(testWriter{t})); err != nil {
		t.Fatal(err)
	}
	g := guidedOn(t, l)
	// The third node's member loses its data and stops; its node and
	// Talos API go on.
	if err := l.DestroyEtcdData(l.Nodes()[2]); err != nil {
		t.Fatal(err)
	}
	r := g.run("", append([]string{"upgrade-check", "--to", b.To}, g.etcdFlags()...)...)
	t.Logf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	line := regexp.MustCompile(`(?m)^no-go +etcd-members +no margin: 2 of 3 control planes have a healthy voting member, and etcd needs 2: one more failure during the upgrade stops it \(member \S+ \(cp-3\) on \S+ is down\)`)
	if r.code != 40 || !line.MatchString(r.stdout) {
		t.Fatalf("want exit 40 naming the member down; got exit %d", r.code)
	}
}

// fixCandidate applies the encryption check's fix to the candidate machine
// config: the key the Secrets are stored under (the running config's
// first: secretbox key2, or aescbc key1 where the provider is dropped, its
// secret from there) added for reading only, after the key the candidate
// writes with.
func fixCandidate(t *testing.T, g *guided, gate result) {
	t.Helper()
	ctx := withTimeout(t, context.Background(), time.Minute)
	running, err := g.tc.ReadMachineConfig(ctx, g.l.Nodes()[0])
	if err != nil {
		t.Fatal(err)
	}
	now, _, err := encryption.FromMachineConfig(running.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	writer := now.Resources[0].Providers[0] // the legacy rendering writes with its first provider's key
	stored := writer.Keys[0]
	if !regexp.MustCompile(`(?m)^ +fix: .*(for reading only.*` + string(writer.Type) + `.*key ` + stored.Name + `|` + string(writer.Type) + `.*key ` + stored.Name + `.*for reading only)`).MatchString(gate.stdout) {
		t.Fatalf("the gate's fix is not %s key %s added back", writer.Type, stored.Name)
	}
	candidate, err := os.ReadFile(CandidateConfig(g.l))
	if err != nil {
		t.Fatal(err)
	}
	fixed, changed, err := encryption.AddReadKey(candidate, "secrets", writer.Type, stored)
	if err != nil || !changed {
		t.Fatalf("add %s key %s to the candidate: changed %v, %v", writer.Type, stored.Name, changed, err)
	}
	if err := os.WriteFile(CandidateConfig(g.l), fixed, 0o600); err != nil {
		t.Fatal(err)
	}
}

// applyCandidate gives every node the candidate's encryption configuration
// (its KubeEtcdEncryptionConfig document in place of the legacy secrets, as
// the scenario regenerates each node's own config), then waits until every
// kube-apiserver is ready and lists every Secret: the gate's go is true.
func applyCandidate(t *testing.T, l *Lab) {
	t.Helper()
	ctx := withTimeout(t, context.Background(), 4*time.Minute)
	candidate, err := os.ReadFile(CandidateConfig(l))
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := encryption.FromMachineConfig(candidate)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := c.Document()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := applyRegenerated(ctx, l, "", func(cfg []byte) ([]byte, error) {
		out := legacyAESCBC.ReplaceAll(legacySecretbox.ReplaceAll(cfg, nil), nil)
		return append(append([]byte(strings.TrimRight(string(out), "\n")), "\n---\n"...), doc...), nil
	}); err != nil {
		t.Fatal(err)
	}
	// The kube-apiserver started after the apply, not the one still
	// running on the old configuration until the kubelet's next poll.
	if err := l.waitReadyRuns(ctx, 3*time.Minute, func(r ContainerRun) (bool, error) {
		if !r.Exited.IsZero() && r.Ready.IsZero() && r.Requested.After(start) {
			return false, fmt.Errorf("node %s: kube-apiserver exited on the candidate's configuration: %s", r.Node, strings.TrimSpace(r.LastLog))
		}
		return r.Requested.After(start), nil
	}); err != nil {
		t.Fatalf("the candidate the gate let through is not ready: %v", err)
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []json.RawMessage }
	if err := kube.Do(ctx, "GET", "/api/v1/namespaces/default/secrets", nil, &list); err != nil || len(list.Items) < EncryptionSecrets {
		t.Fatalf("Secrets after the candidate: %d listed, %v", len(list.Items), err)
	}
	t.Logf("candidate applied: ready and %d Secrets listed %s after the apply", len(list.Items), round(time.Since(start)))
}
