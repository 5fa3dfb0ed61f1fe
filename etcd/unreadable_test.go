package etcd_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
)

// Values no key reads, anywhere under the prefix, are backed up byte for
// byte, removed in guarded transactions of at most n keys, and restored
// byte for byte; a value that is not there, or not encrypted, is refused.
func TestUnreadableBackupRemoveRestore(t *testing.T) {
	cl := newCluster(t)
	vals := map[string][]byte{
		"/registry/secrets/default/sh.helm.release.v1.web.v3": []byte("k8s:enc:aescbc:v1:key1:\x01\x02garbage"),
		"/registry/secrets/kube-system/token-x":               []byte("k8s:enc:secretbox:v1:key2:\x03\x04"),
		"/registry/example.com/widgets/default/w1":            []byte("k8s:enc:secretbox:v1:key2:\x05"),
	}
	var keys []string
	for k, v := range vals {
		cl.put(t, k, v)
		keys = append(keys, k)
	}
	cl.put(t, "/registry/secrets/default/plain", []byte("k8s\x00plain"))

	for _, bad := range [][]string{{"/registry/secrets/default/plain"}, {"/registry/secrets/default/gone"}, {"/registry/secrets"}, {"/other/secrets/a/b"}, {"/registry/secrets/../x"}} {
		if _, err := cl.c.PlanUnreadable(ctx, bad); err == nil {
			t.Errorf("%v: planned", bad)
		}
	}
	plan, err := cl.c.PlanUnreadable(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	parts := plan.Split(2)
	if len(parts) != 2 || len(parts[0].Objects) != 2 || len(parts[1].Objects) != 1 {
		t.Fatalf("split: %d parts", len(parts))
	}
	dir := t.TempDir()
	var files []string
	for i, p := range parts {
		path := filepath.Join(dir, "b"+string(rune('0'+i))+".json")
		if _, err := cl.c.Execute(ctx, p, etcd.RealWriter(cl.c), etcd.ExecuteOptions{BackupPath: path, ToolVersion: "v"}); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	for k := range vals {
		if _, ok := cl.get(t, k); ok {
			t.Errorf("%s still there", k)
		}
	}
	if _, ok := cl.get(t, "/registry/secrets/default/plain"); !ok {
		t.Error("a readable value was removed")
	}
	for _, f := range files {
		if _, err := cl.c.RestoreFile(ctx, f, etcd.RealWriter(cl.c), etcd.RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range vals {
		if got, ok := cl.get(t, k); !ok || string(got) != string(v) {
			t.Errorf("%s restored as %q", k, got)
		}
	}

	// An edited file cannot use the mark to write a plain value, or a key
	// outside the prefix.
	data, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(k map[string]any){
		"plain value": func(k map[string]any) {
			k["value"] = base64.StdEncoding.EncodeToString([]byte("k8s\x00plain"))
			k["sha256"] = sha256Hex([]byte("k8s\x00plain"))
		},
		"outside the prefix": func(k map[string]any) { k["key"], k["name"] = "/elsewhere/x/y", "x/y" },
		"name not the path":  func(k map[string]any) { k["name"] = "secrets/other" },
		"unmarked":           func(k map[string]any) { delete(k, "unreadable") },
		"no provider wrote it": func(k map[string]any) {
			k["value"] = base64.StdEncoding.EncodeToString([]byte("k8s:enc:\xff"))
			k["sha256"] = sha256Hex([]byte("k8s:enc:\xff"))
		},
		"a stored name": func(k map[string]any) { k["storedName"] = "whatever" },
	} {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		edit(m["keys"].([]any)[0].(map[string]any))
		out, _ := json.Marshal(m)
		path := filepath.Join(t.TempDir(), "b.json")
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.ReadBackup(path); !errors.Is(err, etcd.ErrMalformedBackup) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
