package lab

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/talos"
)

// The aescbc key lost everywhere, on two lab nodes with the real
// kube-apiserver v1.34.4: encryption-provider-dropped, then the last
// control plane regenerated too, so no machine config holds the aescbc
// secret and no bundle is named. The plain recover stops at add-key,
// changes nothing and names --remove-unreadable; recover --yes
// --remove-unreadable backs up the Secrets no key reads (verified, each
// marked unreadable), removes them, and the real kube-apiserver becomes
// ready without a restart: a Secret is written and listed again.
func TestRecoverEncryptionLastResort(t *testing.T) {
	l := startLabWith(t, Options{Nodes: 2}.ForScenario(ScenarioEncryptionProviderDropped))
	ctx := context.Background()
	if _, err := RunScenario(ctx, l, ScenarioEncryptionProviderDropped, NewTimeline(testWriter{t})); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	g := guidedOn(t, l)
	first, last := l.Nodes()[0], l.Nodes()[len(l.Nodes())-1]
	cfg, err := g.tc.ReadMachineConfig(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := encryption.FromMachineConfig(cfg.Bytes)
	if err != nil || len(c.Candidates(first)) == 0 {
		t.Fatalf("the regenerated config: %v", err)
	}
	lastCfg, err := g.tc.ReadMachineConfig(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := DropAESCBCProvider(lastCfg.Bytes, c.Candidates(first)[0].Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.tc.Apply(ctx, last, talos.ApplyRequest{Config: dropped, Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
	if err := waitUnreadable(ctx, l, []string{last}, ProviderDroppedWords, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	drift := func() int {
		resp, err := l.kv.Get(ctx, "/registry/secrets/default/drift-", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.Count)
	}

	plain := g.run("", append([]string{"recover", "--yes"}, g.etcdFlags()...)...)
	if plain.code == 0 || !strings.Contains(plain.stdout+plain.stderr, "breakglass recover --remove-unreadable") || drift() != EncryptionSecrets {
		t.Fatalf("recover without --remove-unreadable: exit %d, %d Secrets left\n%s\n%s", plain.code, drift(), plain.stdout, plain.stderr)
	}

	incidents := g.incidents()
	start := time.Now()
	r := g.run("", append([]string{"recover", "--yes", "--remove-unreadable", "-o", "json"}, g.etcdFlags()...)...)
	t.Logf("recover --yes --remove-unreadable took %s (%d lines on the terminal):\n%s", time.Since(start).Round(time.Millisecond), strings.Count(r.stderr, "\n"), r.stderr)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
	res := decodeResult(t, r.stdout)
	outcomes := map[string]string{}
	for _, s := range res.Steps {
		outcomes[s.Name] = s.Outcome
	}
	if outcomes["add-key"] != "skipped" || outcomes["remove-lost"] != "ok" || outcomes["wait-apiserver"] != "ok" {
		t.Fatalf("steps %v", outcomes)
	}
	if n := drift(); n != 0 {
		t.Errorf("%d Secrets no key reads are still stored", n)
	}
	backups, _ := filepath.Glob(filepath.Join(g.stateDir, "incidents", g.newIncident(incidents), "backup-remove-lost*.json"))
	removed := 0
	for _, path := range backups {
		b, err := etcd.ReadBackup(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range b.Keys {
			if !k.Unreadable {
				t.Errorf("%s backed up unmarked", k.Key)
			}
			if strings.HasPrefix(k.Key, "/registry/secrets/default/drift-") {
				removed++
			}
		}
	}
	if removed != EncryptionSecrets {
		t.Errorf("the backups %v hold %d of the %d Secrets", backups, removed, EncryptionSecrets)
	}
	g.wantReady("after the last resort")

	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "written-again"}, "stringData": map[string]string{"password": "p"}}
	if err := kube.Do(ctx, "POST", "/api/v1/namespaces/default/secrets", s, nil); err != nil {
		t.Fatalf("write a Secret: %v", err)
	}
	for _, server := range l.APIServers() {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := kube.WithServer(server).Do(ctx, "GET", "/api/v1/namespaces/default/secrets", nil, &list); err != nil || len(list.Items) != 1 {
			t.Errorf("%s: %d Secrets listed: %v", server, len(list.Items), err)
		}
	}
}
