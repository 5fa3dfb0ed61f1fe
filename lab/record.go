package lab

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/startupwrites"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// RecordedUpgrades are the upgrade pairs whose start-up writes are recorded
// from the real binaries and checked against the audit's model.
var RecordedUpgrades = [][2]string{
	{"v1.32.13", "v1.33.13"}, {"v1.32.13", "v1.34.4"}, {"v1.33.13", "v1.34.4"},
	{"v1.34.4", "v1.35.4"}, {"v1.35.4", "v1.36.3"}, {"v1.36.3", "v1.37.2"},
}

// RecordOptions describe one recording of kube-apiserver's start-up writes.
type RecordOptions struct {
	BinDir string // holds VERSION/kube-apiserver
	// From runs first on an empty etcd and installs the recording webhook;
	// To then starts on the same data and is recorded (From == To: a restart).
	From, To string
	// Window is the longest To is recorded (default 25 s). Quiet, when set,
	// ends it earlier: once To is ready and no new distinct request came
	// for that long.
	Window, Quiet time.Duration
	Dir           string    // working files (etcd data, certificates)
	Log           io.Writer // both processes' output; nil discards it
}

// Recording is what To sent to the webhook, one entry per distinct request
// in the order first seen.
type Recording struct {
	From, To string
	Requests []audit.ObservedRequest
	Ready    time.Duration // from To's start to its first /readyz 200; 0: never
	Recorded time.Duration // how long To was recorded
	LastNew  time.Duration // from To's start to the last new distinct request
	// Args is To's command line, its paths, ports and endpoints as
	// placeholders (DIR, PORT, ETCD).
	Args []string
	// EtcdPuts and EtcdBytes are what To wrote to etcd while it was
	// recorded (keys and values), read from etcd's history.
	EtcdPuts  int
	EtcdBytes int64
}

// StartupWrites is the recording as internal/startupwrites keeps it.
func (r *Recording) StartupWrites(date string) *startupwrites.Recording {
	ready := "never"
	if r.Ready > 0 {
		ready = r.Ready.Round(100 * time.Millisecond).String()
	}
	return &startupwrites.Recording{From: r.From, To: r.To, Recorded: date, Command: RecordStartupCommand,
		Flags: r.Args, ReadyAfter: ready, EtcdPuts: r.EtcdPuts, EtcdBytes: r.EtcdBytes, Writes: r.Requests}
}

// RecordStartupCommand re-records internal/startupwrites.
const RecordStartupCommand = "go run ./lab/recordstartup"

// WriteJSONL writes the requests one JSON object a line, as
// audit/testdata/observed holds them.
func (r *Recording) WriteJSONL(w io.Writer) error {
	for _, o := range r.Requests {
		b, err := json.Marshal(o)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

const recordToken = "breakglass-recorder-token"

// RecordStartup runs From on a fresh embedded etcd, installs a recording
// validating webhook through it (clientConfig.url on 127.0.0.1, failurePolicy
// Ignore, matchPolicy Exact, everything), stops it, starts To on the same
// etcd and records every AdmissionReview To sends. Loopback only.
func RecordStartup(ctx context.Context, opts RecordOptions) (*Recording, error) {
	if opts.Window <= 0 {
		opts.Window = 25 * time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	var err error
	if opts.BinDir, err = Binaries(ctx, opts.BinDir, opts.Log, opts.From, opts.To); err != nil {
		return nil, err
	}
	rig, err := newRecordRig(opts.Dir, "record-")
	if err != nil {
		return nil, err
	}
	defer rig.close()
	dir, etcd, pki, port, api := rig.dir, rig.etcd, rig.pki, rig.port, rig.api
	hook, err := startRecordingWebhook(pki)
	if err != nil {
		return nil, err
	}
	defer hook.close()
	args := rig.args

	from, err := startAPIServer(ctx, filepath.Join(opts.BinDir, opts.From, "kube-apiserver"), args(opts.From), opts.Log)
	if err != nil {
		return nil, err
	}
	if _, err := api.waitReady(ctx, from, 3*time.Minute); err != nil {
		from.kill()
		return nil, fmt.Errorf("record: %s: %w", opts.From, err)
	}
	if err := api.post(ctx, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", hook.configuration()); err != nil {
		from.kill()
		return nil, fmt.Errorf("record: install the webhook through %s: %w", opts.From, err)
	}
	// A cluster that ran From for a while has what From writes after it is
	// ready (the kubernetes Service, and from 1.33 the IPAddress of its
	// ClusterIP): wait for them, or To would be recorded writing them again.
	if err := api.waitObjects(ctx, from, time.Minute, settledObjects(opts.From)...); err != nil {
		from.kill()
		return nil, fmt.Errorf("record: %s: %w", opts.From, err)
	}
	from.stop(30 * time.Second) // SIGTERM, as the kubelet stops the old pod
	hook.reset()
	kv, err := etcd.Client()
	if err != nil {
		return nil, err
	}
	defer kv.Close()
	before, err := kv.Get(ctx, "breakglass-recorder-revision")
	if err != nil {
		return nil, fmt.Errorf("record: etcd revision: %w", err)
	}

	to, err := startAPIServer(ctx, filepath.Join(opts.BinDir, opts.To, "kube-apiserver"), args(opts.To), opts.Log)
	if err != nil {
		return nil, err
	}
	defer to.kill()
	rec := &Recording{From: opts.From, To: opts.To, Args: placeholders(args(opts.To), dir, etcd.Endpoints[0], port.Port())}
	readyAt := make(chan time.Duration, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if d, err := api.waitReady(rctx, to, opts.Window); err == nil {
			readyAt <- d
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(opts.Window)
loop:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			break loop
		case <-to.done:
			fmt.Fprintf(opts.Log, "record: %s exited during the window: %v\n", opts.To, to.err)
			break loop
		case d := <-readyAt:
			rec.Ready = d
		case <-tick.C:
			if opts.Quiet > 0 && rec.Ready > 0 && time.Since(hook.lastNew(to.started)) >= opts.Quiet &&
				time.Since(to.started) >= rec.Ready+opts.Quiet {
				break loop
			}
		}
	}
	rec.Recorded = time.Since(to.started)
	rec.Requests = hook.requests()
	if t := hook.lastNew(to.started); t.After(to.started) {
		rec.LastNew = t.Sub(to.started)
	}
	to.stop(30 * time.Second) // nothing more is written once it is gone
	if rec.EtcdPuts, rec.EtcdBytes, err = etcdWrites(ctx, kv, before.Header.Revision); err != nil {
		return nil, fmt.Errorf("record: what %s wrote to etcd: %w", opts.To, err)
	}
	return rec, nil
}

// etcdWrites counts the puts after revision rev, and their keys' and
// values' bytes, from etcd's history (a watch from rev+1 to now).
func etcdWrites(ctx context.Context, kv *clientv3.Client, rev int64) (int, int64, error) {
	now, err := kv.Get(ctx, "breakglass-recorder-revision")
	if err != nil {
		return 0, 0, err
	}
	end := now.Header.Revision
	if end <= rev {
		return 0, 0, nil
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	puts, bytes := 0, int64(0)
	for resp := range kv.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return 0, 0, err
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > end {
				return puts, bytes, nil
			}
			if ev.Type == clientv3.EventTypePut {
				puts++
				bytes += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
			}
			if ev.Kv.ModRevision == end {
				return puts, bytes, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("history from revision %d to %d not read: %w", rev+1, end, wctx.Err())
}

// recordRig is what a recording runs kube-apiserver on: a working
// directory, an embedded etcd with TLS, a PKI, a loopback port held
// between runs, and a client of that port.
type recordRig struct {
	dir  string
	etcd *etcdtest.Server
	pki  *recordPKI
	port *talostest.PortReservation
	api  *recordClient
}

func newRecordRig(parent, prefix string) (*recordRig, error) {
	r := &recordRig{}
	var err error
	if r.dir, err = os.MkdirTemp(parent, prefix); err != nil {
		return nil, err
	}
	if r.etcd, err = etcdtest.Start(filepath.Join(r.dir, "etcd")); err != nil {
		r.close()
		return nil, err
	}
	if r.pki, err = newRecordPKI(r.dir); err != nil {
		r.close()
		return nil, err
	}
	if r.port, err = talostest.ReservePort("127.0.0.1", 0); err != nil {
		r.close()
		return nil, err
	}
	r.api = &recordClient{base: "https://" + r.port.Addr(), http: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.pki.pool, MinVersion: tls.VersionTLS12}}}}
	return r, nil
}

func (r *recordRig) close() {
	if r.port != nil {
		r.port.Close()
	}
	if r.etcd != nil {
		r.etcd.Close()
	}
	os.RemoveAll(r.dir) //nolint:errcheck
}

// args are the flags of the version's kube-apiserver on the rig, and more.
func (r *recordRig) args(version string, more ...string) []string {
	args := []string{
		"--etcd-servers=" + r.etcd.Endpoints[0], "--etcd-cafile=" + r.etcd.CAFile,
		"--etcd-certfile=" + r.etcd.CertFile, "--etcd-keyfile=" + r.etcd.KeyFile,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(r.port.Port()),
		"--permit-port-sharing=true", // the reservation holds the port between the two runs
		"--cert-dir=" + filepath.Join(r.dir, "certs"),
		"--tls-cert-file=" + r.pki.serverCert, "--tls-private-key-file=" + r.pki.serverKey, "--client-ca-file=" + r.pki.caFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + r.pki.saPub, "--service-account-signing-key-file=" + r.pki.saKey,
		"--token-auth-file=" + r.pki.tokens, "--authorization-mode=RBAC", "--anonymous-auth=true",
	}
	return append(append(args, more...), loopbackOnlyArgs(version)...)
}

// placeholders writes a command line without this run's paths, ports and
// endpoints.
func placeholders(args []string, dir, etcdURL string, port int) []string {
	out := make([]string, len(args))
	for i, a := range args {
		a = strings.ReplaceAll(a, etcdURL, "ETCD")
		a = strings.ReplaceAll(a, dir, "DIR")
		a = strings.ReplaceAll(a, "="+strconv.Itoa(port), "=PORT")
		out[i] = a
	}
	return out
}

// recordPKI: one CA for serving, client certificates and the webhook; a
// token for the recorder's own requests (system:masters).
type recordPKI struct {
	ca                                                  *etcdtest.CA
	pool                                                *x509.CertPool
	caFile, serverCert, serverKey, saKey, saPub, tokens string
}

func newRecordPKI(dir string) (*recordPKI, error) {
	ca, err := etcdtest.NewCA()
	if err != nil {
		return nil, err
	}
	p := &recordPKI{ca: ca, pool: x509.NewCertPool()}
	p.pool.AppendCertsFromPEM(ca.CertPEM)
	crt, key, err := ca.IssueServer([]string{"127.0.0.1", "localhost"}, certLifetime)
	if err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(sa)
	if err != nil {
		return nil, err
	}
	saKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saDER})
	saPub, err := publicKeyPEM(saKey)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"ca.crt": ca.CertPEM, "apiserver.crt": crt, "apiserver.key": key, "sa.key": saKey, "sa.pub": saPub,
		"tokens.csv": []byte(recordToken + ",breakglass-recorder,breakglass-recorder,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	j := func(n string) string { return filepath.Join(dir, n) }
	p.caFile, p.serverCert, p.serverKey, p.saKey, p.saPub, p.tokens = j("ca.crt"), j("apiserver.crt"), j("apiserver.key"), j("sa.key"), j("sa.pub"), j("tokens.csv")
	return p, nil
}

// apiServerProcess is one kube-apiserver run.
type apiServerProcess struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error
}

func startAPIServer(ctx context.Context, bin string, args []string, logw io.Writer) (*apiServerProcess, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logw, logw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the recorder
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &apiServerProcess{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	go func() {
		select {
		case <-ctx.Done():
			p.kill()
		case <-p.done:
		}
	}()
	return p, nil
}

// stop sends SIGTERM and waits, then kills.
func (p *apiServerProcess) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

func (p *apiServerProcess) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

type recordClient struct {
	base string
	http *http.Client
}

func (c *recordClient) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+recordToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, nil
}

// waitReady polls /readyz until 200 and returns the time since p started.
func (c *recordClient) waitReady(ctx context.Context, p *apiServerProcess, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if code, _, err := c.do(ctx, http.MethodGet, "/readyz", nil); err == nil && code == http.StatusOK {
			return time.Since(p.started), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-p.done:
			return 0, fmt.Errorf("exited before ready: %v", p.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not ready after %s", timeout)
}

// settledObjects are the API paths of what a cluster running version has
// once it settled after its first start.
func settledObjects(version string) []string {
	paths := []string{"/api/v1/namespaces/default/services/kubernetes"}
	if m, err := minorOf(":" + version); err == nil && m >= 33 {
		paths = append(paths, "/apis/networking.k8s.io/v1/ipaddresses/"+firstServiceIP)
	}
	return paths
}

// firstServiceIP is the kubernetes Service's ClusterIP in ServiceCIDR.
const firstServiceIP = "10.1.0.1"

// waitObjects polls each path until it answers 200.
func (c *recordClient) waitObjects(ctx context.Context, p *apiServerProcess, timeout time.Duration, paths ...string) error {
	deadline := time.Now().Add(timeout)
	for _, path := range paths {
		for {
			code, _, err := c.do(ctx, http.MethodGet, path, nil)
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not there after %s (last answer %d, %v)", path, timeout, code, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-p.done:
				return fmt.Errorf("exited while waiting for %s: %v", path, p.err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func (c *recordClient) post(ctx context.Context, path string, obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	code, out, err := c.do(ctx, http.MethodPost, path, b)
	if err != nil {
		return err
	}
	if code != http.StatusCreated {
		return fmt.Errorf("POST %s: %d %s", path, code, out)
	}
	return nil
}

// recordingWebhook allows every AdmissionReview and writes down each
// distinct request.
type recordingWebhook struct {
	addr     string
	caBundle []byte
	srv      *http.Server

	mu    sync.Mutex
	seen  map[string]bool
	reqs  []audit.ObservedRequest
	newAt time.Time
}

func startRecordingWebhook(p *recordPKI) (*recordingWebhook, error) {
	crt, key, err := p.ca.IssueServer([]string{"127.0.0.1"}, certLifetime)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &recordingWebhook{addr: lis.Addr().String(), caBundle: p.ca.CertPEM, seen: map[string]bool{}}
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.review), ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go h.srv.Serve(tls.NewListener(lis, tlsConf)) //nolint:errcheck
	return h, nil
}

func (h *recordingWebhook) close() { h.srv.Close() }

// configuration is the recording ValidatingWebhookConfiguration.
func (h *recordingWebhook) configuration() map[string]any {
	return map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingWebhookConfiguration",
		"metadata":   map[string]any{"name": "breakglass-recorder"},
		"webhooks": []any{map[string]any{
			"name":                    "recorder.breakglass.dev",
			"clientConfig":            map[string]any{"url": "https://" + h.addr + "/review", "caBundle": h.caBundle},
			"rules":                   []any{map[string]any{"operations": []string{"*"}, "apiGroups": []string{"*"}, "apiVersions": []string{"*"}, "resources": []string{"*/*"}}},
			"failurePolicy":           "Ignore",
			"matchPolicy":             "Exact",
			"sideEffects":             "None",
			"admissionReviewVersions": []string{"v1"},
			"timeoutSeconds":          5,
		}},
	}
}

func (h *recordingWebhook) review(w http.ResponseWriter, r *http.Request) {
	in, ok := readReview(w, r)
	if !ok {
		return
	}
	h.add(observe(in.Request))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: in.TypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: in.Request.UID, Allowed: true}})
}

// observe reduces a request to what the model is checked on.
func observe(r *admissionv1.AdmissionRequest) audit.ObservedRequest {
	o := audit.ObservedRequest{
		Operation: string(r.Operation), Group: r.Resource.Group, Version: r.Resource.Version, Resource: r.Resource.Resource,
		SubResource: r.SubResource, Kind: r.Kind.Kind, Namespace: r.Namespace, Name: r.Name,
		Username: r.UserInfo.Username, Groups: r.UserInfo.Groups, Extra: map[string][]string{}, Labels: map[string]string{},
	}
	for k, v := range r.UserInfo.Extra {
		o.Extra[k] = v
	}
	var obj struct {
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	raw := r.Object.Raw
	if len(raw) == 0 { // DELETE: selectors see the old object
		raw = r.OldObject.Raw
	}
	if len(raw) > 0 && json.Unmarshal(raw, &obj) == nil {
		if obj.Metadata.Labels != nil {
			o.Labels = obj.Metadata.Labels
		}
		o.Annotations = obj.Metadata.Annotations
	}
	var opts struct {
		Kind         string `json:"kind"`
		FieldManager string `json:"fieldManager"`
	}
	if len(r.Options.Raw) > 0 && json.Unmarshal(r.Options.Raw, &opts) == nil {
		o.Options, o.FieldManager = opts.Kind, opts.FieldManager
	}
	return o
}

func (h *recordingWebhook) add(o audit.ObservedRequest) {
	key, _ := json.Marshal(o)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen[string(key)] {
		return
	}
	h.seen[string(key)] = true
	h.reqs = append(h.reqs, o)
	h.newAt = time.Now()
}

// reset forgets what was recorded so far (From's requests).
func (h *recordingWebhook) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen, h.reqs, h.newAt = map[string]bool{}, nil, time.Time{}
}

// lastNew is when the last new distinct request came, or since when none did.
func (h *recordingWebhook) lastNew(since time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.newAt.Before(since) {
		return since
	}
	return h.newAt
}

func (h *recordingWebhook) requests() []audit.ObservedRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]audit.ObservedRequest(nil), h.reqs...)
}
