package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/recovery"
)

// Talos 1.14.0-beta.0's renamed secretbox key (siderolabs/talos#13885) on
// three lab nodes with the real kube-apiserver: Secrets written under key2,
// the configs regenerated naming the same secret key1; kube-apiserver is
// never ready. diagnose names it (exit 33: secretbox key2 unreadable on
// every node, kube-apiserver's own words); `recover --yes` with no flag
// adds key2 back, read-only, from the nodes' own configs; every Secret is
// listed through the API afterwards; no key material is printed or left in
// the state directory; revert refuses while Secrets are stored under key2.
func TestRecoverEncryptionKeyRenamedAsTyped(t *testing.T) {
	l := startLabWith(t, Options{Nodes: 3}.ForScenario(ScenarioEncryptionKeyRenamed)) // as lab up --scenario starts it
	if _, err := RunScenario(context.Background(), l, ScenarioEncryptionKeyRenamed, NewTimeline(testWriter{t})); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	g := guidedOn(t, l)
	ctx := context.Background()
	secret := ""
	if cfg, err := g.tc.ReadMachineConfig(ctx, l.Nodes()[0]); err == nil {
		c, _, _ := encryption.FromMachineConfig(cfg.Bytes)
		secret = c.Resources[0].Providers[0].Keys[0].Secret.Reveal()
	}
	if secret == "" {
		t.Fatal("no secret in the node's document")
	}

	start := time.Now()
	d := g.run("", append([]string{"diagnose", "-o", "json"}, g.etcdFlags()...)...)
	t.Logf("diagnose took %s", time.Since(start).Round(time.Millisecond))
	var rep struct {
		Verdict  string `json:"verdict"`
		Summary  string `json:"summary"`
		Evidence struct {
			Encryption struct {
				Unreadable []struct{ Node, Provider, Key, Cause string }
			} `json:"encryption"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(d.stdout), &rep); err != nil {
		t.Fatalf("diagnose -o json: %v\n%s\n%s", err, d.stdout, d.stderr)
	}
	if d.code != 33 || rep.Verdict != "encryption-drift" || len(rep.Evidence.Encryption.Unreadable) != 3 {
		t.Fatalf("diagnose: exit %d, %+v\n%s", d.code, rep, d.stderr)
	}
	for _, u := range rep.Evidence.Encryption.Unreadable {
		if u.Provider != "secretbox" || u.Key != "key2" || u.Cause != string(encryption.CauseKeyMissing) {
			t.Errorf("unreadable %+v", u)
		}
	}
	if !strings.Contains(rep.Summary, KeyRenamedWords) {
		t.Errorf("the summary does not quote kube-apiserver: %s", rep.Summary)
	}
	text := g.run("", append([]string{"diagnose"}, g.etcdFlags()...)...)
	t.Logf("diagnose (text, %d lines):\n%s%s", strings.Count(text.stdout+text.stderr, "\n"), text.stdout, text.stderr)

	// The gate before the next upgrade sees the same death, and names it.
	gate := g.run("", append([]string{"upgrade-check", "--to", "1.35"}, g.etcdFlags()...)...)
	if gate.code != 40 || !regexp.MustCompile(`(?m)^no-go +encryption +.*secretbox key key2`).MatchString(gate.stdout) {
		t.Errorf("upgrade-check before the recovery: exit %d, want 40 and encryption's no-go naming secretbox key2\n%s", gate.code, gate.stdout)
	}

	incidents := g.incidents()
	start = time.Now()
	r := g.run("", append([]string{"recover", "--yes", "-o", "json"}, g.etcdFlags()...)...)
	took := time.Since(start)
	t.Logf("recover --yes took %s (%d lines on the terminal):\n%s", took.Round(time.Millisecond), strings.Count(r.stderr, "\n"), r.stderr)
	if r.code != 0 {
		t.Fatalf("recover --yes: exit %d\n%s", r.code, r.stdout)
	}
	res := decodeResult(t, r.stdout)
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, s.Name)
		if s.Outcome != recovery.OutcomeOK {
			t.Errorf("step %s: %s (%s)", s.Name, s.Outcome, s.Message)
		}
	}
	if res.Outcome != "completed" || !slices.Equal(steps, []string{"preflight", "diagnose", "add-key", "wait-apiserver"}) {
		t.Fatalf("outcome %s, steps %v", res.Outcome, steps)
	}
	g.wantReady("after recovery")

	// Every Secret, through the API, on every node.
	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, server := range l.APIServers() {
		var list struct {
			Items []struct {
				Metadata struct{ Name string } `json:"metadata"`
				Data     map[string]string     `json:"data"`
			} `json:"items"`
		}
		if err := kube.WithServer(server).Do(ctx, "GET", "/api/v1/namespaces/default/secrets", nil, &list); err != nil {
			t.Fatalf("%s: list Secrets: %v", server, err)
		}
		n := 0
		for _, it := range list.Items {
			if strings.HasPrefix(it.Metadata.Name, "drift-") && it.Data["password"] != "" {
				n++
			}
		}
		if n != EncryptionSecrets {
			t.Errorf("%s lists %d of the %d Secrets", server, n, EncryptionSecrets)
		}
	}
	gate = g.run("", append([]string{"upgrade-check", "--to", "1.35"}, g.etcdFlags()...)...)
	if !regexp.MustCompile(`(?m)^go +encryption +every stored value decrypts`).MatchString(gate.stdout) {
		t.Errorf("upgrade-check after the recovery: exit %d, want encryption's go\n%s", gate.code, gate.stdout)
	}
	for _, out := range []string{gate.stdout, gate.stderr, d.stdout, d.stderr, text.stdout, text.stderr, r.stdout, r.stderr, stateText(t, g.stateDir)} {
		if strings.Contains(out, secret) {
			t.Error("key material in breakglass's output or state directory")
		}
	}

	id := g.newIncident(incidents)
	rv := g.run("", append([]string{"revert", "--yes", id}, g.etcdFlags()...)...)
	if rv.code == 0 || !strings.Contains(rv.stdout+rv.stderr, "secretbox key key2 stays") {
		t.Errorf("revert with Secrets under key2: exit %d\n%s\n%s", rv.code, rv.stdout, rv.stderr)
	}
	g.wantReady("after the refused revert")
}

func stateText(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			if data, err := os.ReadFile(p); err == nil {
				fmt.Fprintf(&b, "%s\n", data)
			}
		}
		return nil
	})
	return b.String()
}
