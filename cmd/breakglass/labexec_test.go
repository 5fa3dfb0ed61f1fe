//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// fakeLab writes a breakglass-lab into a new directory and returns the
// directory: it prints its arguments, then exits 27, or on "wait" says
// "ready" and waits for SIGTERM or SIGINT, which it reports and exits 42.
func fakeLab(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
echo "args: $*"
echo "stderr line" >&2
case " $* " in *" wait "*)
	trap 'echo "got TERM"; exit 42' TERM
	trap 'echo "got INT"; exit 42' INT
	echo ready
	while :; do sleep 0.05; done
esac
exit 27
`
	if err := os.WriteFile(filepath.Join(dir, labBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runInProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"breakglass"}, args...), streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

// In-process (streams that are not the process's own), the lab runs as a
// child: arguments as typed (global flags anywhere, -o passed on), its
// output through, its exit code unchanged and nothing more printed.
func TestLabHandOverArguments(t *testing.T) {
	t.Setenv("PATH", fakeLab(t)+string(filepath.ListSeparator)+os.Getenv("PATH"))
	for _, tc := range []struct{ args, want string }{
		{"lab rehearse", "rehearse"},
		{"lab rehearse --nodes 3", "rehearse --nodes 3"},
		{"-o json lab rehearse --nodes 3", "--output json rehearse --nodes 3"},
		{"lab rehearse -o json --nodes=2", "--output json rehearse --nodes=2"},
		{"--yes -n 10.0.0.1 lab bench --nodes 1 --nodes 3", "bench --nodes 1 --nodes 3"},
		{"lab up --nodes 2 --scenario kyverno-servicecidr --dir /tmp/x", "up --nodes 2 --scenario kyverno-servicecidr --dir /tmp/x"},
		{"lab up --bogus", "up --bogus"},
		{"lab up --help", "up --help"},
		{"lab replay --from v1.32.13 --to v1.34.4 -f w.yaml --fix", "replay --from v1.32.13 --to v1.34.4 -f w.yaml --fix"},
		{"lab replay -f -", "replay -f -"},
		{"lab version", "version"}, // documented (docs/breakglass-lab.md); unknown to breakglass on main
		{"-o json lab version", "--output json version"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			code, stdout, stderr := runInProcess(t, strings.Fields(tc.args)...)
			if code != 27 || stdout != "args: "+tc.want+"\n" || stderr != "stderr line\n" {
				t.Errorf("exit %d\nstdout: %q\nstderr: %q\nwant exit 27, stdout %q", code, stdout, stderr, "args: "+tc.want+"\n")
			}
		})
	}
}

// Without breakglass-lab beside breakglass or on PATH: exit 28 and how to get it.
func TestLabMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, stdout, stderr := runInProcess(t, "lab", "rehearse")
	if code != int(failure.LabNoBinaries) || stdout != "" ||
		!strings.HasPrefix(stderr, "breakglass: the lab is its own binary, breakglass-lab, and it is not next to breakglass") ||
		!strings.Contains(stderr, "\nhint: from a checkout, build both into bin/: make build") ||
		!strings.Contains(stderr, "\nhint: or build it next to this breakglass: go build -o ") {
		t.Errorf("exit %d\nstdout: %q\nstderr:\n%s", code, stdout, stderr)
	}
}

// `breakglass lab` and `breakglass lab --help` answer without the lab.
func TestLabHelp(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, args := range [][]string{{"lab"}, {"lab", "--help"}} {
		code, stdout, _ := runInProcess(t, args...)
		for _, want := range []string{"breakglass-lab", "up ", "rehearse ", "bench ", "make build"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v: exit %d, no %q in:\n%s", args, code, want, stdout)
			}
		}
	}
}

// The child gets the signals breakglass gets and decides; its exit code is
// breakglass's.
func TestLabChildSignals(t *testing.T) {
	path := filepath.Join(fakeLab(t), labBinary)
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Interrupt} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var errOut bytes.Buffer
		sigs := make(chan os.Signal, 1)
		done := make(chan error, 1)
		go func() {
			done <- runLabChild(streams{In: strings.NewReader(""), Out: pw, Err: &errOut}, path, []string{labArgv0, "wait"}, sigs)
			pw.Close()
		}()
		lines := bufio.NewScanner(pr)
		waitFor(t, lines, "ready")
		sigs <- sig
		waitFor(t, lines, "got ")
		err = <-done
		var exited labExited
		if !errors.As(err, &exited) || exited != 42 {
			t.Errorf("%v: %v, want exit 42", sig, err)
		}
		pr.Close()
	}
}

func waitFor(t *testing.T, lines *bufio.Scanner, prefix string) {
	t.Helper()
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), prefix) {
			return
		}
	}
	t.Fatalf("no line %q from the lab", prefix)
}

// As a process (the breakglass that testscript puts on PATH), breakglass
// execs the lab: the same pid, so a signal sent to breakglass reaches the
// lab once, and the lab's exit status is breakglass's.
func TestLabExec(t *testing.T) {
	bg, err := exec.LookPath("breakglass")
	if err != nil {
		t.Skip("no breakglass on PATH (testscript sets it up in TestMain)")
	}
	path := fakeLab(t) + string(filepath.ListSeparator) + "/usr/bin:/bin"

	cmd := exec.Command(bg, "-o", "json", "lab", "rehearse", "--nodes", "3")
	cmd.Env = append(os.Environ(), "PATH="+path)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 27 || string(out) != "args: --output json rehearse --nodes 3\n" {
		t.Errorf("%v, stdout %q; want exit 27", err, out)
	}

	cmd = exec.Command(bg, "lab", "up", "wait")
	cmd.Env = append(os.Environ(), "PATH="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	waitFor(t, lines, "ready")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, lines, "got TERM")
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the lab did not exit after SIGTERM")
	}
	if !errors.As(err, &exit) || exit.ExitCode() != 42 {
		t.Errorf("%v; want exit 42", err)
	}

	cmd = exec.Command(bg, "lab", "bench")
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != int(failure.LabNoBinaries) {
		t.Errorf("without breakglass-lab: %v; want exit %d", err, failure.LabNoBinaries)
	}
}
