package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

// Issue 21, case 9: the first SIGINT or SIGTERM stops a command whatever it
// waits on. On main a command blocked reading its input (a FIFO named as
// --talosconfig, a runbook, an audit's -f, a certificate) said "stopping
// cleanly" and ran on until a second signal: reading input did not look at
// the context.

// fifoWithReader makes a FIFO and returns, once a command has opened it
// for reading, the write end held open without a byte written: the
// command then waits in read(2) for as long as the test wants. Opening the
// write end without blocking fails (ENXIO) until a reader is there, which
// is the deterministic point the signal is sent at.
func fifoWithReader(t *testing.T, path string) (ready <-chan struct{}) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	stop := make(chan struct{})
	var w *os.File
	var mu sync.Mutex
	go func() {
		for {
			f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
			if err == nil {
				mu.Lock()
				w = f
				mu.Unlock()
				close(ch)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		if w != nil {
			w.Close() // the abandoned read ends with EOF
		}
	})
	return ch
}

func TestInterruptedWhileReadingInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(fifo string) []string
	}{
		{"talosconfig", func(f string) []string { return []string{"--talosconfig", f, "admission", "status"} }},
		{"runbook show", func(f string) []string { return []string{"runbook", "show", f} }},
		{"recover --runbook", func(f string) []string {
			return []string{"--talosconfig", f + ".absent", "recover", "--runbook", f, "--yes"}
		}},
		{"audit -f", func(f string) []string { return []string{"audit", "-f", f} }},
		{"audit --kubeconfig", func(f string) []string { return []string{"audit", "--kubeconfig", f} }},
		{"etcd certificate", func(f string) []string {
			return []string{"etcd", "webhooks", "--etcd-endpoints", "https://127.0.0.1:1", "--etcd-cacert", f, "--etcd-cert", f, "--etcd-key", f}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("HOME", dir)
			t.Setenv("BREAKGLASS_STATE_DIR", filepath.Join(dir, "state"))
			fifo := filepath.Join(dir, "input")
			ready := fifoWithReader(t, fifo)
			errOut := newNotifyWriter("\x00never")
			code := interruptInProcess(t, tc.args(fifo), streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: errOut}, ready, syscall.SIGTERM)
			if code != 8 || !strings.Contains(errOut.String(), "interrupted by SIGTERM") {
				t.Errorf("exit %d, want 8 saying interrupted:\n%s", code, errOut)
			}
		})
	}
}

// eofReader is standard input that says when the command has read it all.
type eofReader struct {
	r    io.Reader
	eof  chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if errors.Is(err, io.EOF) {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

// Issue 21, case 9: an audit busy in CEL. Seven nested .all() are 10^7
// steps for each start-up write a catch-all webhook sees; on main, with no
// cost limit and no look at the context, the audit ran for minutes after
// the first SIGTERM. With kube-apiserver's cost limit every evaluation
// ends by itself, and the context stops the audit: exit 8, no report. The
// signal comes once the manifest was read whole (standard input at EOF).
func TestInterruptedAuditInCEL(t *testing.T) {
	expr := "true"
	for i := 7; i > 0; i-- {
		expr = fmt.Sprintf("[0,1,2,3,4,5,6,7,8,9].all(x%d, %s)", i, expr)
	}
	manifest := strings.Replace(webhookYAML, "  rules:\n", "  matchConditions:\n  - name: costly\n    expression: '"+expr+"'\n  rules:\n", 1)
	in := &eofReader{r: strings.NewReader(manifest), eof: make(chan struct{})}
	out, errOut := newNotifyWriter("\x00never"), newNotifyWriter("\x00never")
	code := interruptInProcess(t, []string{"audit", "-f", "-"}, streams{In: in, Out: out, Err: errOut}, in.eof, syscall.SIGTERM)
	if code != 8 || !strings.Contains(errOut.String(), "interrupted by SIGTERM") {
		t.Errorf("exit %d, want 8 saying interrupted:\n%s", code, errOut)
	}
	if out.String() != "" {
		t.Errorf("the interrupted audit printed a report:\n%s", out)
	}
}

// The read-only commands that wait on the network stop at the first
// signal too: audit from a kubeconfig or from etcd, etcd webhooks and lock
// status against an etcd that accepts connections and never answers. The
// signal comes once the command is connected (the listener accepted).
func TestInterruptedWhileWaitingOnTheNetwork(t *testing.T) {
	ca, err := etcdtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueClient("breakglass", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"ca.crt": ca.CertPEM, "client.crt": certPEM, "client.key": keyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	etcdFlags := func(addr string) []string {
		return []string{"--etcd-endpoints", "https://" + addr, "--etcd-cacert", filepath.Join(dir, "ca.crt"),
			"--etcd-cert", filepath.Join(dir, "client.crt"), "--etcd-key", filepath.Join(dir, "client.key")}
	}
	for _, tc := range []struct {
		name string
		args func(addr string) []string
	}{
		{"audit --kubeconfig", func(addr string) []string {
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			b64 := base64.StdEncoding.EncodeToString
			text := fmt.Sprintf("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: https://%s\n    certificate-authority-data: %s\n"+
				"contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n",
				addr, b64(ca.CertPEM), b64(certPEM), b64(keyPEM))
			if err := os.WriteFile(kc, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"audit", "--kubeconfig", kc}
		}},
		{"audit --from-etcd", func(addr string) []string { return append([]string{"audit", "--from-etcd"}, etcdFlags(addr)...) }},
		{"etcd webhooks", func(addr string) []string { return append([]string{"etcd", "webhooks"}, etcdFlags(addr)...) }},
		{"lock status", func(addr string) []string { return append([]string{"lock", "status"}, etcdFlags(addr)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOME", t.TempDir())
			silent, accepted := silentNode(t)
			errOut := newNotifyWriter("\x00never")
			code := interruptInProcess(t, tc.args(silent), streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: errOut}, accepted, syscall.SIGINT)
			if code != 8 || !strings.Contains(errOut.String(), "interrupted by SIGINT") {
				t.Errorf("exit %d, want 8 saying interrupted:\n%s", code, errOut)
			}
		})
	}
}
