package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/startupwrites"
)

func readObserved(t *testing.T, name string) []ObservedRequest {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "observed", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []ObservedRequest
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o ObservedRequest
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// observedPair is the (from, to) a recording is checked against, from its
// name: upgrade-FROM-to-TO, restart-V (from == to) or fresh-V (an empty
// etcd: every once-per-cluster write happens, as when upgrading from 1.32).
func observedPair(t *testing.T, file string) (from, to string) {
	t.Helper()
	base := strings.TrimSuffix(file, ".jsonl")
	switch {
	case strings.HasPrefix(base, "upgrade-"):
		f, to, ok := strings.Cut(strings.TrimPrefix(base, "upgrade-"), "-to-")
		if ok {
			return f, to
		}
	case strings.HasPrefix(base, "restart-"):
		v := strings.TrimPrefix(base, "restart-")
		return v, v
	case strings.HasPrefix(base, "fresh-"):
		return "1.32", strings.TrimPrefix(base, "fresh-")
	}
	t.Fatalf("%s: name is not upgrade-FROM-to-TO, restart-V or fresh-V", file)
	return "", ""
}

func observedFiles(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("testdata", "observed", "*.jsonl"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no recordings: %v", err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// Every admission request a real kube-apiserver sent itself while starting
// is in the model for that (from, to), with the same identity, scope,
// options and labels.
func TestModelCoversObservedRequests(t *testing.T) {
	for _, file := range observedFiles(t) {
		from, to := observedPair(t, file)
		reqs, err := ModelledStartupRequests(from, to)
		if err != nil {
			t.Fatal(err)
		}
		obs := readObserved(t, file)
		if len(obs) == 0 {
			t.Fatalf("%s: empty", file)
		}
		for _, problem := range Uncovered(reqs, obs) {
			t.Errorf("%s: %s", file, problem)
		}
	}
}

// The hooks the upgrade's writes feed are the ones the lab saw failing
// (DESIGN.md), plus APF for its deletes; a restart of the same version
// writes nothing fatal.
func TestObservedFatalWrites(t *testing.T) {
	reqs, _ := ModelledStartupRequests("1.32", "1.34")
	hooks := func(ws []ObservedRequest) map[string]bool {
		h := map[string]bool{}
		for _, o := range ws {
			for _, m := range modelFor(reqs, o) {
				if m.Fatal {
					h[m.Hook] = true
				}
			}
		}
		return h
	}
	rec, ok := startupwrites.For(32, 34)
	if !ok {
		t.Fatal("1.32 -> 1.34 not recorded")
	}
	up := hooks(rec.Writes)
	for _, h := range []string{hookServiceCIDR, hookIPRepair, hookRBAC, hookAutoreg, hookAPF} {
		if !up[h] {
			t.Errorf("upgrade: no recorded write for %s", h)
		}
	}
	if h := hooks(readObserved(t, "restart-1.34.4.jsonl")); len(h) != 0 {
		t.Errorf("restart: fatal hooks %v", h)
	}
}
