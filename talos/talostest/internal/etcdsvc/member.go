package etcdsvc

// The member runs as a process of its own, as etcd runs in a container of its own on a
// node: a member that panics or is killed ends alone, and its service restarts it (or
// reports it failed), while the other nodes and the process running the emulator go
// on. The process is this very executable (a test binary, breakglass-lab) started
// again with memberEnv set: the package's init runs the member in it before anything
// else, so that nothing has to be built or installed beside the emulator.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/breakglass-dev/breakglass/internal/childproc"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
)

// memberEnv carries a member's spec to the process that runs it.
const memberEnv = "BREAKGLASS_TALOSTEST_ETCD_MEMBER"

func init() {
	if spec, ok := os.LookupEnv(memberEnv); ok {
		os.Exit(memberMain(spec))
	}
}

// memberSpec is the member's command line, as machined gives etcd its arguments.
type memberSpec struct {
	Name, DataDir      string
	ClientURL, PeerURL string
	CA, Cert, Key      string // client-facing TLS, client certificates required
	PeerCert, PeerKey  string
	QuotaBytes         int64
	// InitialCluster and ClusterState only when the data directory was empty.
	InitialCluster, ClusterState string
}

// memberMain is etcd's main in the member's process: it serves until SIGTERM, or until
// the server stops by itself (a removed member), and returns the exit code. It starts
// the embedded server with the configuration the emulator has always given its members
// rather than go through etcdmain, which would also make up an initial cluster from
// the member's name when it is given none: a member that lost its disk would then
// start a cluster of its own instead of failing at every restart, as the lab's lost
// member does (not checked against a real node either way).
func memberMain(raw string) int {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	lg := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(os.Stderr), zap.InfoLevel))

	var m memberSpec
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		lg.Error("bad member spec", zap.Error(err))

		return 1
	}

	e, err := embed.StartEtcd(m.config(lg))
	if err != nil {
		// etcd's main: a bootstrap error is a warning and exit 1, any other a fatal "discovery failed"
		if strings.Contains(err.Error(), "include") && strings.Contains(err.Error(), "--initial-cluster") {
			lg.Warn("failed to start", zap.Error(err))
		} else {
			lg.Error("discovery failed", zap.Error(err))
		}

		return 1
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	select {
	case sig := <-stop:
		lg.Info("received signal; shutting down", zap.String("signal", sig.String()))
		e.Close()
	case <-e.Server.StopNotify():
		e.Close()
	case err := <-e.Err():
		lg.Error("listener failed", zap.Error(err)) // etcd's main: fatal

		return 1
	}

	return 0
}

func (m memberSpec) config(lg *zap.Logger) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.DataDir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	client, _ := url.Parse(m.ClientURL)
	peer, _ := url.Parse(m.PeerURL)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: m.Cert, KeyFile: m.Key, TrustedCAFile: m.CA, ClientCertAuth: true}
	cfg.PeerTLSInfo = transport.TLSInfo{CertFile: m.PeerCert, KeyFile: m.PeerKey, TrustedCAFile: m.CA, ClientCertAuth: true}
	cfg.SocketOpts = transport.SocketOpts{ReusePort: true} // beside the port reservations
	cfg.QuotaBackendBytes = m.QuotaBytes
	cfg.WatchProgressNotifyInterval = 5 * time.Second

	if m.InitialCluster != "" {
		cfg.InitialCluster, cfg.ClusterState = m.InitialCluster, m.ClusterState
	}

	return cfg
}

// member is one run of the member's process.
type member struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	code int           // its exit code (128+signal when a signal ended it), once done
}

// startProcess starts the member's process, its output going to log line by line.
func startProcess(m memberSpec, log *host.Log) (*member, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}

	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}

	out := logLines(log)
	cmd := &exec.Cmd{Path: exe, Args: []string{"etcd", "--name=" + m.Name}, Env: []string{memberEnv + "=" + string(raw)}, Stdout: out, Stderr: out}

	// its own process group, killed with the emulator's process: no member outlives it
	exited, err := childproc.Start(cmd)
	if err != nil {
		return nil, err
	}

	p := &member{cmd: cmd, done: make(chan struct{})}

	go func() {
		err := <-exited
		out.Flush()

		p.code = exitCode(cmd.ProcessState, err)
		close(p.done)
	}()

	return p, nil
}

func (p *member) pid() int { return p.cmd.Process.Pid }

// signal sends sig to the member's process group.
func (p *member) signal(sig syscall.Signal) { childproc.Signal(p.cmd, sig) }

// exitCode is the code a shell shows: 128+signal when a signal ended the process.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return 1 // never started, or lost: an error all the same
	}

	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}

	var exit *exec.ExitError
	if errors.As(err, &exit) || err == nil {
		return ps.ExitCode()
	}

	return 1
}

// logLines appends what the member writes to its log, a line at a time (etcd writes
// one JSON entry a line; a panic's trace comes in pieces).
func logLines(log *host.Log) *host.LineWriter {
	return &host.LineWriter{Emit: func(line []byte) { log.Append(append(bytes.Clone(line), '\n')) }}
}

// String names the process as the service's events do.
func (p *member) String() string { return fmt.Sprintf("task etcd (PID %d, container etcd)", p.pid()) }
