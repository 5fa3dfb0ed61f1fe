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

// Encryption-at-rest drift on three lab nodes with the real kube-apiserver
// v1.34.4, Secrets written under Talos 1.13's secretbox key2, then:
//   - encryption-key-renamed: every config regenerated as Talos
//     1.14.0-beta.0's generator did, naming the same secret key1
//     (siderolabs/talos#13885);
//   - encryption-secret-regenerated: all configs but the last regenerated
//     from a new secrets bundle, key2 holding another secret;
//   - encryption-provider-dropped: Secrets written instead under aescbc
//     key1 (a cluster created before Talos 1.3), then all configs but the
//     last regenerated with secretbox key2 and identity, the aescbc
//     provider gone.
//
// kube-apiserver is never ready where the config changed. diagnose names it
// (exit 33: the stored key unreadable there, kube-apiserver's own words);
// the gate is a no-go naming it; `recover --yes` with no flag adds the key
// that reads the stored key back, read-only, from another control plane's
// config;
// every Secret is listed through the API on every node afterwards; the gate
// is a go; no key material is printed or left in the state directory;
// revert refuses while Secrets are stored under that key.
func TestRecoverEncryptionAsTyped(t *testing.T) {
	for _, tc := range []struct {
		scenario   string
		stored     string // the provider and key the Secrets are stored under
		unreadable int    // nodes that read nothing under it
		cause      encryption.Cause
		words      string
		after      string // the first node's configuration afterwards, by names
		// gate is the encryption check's line afterwards: a go, or for the
		// regenerated bundle a warn: the last control plane still writes
		// with the old secret, which the others now read, but it cannot read
		// what they write (the operator renders one configuration everywhere).
		gate string
	}{
		{ScenarioEncryptionKeyRenamed, "secretbox:key2", 3, encryption.CauseKeyMissing, KeyRenamedWords, "secrets: secretbox (key1, key2)",
			`(?m)^go +encryption +every stored value decrypts`},
		{ScenarioEncryptionSecretRegenerated, "secretbox:key2", 2, encryption.CauseWrongSecret, SecretRegeneratedWords, "secrets: secretbox (key2), secretbox (key2), identity",
			`(?m)^warn +encryption +the control planes render different encryption configurations`},
		// The last control plane still writes with aescbc key1, which the
		// others now read, but it cannot read what they write (secretbox).
		{ScenarioEncryptionProviderDropped, "aescbc:key1", 2, encryption.CauseNoProvider, ProviderDroppedWords, "secrets: secretbox (key2), aescbc (key1), identity",
			`(?m)^warn +encryption +the control planes render different encryption configurations`},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			l := startLabWith(t, Options{Nodes: 3}.ForScenario(tc.scenario)) // as lab up --scenario starts it
			if _, err := RunScenario(context.Background(), l, tc.scenario, NewTimeline(testWriter{t})); err != nil {
				t.Fatalf("scenario: %v", err)
			}
			provider, key, _ := strings.Cut(tc.stored, ":")
			recoverEncryption(t, l, provider, key, tc.unreadable, tc.cause, tc.words, tc.after, tc.gate)
		})
	}
}

func recoverEncryption(t *testing.T, l *Lab, provider, key string, unreadable int, cause encryption.Cause, words, after, gateAfter string) {
	g := guidedOn(t, l)
	ctx := context.Background()
	var secrets []string // every secret the nodes' documents hold
	for _, ip := range l.Nodes() {
		if cfg, err := g.tc.ReadMachineConfig(ctx, ip); err == nil {
			c, _, _ := encryption.FromMachineConfig(cfg.Bytes)
			for _, cand := range c.Candidates(ip) {
				secrets = append(secrets, cand.Secret.Reveal())
			}
		}
	}
	if len(secrets) == 0 {
		t.Fatal("no secret in the nodes' documents")
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
	if d.code != 33 || rep.Verdict != "encryption-drift" || len(rep.Evidence.Encryption.Unreadable) != unreadable {
		t.Fatalf("diagnose: exit %d, %+v\n%s", d.code, rep, d.stderr)
	}
	for _, u := range rep.Evidence.Encryption.Unreadable {
		if u.Provider != provider || u.Key != key || u.Cause != string(cause) {
			t.Errorf("unreadable %+v", u)
		}
	}
	// kube-apiserver's own words (the log of the container running now,
	// though the pod status still names the replaced one), and the cause
	// read from etcd
	for _, w := range []string{words, fmt.Sprintf("cannot read %d secrets stored as %s key %s", EncryptionSecrets, provider, key)} {
		if !strings.Contains(rep.Summary, w) {
			t.Errorf("the summary does not say %q: %s", w, rep.Summary)
		}
	}
	text := g.run("", append([]string{"diagnose"}, g.etcdFlags()...)...)
	t.Logf("diagnose (text, %d lines):\n%s%s", strings.Count(text.stdout+text.stderr, "\n"), text.stdout, text.stderr)

	// The gate before the next upgrade sees the same death, and names it.
	gate := g.run("", append([]string{"upgrade-check", "--to", "1.35"}, g.etcdFlags()...)...)
	if gate.code != 40 || !regexp.MustCompile(`(?m)^no-go +encryption +.*`+provider+` key `+key).MatchString(gate.stdout) {
		t.Errorf("upgrade-check before the recovery: exit %d, want 40 and encryption's no-go naming %s key %s\n%s", gate.code, provider, key, gate.stdout)
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
	if cfg, err := g.tc.ReadMachineConfig(ctx, l.Nodes()[0]); err != nil {
		t.Fatal(err)
	} else if c, _, _ := encryption.FromMachineConfig(cfg.Bytes); c.String() != after {
		t.Errorf("node %s after the recovery: %s, want %s", l.Nodes()[0], c, after)
	}

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
	if !regexp.MustCompile(gateAfter).MatchString(gate.stdout) || strings.Contains(gate.stdout, "\nno-go") {
		t.Errorf("upgrade-check after the recovery: exit %d, want no no-go and %s\n%s", gate.code, gateAfter, gate.stdout)
	}
	for _, out := range []string{gate.stdout, gate.stderr, d.stdout, d.stderr, text.stdout, text.stderr, r.stdout, r.stderr, stateText(t, g.stateDir)} {
		for _, secret := range secrets {
			if strings.Contains(out, secret) {
				t.Error("key material in breakglass's output or state directory")
			}
		}
	}

	id := g.newIncident(incidents)
	rv := g.run("", append([]string{"revert", "--yes", id}, g.etcdFlags()...)...)
	if rv.code == 0 || !regexp.MustCompile(provider+` key `+key+` (\(the one added beside [^)]*\) )?stays`).MatchString(rv.stdout+rv.stderr) {
		t.Errorf("revert with Secrets under %s key %s: exit %d\n%s\n%s", provider, key, rv.code, rv.stdout, rv.stderr)
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
