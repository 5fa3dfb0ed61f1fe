package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// Issue 21, weak inputs: a state directory or a runbook this user may not
// read or write is bad input (exit 2) with a hint, before anything is
// dialled or written. On main: exit 1 and the raw system error (journal
// show, runbook show), or a raw error once the run had begun.
//
// Permissions do not bind root, so as root the binary runs as nobody.
func TestPermissionDeniedIsBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil { // nobody must reach the binary and the files
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "breakglass")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// A state directory of someone else's: readable, not writable, and a
	// journal in it only its owner reads.
	state := filepath.Join(dir, "state")
	inc := filepath.Join(state, "incidents", "20260101-000000-aaaa")
	if err := os.MkdirAll(inc, 0o755); err != nil {
		t.Fatal(err)
	}
	runbook := filepath.Join(dir, "rb.yaml")
	for path, text := range map[string]string{filepath.Join(inc, "journal.jsonl"): journalText, runbook: runbookWith("plugins: [ValidatingAdmissionWebhook]")} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A directory anyone may write, for a state directory not made yet
	// (where it would be made is checked too).
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // whatever the umask
		t.Fatal(err)
	}
	asOther := func(cmd *exec.Cmd) {
		if os.Getuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			return
		}
		// Not root: take the permissions away instead.
		for _, p := range []string{filepath.Join(inc, "journal.jsonl"), runbook} {
			if err := os.Chmod(p, 0); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{state, filepath.Join(state, "incidents")} {
			if err := os.Chmod(p, 0o555); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		args      string
		msg, hint string
		state     string // default the state directory above
	}{
		{"journal show 20260101-000000-aaaa", `journal\.jsonl cannot be read: permission denied`, `run breakglass as the user who owns it`, ""},
		{"journal timeline 20260101-000000-aaaa", `cannot be read: permission denied`, `ls -l .*journal\.jsonl`, ""},
		{"runbook show " + runbook, `rb\.yaml: cannot be read: permission denied`, `make it readable to this user`, ""},
		{"recover --runbook " + runbook + " --yes", `rb\.yaml: cannot be read: permission denied`, `make it readable`, filepath.Join(open, "not-yet")},
		{"admission disable --yes", `state directory .*state cannot be used: permission denied`, `ls -ld .*state.*or give --state-dir a directory you can write`, ""},
		// Issue 29: a state directory not made yet, where this user cannot
		// make it: said before the run, not as a raw error when it opens
		// its incident.
		{"admission disable --yes", `state directory .*/not-yet cannot be created: permission denied`, `ls -ld .*or give --state-dir a directory you can write`, filepath.Join(dir, "not-yet")},
		{"etcd backup deadlock-webhook --etcd-endpoints https://127.0.0.1:1 --etcd-cacert " + runbook + " --etcd-cert " + runbook + " --etcd-key " + runbook,
			`state directory .*state cannot be used: permission denied`, `--state-dir`, ""},
	} {
		t.Run(tc.args, func(t *testing.T) {
			st := tc.state
			if st == "" {
				st = state
			}
			cmd := exec.Command(bin, append([]string{"--state-dir", st, "--talosconfig", filepath.Join(dir, "absent")}, strings.Fields(tc.args)...)...)
			cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
			asOther(cmd)
			out, err := cmd.CombinedOutput()
			code := cmd.ProcessState.ExitCode()
			if err != nil && code < 0 {
				t.Fatal(err)
			}
			if code != 2 || !regexp.MustCompile(tc.msg).Match(out) || !regexp.MustCompile(`hint: .*`+tc.hint).Match(out) {
				t.Errorf("exit %d, want 2 matching %q with a hint %q:\n%s", code, tc.msg, tc.hint, out)
			}
		})
	}
}
