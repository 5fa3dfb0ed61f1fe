package diagnose

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos"
)

// configs reads machine configs from a map.
type configs map[string][]byte

func (c configs) ReadMachineConfig(_ context.Context, node string) (talos.MachineConfig, error) {
	b, ok := c[node]
	if !ok {
		return talos.MachineConfig{}, os.ErrNotExist
	}
	return talos.MachineConfig{Bytes: b}, nil
}

// stored groups fixed values as etcd.Client.StoredSplit does.
type stored map[string][]byte // etcd key -> value

func (s stored) StoredSplit(_ context.Context, resource string, split func(string, []byte) string) ([]etcd.StoredGroup, error) {
	var out []etcd.StoredGroup
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !strings.HasPrefix(k, "/registry/"+resource+"/") {
			continue
		}
		st, class := encryption.Classify(s[k]), split(k, s[k])
		i := slices.IndexFunc(out, func(g etcd.StoredGroup) bool { return g.Stored == st && g.Class == class })
		if i < 0 {
			out = append(out, etcd.StoredGroup{Resource: resource, Stored: st, Class: class, What: st.String(), Example: k, Sample: s[k], SampleKey: k})
			i = len(out) - 1
		}
		out[i].Count++
		out[i].Keys = append(out[i].Keys, k)
	}
	return out, nil
}

// machineConfig is a control plane's config whose encryption configuration
// is c, as Talos 1.14's document.
func machineConfig(t *testing.T, c encryption.Config) []byte {
	t.Helper()
	doc, err := c.Document()
	if err != nil {
		t.Fatal(err)
	}
	return []byte("version: v1alpha1\nmachine:\n  type: controlplane\n---\n" + string(doc))
}

func recordedShapes(t *testing.T) []encryption.Shape {
	t.Helper()
	b, err := os.ReadFile("../../internal/encryption/testdata/recorded/v1.34.4.json")
	if err != nil {
		t.Fatal(err)
	}
	var r encryption.Recording
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Shapes
}

var notReadyInformers = func() *Readyz { return &Readyz{FailingChecks: []string{"informer-sync"}} }

// Each shape the real v1.34.4 binary was recorded in: its log lines, the
// value it stored, and the configuration it restarted with, on three
// nodes: diagnosed encryption-drift, naming what is stored (provider and
// key) and why it does not decrypt, with no key material in the report.
func TestAnalyzeEncryptionRecorded(t *testing.T) {
	nodes := []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	for _, sh := range recordedShapes(t) {
		t.Run(sh.Name, func(t *testing.T) {
			after := encryption.Specs(sh.After)
			cfgs := configs{}
			ev := &Evidence{HealthAsked: true}
			for _, n := range nodes {
				cfgs[n] = machineConfig(t, after)
				ev.Nodes = append(ev.Nodes, node(n, sh.Lines, runningPod, notReadyInformers()))
			}
			ev.Encryption = GatherEncryption(context.Background(), cfgs, nodes, stored{sh.StoredKey: sh.StoredValue})
			r := Analyze(ev, Options{})
			if r.Verdict != EncryptionDrift || r.Verdict.Category() != failure.DiagnoseEncryption || r.Runbook != EncryptionRunbook {
				t.Fatalf("verdict %s, runbook %s: %s", r.Verdict, r.Runbook, r.Summary)
			}
			st := encryption.Classify(sh.StoredValue)
			want := "identity"
			if st.Form == encryption.Encrypted {
				want = string(st.Provider) + ":" + st.Key
			}
			if got := ev.Encryption.Missing(); !slices.Equal(got, []string{want}) {
				t.Errorf("missing %q, want %s", got, want)
			}
			if len(ev.Encryption.Unreadable) != 3 || ev.Encryption.Unreadable[0].Cause != string(sh.Cause) {
				t.Errorf("unreadable %+v, want cause %s on 3 nodes", ev.Encryption.Unreadable, sh.Cause)
			}
			if !strings.Contains(r.Summary, st.String()) || !strings.Contains(r.Summary, sh.StoredKey) {
				t.Errorf("summary does not name %s at %s: %s", st, sh.StoredKey, r.Summary)
			}
			var tb strings.Builder
			_ = WriteText(&tb, r)
			text := tb.String() + Brief(r) + EvidenceText(r)
			j, _ := json.Marshal(r)
			for _, spec := range append(sh.Before, sh.After...) {
				for _, k := range spec.Keys {
					if s := encryption.RecordingKey(k.Label).Reveal(); strings.Contains(text, s) || strings.Contains(string(j), s) {
						t.Errorf("key material of %s in the report", k.Label)
					}
				}
			}
		})
	}
}

// The same key name with another secret on one control plane: names agree,
// the trial decryption does not; the disagreeing control plane is named,
// and the others are not blamed.
func TestAnalyzeEncryptionOneNodeRegenerated(t *testing.T) {
	var sh encryption.Shape
	for _, s := range recordedShapes(t) {
		if s.Name == "secret-regenerated" {
			sh = s
		}
	}
	good, bad := encryption.Specs(sh.Before), encryption.Specs(sh.After)
	cfgs := configs{"127.0.0.11": machineConfig(t, good), "127.0.0.12": machineConfig(t, bad), "127.0.0.13": machineConfig(t, good)}
	ev := &Evidence{HealthAsked: true, Nodes: []NodeEvidence{
		node("127.0.0.11", nil, readyPod, readyzOK()), node("127.0.0.12", sh.Lines, runningPod, notReadyInformers()), node("127.0.0.13", nil, readyPod, readyzOK())}}
	ev.Encryption = GatherEncryption(context.Background(), cfgs, []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}, stored{sh.StoredKey: sh.StoredValue})
	r := Analyze(ev, Options{})
	if r.Verdict != EncryptionDrift {
		t.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
	if len(ev.Encryption.Unreadable) != 1 || ev.Encryption.Unreadable[0].Node != "127.0.0.12" || ev.Encryption.Unreadable[0].Cause != string(encryption.CauseWrongSecret) {
		t.Errorf("%+v", ev.Encryption.Unreadable)
	}
	if d := ev.Encryption.Differ; !strings.Contains(d, "127.0.0.11, 127.0.0.13 render") || !strings.Contains(d, "127.0.0.12 render") || !strings.Contains(d, "same names with other secrets") {
		t.Errorf("differ: %q", d)
	}
}

// Every kube-apiserver ready and every value read: no drift.
func TestAnalyzeEncryptionHealthy(t *testing.T) {
	sh := recordedShapes(t)[0]
	before := encryption.Specs(sh.Before)
	cfgs := configs{"127.0.0.11": machineConfig(t, before)}
	ev := &Evidence{HealthAsked: true, Nodes: []NodeEvidence{node("127.0.0.11", nil, runningPod, stuck())}}
	ev.Encryption = GatherEncryption(context.Background(), cfgs, []string{"127.0.0.11"}, stored{sh.StoredKey: sh.StoredValue})
	if len(ev.Encryption.Unreadable) != 0 {
		t.Fatalf("%+v", ev.Encryption.Unreadable)
	}
	if r := Analyze(ev, Options{}); r.Verdict == EncryptionDrift {
		t.Errorf("drift where the configuration reads everything: %s", r.Summary)
	}
}

// A prefix whose values were written with two secrets of one name (the
// secret regenerated, some values written again since): the value etcd
// lists first decrypts, and those of the old secret are still named
// unreadable, each node's with their own count.
func TestAnalyzeEncryptionMixedSecretsUnderOnePrefix(t *testing.T) {
	var sh encryption.Shape
	for _, s := range recordedShapes(t) {
		if s.Name == "secret-regenerated" {
			sh = s
		}
	}
	regen := encryption.Specs(sh.After)
	cfgs := configs{"127.0.0.11": machineConfig(t, regen), "127.0.0.12": machineConfig(t, regen)}
	values := stored{sh.StoredKey: sh.StoredValue} // written with the old secret
	rewritten := sealSecretbox(t, "key2", regen.Resources[0].Providers[0].Keys[0].Secret, []byte("k8s\x00rewritten"))
	values["/registry/secrets/default/a0"] = rewritten // listed first: the sample of the old code
	values["/registry/secrets/default/a1"] = rewritten
	ee := GatherEncryption(context.Background(), cfgs, []string{"127.0.0.11", "127.0.0.12"}, values)
	if len(ee.Unreadable) != 2 {
		t.Fatalf("want the old secret's value unreadable on both nodes, got %+v", ee.Unreadable)
	}
	for _, u := range ee.Unreadable {
		if u.Count != 1 || u.Example != sh.StoredKey || u.Cause != string(encryption.CauseWrongSecret) {
			t.Errorf("%+v", u)
		}
	}
}

// sealSecretbox writes plain as kube-apiserver's secretbox provider does.
func sealSecretbox(t *testing.T, name string, s encryption.Secret, plain []byte) []byte {
	t.Helper()
	out, err := encryption.Seal(encryption.Secretbox, encryption.Key{Name: name, Secret: s}, "", plain)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
