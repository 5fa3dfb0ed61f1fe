package main

import (
	"encoding/json"
	"runtime"
	"testing"
)

// version prints what the release build stamps in (make build, make dist),
// and the Go toolchain and platform, as text and as one JSON document.
func TestVersionStampedAsJSON(t *testing.T) {
	saved := [3]string{version, commit, buildDate}
	t.Cleanup(func() { version, commit, buildDate = saved[0], saved[1], saved[2] })
	version, commit, buildDate = "v1.4.0", "0123456789abcdef0123456789abcdef01234567", "2026-12-02T05:10:42Z"

	code, stdout, stderr := runInProcess(t, "version", "-o", "json")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, stdout)
	}
	want := map[string]string{"version": version, "commit": commit, "buildDate": buildDate,
		"goVersion": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}

	code, stdout, _ = runInProcess(t, "version")
	if text := "breakglass v1.4.0\n  commit:     " + commit + "\n  build date: 2026-12-02T05:10:42Z\n  go:         " + runtime.Version() + " " + want["platform"] + "\n"; code != 0 || stdout != text {
		t.Errorf("exit %d, text %q, want %q", code, stdout, text)
	}
}

// Unstamped (go test, go run, go build without the Makefile): dev, and
// unknown for what nothing recorded.
func TestVersionUnstamped(t *testing.T) {
	code, stdout, _ := runInProcess(t, "-o", "json", "version")
	var got map[string]string
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	if got["version"] != "dev" || got["commit"] != "unknown" || got["buildDate"] != "unknown" || got["goVersion"] != runtime.Version() {
		t.Errorf("unstamped: %v", got)
	}
}
