package lab

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/breakglass-dev/breakglass/internal/childproc"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// ContainerRun is what the lab saw of one kube-apiserver container: when it
// was started, when it first answered /readyz with 200, when the kubelet
// asked it to stop and when it exited. The timeline and the measurements
// are made from these.
type ContainerRun struct {
	Node          string    `json:"node"`
	ID            string    `json:"id"`
	Image         string    `json:"image"`
	Args          []string  `json:"-"`
	Requested     time.Time `json:"requested"` // handed to the runner by the kubelet
	Started       time.Time `json:"started"`   // process started
	Ready         time.Time `json:"ready"`     // first /readyz 200 (zero: never)
	StopRequested time.Time `json:"stopRequested"`
	Exited        time.Time `json:"exited"`
	ExitErr       string    `json:"exitErr,omitempty"`
	LastLog       string    `json:"lastLog,omitempty"` // the last lines it wrote, once it exited
}

// tailWriter keeps the last bytes written through it.
type tailWriter struct {
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-4096:]...)
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

func (t *tailWriter) lines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := strings.Split(strings.TrimRight(string(t.buf), "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// processRunner runs each emulated node's kube-apiserver container as a
// real kube-apiserver process (talostest.PodRunner). The kubelet sees the
// process run or exit, nothing else (Talos sets no probes on kube-apiserver);
// the runner watches /readyz over HTTPS as the cluster admin for the lab's own
// records only.
type processRunner struct {
	binDir string
	gate   <-chan struct{} // closed once etcd and the node files are in place
	client *http.Client    // admin client certificate, cluster CA
	// prepare renders what a start reads from the node's running config
	// (set before gate closes).
	prepare func(ip string) error

	mu   sync.Mutex
	runs []*ContainerRun
	wake chan struct{} // closed and replaced on every change of runs
}

var _ talostest.PodRunner = (*processRunner)(nil)

func newProcessRunner(binDir string, gate <-chan struct{}) *processRunner {
	return &processRunner{binDir: binDir, gate: gate, wake: make(chan struct{})}
}

// setClient installs the /readyz client once the certificates exist.
func (r *processRunner) setClient(tlsConf *tls.Config) {
	tr := &http.Transport{
		TLSClientConfig:     tlsConf,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
	}
	r.mu.Lock()
	r.client = &http.Client{Transport: tr, Timeout: time.Second}
	r.mu.Unlock()
}

// BinaryFor maps an image such as registry.k8s.io/kube-apiserver:v1.34.4 to
// DIR/v1.34.4/kube-apiserver: the image tag picks the binary.
func BinaryFor(binDir, image string) (string, error) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return "", fmt.Errorf("image %q has no tag", image)
	}
	tag := image[i+1:]
	if !strings.HasPrefix(tag, "v") {
		tag = "v" + tag
	}
	return filepath.Join(binDir, tag, "kube-apiserver"), nil
}

func (r *processRunner) record(f func()) {
	r.mu.Lock()
	f()
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// Runs returns a copy of every container run so far, oldest first.
func (r *processRunner) Runs() []ContainerRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ContainerRun, len(r.runs))
	for i, c := range r.runs {
		out[i] = *c
	}
	return out
}

// changed returns a channel closed at the next change of the runs.
func (r *processRunner) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wake
}

// Run implements talostest.PodRunner.
func (r *processRunner) Run(ctx context.Context, c talostest.Container, logs io.Writer) error {
	run := &ContainerRun{Node: c.Node.IP, ID: c.ID, Image: c.Image, Requested: time.Now()}
	r.record(func() { r.runs = append(r.runs, run) })
	select {
	case <-ctx.Done():
		r.record(func() { run.Exited, run.ExitErr = time.Now(), "stopped before the lab was ready" })
		return nil
	case <-r.gate:
	}
	bin, err := BinaryFor(r.binDir, c.Image)
	if err == nil && r.prepare != nil {
		err = r.prepare(c.Node.IP)
	}
	if err == nil {
		if _, err = os.Stat(bin); err != nil {
			err = fmt.Errorf("no kube-apiserver binary for image %s at %s (build it: lab/scripts/build-kube-apiserver.sh %s)", c.Image, bin, filepath.Base(filepath.Dir(bin)))
		}
	}
	if err != nil {
		fmt.Fprintf(logs, "E0000 failed to pull and unpack image %q: %v\n", c.Image, err)
		r.record(func() { run.Exited, run.ExitErr = time.Now(), err.Error() })
		return err
	}
	args := make([]string, 0, len(c.Args()))
	for _, a := range c.Args() {
		// kubelet expands $(POD_IP) from the pod's status: the node's address
		args = append(args, strings.ReplaceAll(a, "$(POD_IP)", c.Node.IP))
	}
	r.record(func() { run.Args = args })
	cmd := exec.Command(bin, args...)
	tail := &tailWriter{w: logs}
	cmd.Stdout, cmd.Stderr = tail, tail
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	// its own process group, killed with the lab process: nothing outlives it
	exited, err := childproc.Start(cmd)
	if err != nil {
		r.record(func() { run.Exited, run.ExitErr = time.Now(), err.Error() })
		return err
	}
	r.record(func() { run.Started = time.Now() })

	readyCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go r.watchReady(readyCtx, c, run)

	select {
	case err := <-exited:
		stopWatch()
		if err == nil {
			err = errors.New("kube-apiserver exited with status 0")
		}
		r.record(func() { run.Exited, run.ExitErr, run.LastLog = time.Now(), err.Error(), tail.lines(3) })
		return err
	case <-ctx.Done():
	}
	stopWatch()
	r.record(func() { run.StopRequested = time.Now() })
	// SIGTERM; SIGKILL when the kubelet's grace period is over
	childproc.Signal(cmd, syscall.SIGTERM)
	var err2 error
	select {
	case err2 = <-exited:
	case <-c.Kill:
		childproc.Signal(cmd, syscall.SIGKILL)
		err2 = <-exited
	}
	childproc.Signal(cmd, syscall.SIGKILL) // anything left in the group
	r.record(func() {
		run.Exited = time.Now()
		run.LastLog = tail.lines(3)
		if err2 != nil {
			run.ExitErr = err2.Error()
		}
	})
	return nil
}

// watchReady polls /readyz every 25ms until the first 200: the moment the
// measurements call "ready". It is the lab's record only: the pod's status
// does not depend on it.
func (r *processRunner) watchReady(ctx context.Context, c talostest.Container, run *ContainerRun) {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		if r.get(ctx, c, "/readyz") {
			r.record(func() { run.Ready = time.Now() })
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *processRunner) get(ctx context.Context, c talostest.Container, path string) bool {
	r.mu.Lock()
	client := r.client
	r.mu.Unlock()
	if client == nil {
		return false
	}
	port, ok := c.Flag("secure-port")
	if !ok {
		port = "6443"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(c.Node.IP, port)+path, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
