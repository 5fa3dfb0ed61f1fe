package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// silentNode accepts TCP connections and never answers; accepted receives
// one value per connection, the moment a command is surely connecting.
func silentNode(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 64)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), ch
}

// notifyWriter is a stream that says when its text first contains want.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newNotifyWriter(want string) *notifyWriter {
	return &notifyWriter{want: want, seen: make(chan struct{})}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// interruptInProcess runs breakglass as main does (its own signal
// handling), waits until ready says the command is where the test wants
// it, then delivers sig to this process, and returns the exit code.
func interruptInProcess(t *testing.T, args []string, s streams, ready <-chan struct{}, sig syscall.Signal) int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- runInterruptible(append([]string{"breakglass"}, args...), s) }()
	select {
	case <-ready:
	case code := <-done:
		t.Fatalf("ended (exit %d) before it could be interrupted", code)
	case <-time.After(time.Minute):
		t.Fatal("never got where it is interrupted")
	}
	if err := syscall.Kill(os.Getpid(), sig); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		return code
	case <-time.After(time.Minute):
		t.Fatal("did not stop after the signal")
	}
	return 0
}

// SIGINT or SIGTERM at any moment exits 8 and says interrupted: while
// connecting (apiserver wait, recover: which then opens no incident), and
// at a confirmation (the journal says interrupted, by what).
func TestInterruptedExits8(t *testing.T) {
	c, talosconfig := oneNode(t)
	node := c.Nodes[0].IP

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]
		t.Run("connecting/"+name, func(t *testing.T) {
			for _, cmd := range [][]string{{"apiserver", "wait", "--timeout", "10m"}, {"recover", "--yes"}, {"admission", "status"}, {"diagnose"}} {
				state := t.TempDir()
				silent, accepted := silentNode(t) // its own: no connection left from the last command
				errOut := newNotifyWriter("\x00never")
				args := append([]string{"--talosconfig", talosconfig, "--state-dir", state, "-e", silent, "-n", node}, cmd...)
				code := interruptInProcess(t, args, streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: errOut}, accepted, sig)
				if code != 8 || !strings.Contains(errOut.String(), "interrupted by "+name) {
					t.Errorf("%v: exit %d, want 8 saying interrupted:\n%s", cmd, code, errOut)
				}
				if entries, _ := os.ReadDir(filepath.Join(state, "incidents")); len(entries) != 0 {
					t.Errorf("%v: an incident was opened after the signal", cmd)
				}
				// A run that opened no incident points at no journal: it
				// would show an older, unrelated one (issue 21, case 10).
				if strings.Contains(errOut.String(), "in the journal") {
					t.Errorf("%v: points at a journal, but it opened no incident:\n%s", cmd, errOut)
				}
			}
		})
		t.Run("confirmation/"+name, func(t *testing.T) {
			state := t.TempDir()
			errOut := newNotifyWriter("[y/N]")
			stdin, w := io_Pipe(t)
			_ = w
			args := []string{"--talosconfig", talosconfig, "--state-dir", state, "-n", node, "admission", "disable", "--no-wait"}
			code := interruptInProcess(t, args, streams{In: stdin, Out: &bytes.Buffer{}, Err: errOut}, errOut.seen, sig)
			if code != 8 || !strings.Contains(errOut.String(), "interrupted by "+name) {
				t.Errorf("exit %d, want 8 saying interrupted:\n%s", code, errOut)
			}
			_, entries, err := recovery.State{Dir: state}.ReadIncident("")
			if err != nil {
				t.Fatal(err)
			}
			var said bool
			for _, e := range entries {
				said = said || e.Kind == "end" && e.Outcome == recovery.OutcomeAborted && strings.Contains(e.Error, "interrupted by "+name)
			}
			if !said {
				t.Errorf("the journal does not say interrupted by %s: %+v", name, entries)
			}
			// It points at the journal of this run's incident, by ID.
			if id := entries[0].Meta.ID; !strings.Contains(errOut.String(), "hint: what was done is in the journal: breakglass journal show "+id) {
				t.Errorf("no hint names this run's journal (%s):\n%s", id, errOut)
			}
			if recs := recordsIn(t, state); recs != 0 {
				t.Errorf("%d admission records written: the change went ahead", recs)
			}
		})
	}
}

func recordsIn(t *testing.T, state string) int {
	t.Helper()
	n := 0
	_ = filepath.Walk(filepath.Join(state, "clusters"), func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func io_Pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// With the real binary: SIGTERM stops it cleanly with exit 8; a second
// signal after the first aborts it at once (killed by the signal).
func TestSecondSignalAborts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "breakglass")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	c, talosconfig := oneNode(t)
	silent, accepted := silentNode(t)
	// started starts cmd, killed when the test ends, and reads its stderr.
	started := func(cmd *exec.Cmd) *bufio.Scanner {
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return bufio.NewScanner(stderr)
	}
	start := func() (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(bin, "--talosconfig", talosconfig, "--state-dir", t.TempDir(), "-e", silent, "-n", c.Nodes[0].IP, "apiserver", "wait", "--timeout", "10m")
		sc := started(cmd)
		select {
		case <-accepted:
		case <-time.After(time.Minute):
			t.Fatal("never connected")
		}
		return cmd, sc
	}
	waitLine := func(sc *bufio.Scanner, want string) {
		for sc.Scan() {
			if strings.Contains(sc.Text(), want) {
				return
			}
		}
		t.Fatalf("no line with %q", want)
	}

	cmd, sc := start()
	cmd.Process.Signal(syscall.SIGTERM)
	waitLine(sc, "interrupted by SIGTERM: stopping cleanly")
	for sc.Scan() {
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 8 {
		t.Errorf("after SIGTERM: %v, want exit 8", err)
	}

	// A second signal while the first is still being handled (a clean stop
	// that takes its time, here forever): killed by it at once.
	helper := exec.Command(os.Args[0], "-test.run=^TestSignalHelperProcess$")
	helper.Env = append(os.Environ(), "BREAKGLASS_SIGNAL_HELPER=1")
	sc = started(helper)
	waitLine(sc, "helper: handling signals")
	helper.Process.Signal(syscall.SIGINT)
	waitLine(sc, "press Ctrl-C again")
	waitLine(sc, "helper: canceled, still stopping")
	helper.Process.Signal(syscall.SIGINT)
	for sc.Scan() {
	}
	err = helper.Wait()
	if !errors.As(err, &exit) || exit.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
		t.Errorf("after a second SIGINT: %v, want killed by SIGINT", err)
	}
}

// TestSignalHelperProcess is the process TestSecondSignalAborts signals: it
// handles signals as breakglass does, then takes forever to stop.
func TestSignalHelperProcess(t *testing.T) {
	if os.Getenv("BREAKGLASS_SIGNAL_HELPER") != "1" {
		t.Skip("run by TestSecondSignalAborts")
	}
	ctx, _ := interruptible(os.Stderr)
	fmt.Fprintln(os.Stderr, "helper: handling signals")
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "helper: canceled, still stopping")
	time.Sleep(time.Hour)
}
