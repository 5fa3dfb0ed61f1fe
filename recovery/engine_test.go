package recovery_test

// In-process tests of the guided recovery engine (recover, resume, revert)
// and of the standalone admission change, end to end: emulated Talos nodes
// (talostest, real gRPC with mTLS) whose kube-apiserver is a stand-in that
// answers /readyz over TLS like the real one, and an embedded etcd with
// TLS holding a fail-closed webhook configuration encoded as kube-apiserver
// stores it. Every engine call is in engine_helpers_test.go.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// engineKubelet is a real node's kubelet 200 times faster, polling the
// manifest every 1.2 s so that a replacing pod starts in a later second
// than the one it replaces (pod start times are whole seconds).
var engineKubelet = talostest.KubeletOptions{TimeScale: 0.005, PollInterval: 1200 * time.Millisecond}

// engineSecrets is one secrets bundle for every cluster of these tests
// (generating one takes about a second).
var engineSecrets = sync.OnceValues(func() (*secrets.Bundle, error) {
	return secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
})

const (
	testWebhook = "kyverno-resource-validating-webhook-cfg"
	webhookKey  = "/registry/validatingwebhookconfigurations/" + testWebhook
	vaw         = "ValidatingAdmissionWebhook"
)

// engineEnv is one emulated cluster with its etcd, and the kube-apiserver
// stand-in its nodes run.
type engineEnv struct {
	t        *testing.T
	cluster  *talostest.Cluster
	tc       *talos.Client
	stateDir string
	etcd     *etcdtest.Server // nil with envOptions.members
	kv       *clientv3.Client // a client of the cluster's etcd
	// etcdAccess is how breakglass reaches etcd: endpoints and certificate files.
	etcdAccess recovery.EtcdOptions

	// the original machine configs, running and on disk, by node IP
	original, originalDisk map[string][]byte
	webhookValue           []byte // the webhook configuration as stored in etcd

	// the stand-in's world
	k8sCA        *etcdtest.CA
	mu           sync.Mutex
	apiPorts     map[string]*talostest.PortReservation // by node IP: where the stand-in serves /readyz
	certs        map[string]tls.Certificate
	serving      map[string]string // by node IP: the container serving /readyz now
	webhook      atomic.Bool       // the fail-closed webhook configuration is in etcd
	bootstrapped atomic.Bool       // a kube-apiserver finished its start-up: its objects exist
	backend      *talostest.PortReservation
	backendOnce  sync.Once
	// refuses, when set, is the line a kube-apiserver started with these
	// flags exits with at once (it refuses its own command line).
	refuses func(talostest.ContainerConfig) string
	// full: etcd has a small quota, and a kube-apiserver fails /readyz
	// while its NOSPACE alarm is raised (engine_space_test.go).
	full bool
	// seen is what a test saw before the world moved (promises_test.go):
	// the nodes' boots, etcd's members.
	seenBoots   map[string]string
	seenMembers []string
	// perNodeMembers: each control plane runs an etcd member of its own
	// (envOptions.members).
	perNodeMembers bool
	// unreadable, when set, is what a kube-apiserver started on the node
	// logs when it cannot read what etcd stores (engine_encryption_test.go):
	// it then runs and is never ready.
	unreadable func(n *talostest.Node) []string
}

type envOptions struct {
	controlPlanes int // default 1
	workers       int
	targetWorkers bool // the talosconfig's nodes include the workers
	// deadlock puts the fail-closed webhook configuration into etcd before
	// the nodes start: kube-apiserver cannot finish its start-up while
	// ValidatingAdmissionWebhook is on (its backend runs in the cluster).
	deadlock bool
	// etcdQuota, when set, is etcd's space quota; the nodes' Talos API
	// then reaches it as each node's own member (EtcdStatus, defragment,
	// alarms), and kube-apiserver is not ready while etcd is full.
	etcdQuota int64
	// members: every control plane runs machined's etcd service around a
	// real member of its own (talostest.EtcdOptions), which can be lost,
	// removed, reset and bootstrapped as on Talos; the nodes' kube-apiserver
	// runs only while their member does.
	members bool
	// talosVersion is every node's Talos version; default talostest's.
	talosVersion string
	// kubelet, when set, replaces engineKubelet (e.g. a poll of an hour:
	// only a kubelet restart makes the kubelet look at a new pod).
	kubelet *talostest.KubeletOptions
}

func newEngineEnv(t *testing.T, o envOptions) *engineEnv {
	t.Helper()
	if o.controlPlanes == 0 {
		o.controlPlanes = 1
	}
	bundle, err := engineSecrets()
	if err != nil {
		t.Fatal(err)
	}
	env := &engineEnv{t: t, stateDir: t.TempDir(), apiPorts: map[string]*talostest.PortReservation{}, certs: map[string]tls.Certificate{}, serving: map[string]string{}}
	t.Cleanup(env.closePorts) // last: after the nodes stopped serving
	if env.k8sCA, err = etcdtest.LoadCA(bundle.Certs.K8s.Crt, bundle.Certs.K8s.Key); err != nil {
		t.Fatal(err)
	}
	if env.backend, err = talostest.ReservePort("127.0.0.1", 0); err != nil {
		t.Fatal(err)
	}

	copts := talostest.ClusterOptions{ControlPlanes: o.controlPlanes, Workers: o.workers, Dir: t.TempDir(), Secrets: bundle,
		Runner: env, Kubelet: engineKubelet, BaseArgs: env.baseArgs}
	if o.talosVersion != "" {
		for range o.controlPlanes + o.workers {
			copts.Nodes = append(copts.Nodes, talostest.NodeOptions{TalosVersion: o.talosVersion})
		}
	}
	if o.kubelet != nil {
		copts.Kubelet = *o.kubelet
	}
	if o.members {
		// etcd's joins and promotions take real time (a learner must catch
		// up): Talos's timeouts around them are scaled less.
		copts.Etcd, copts.Kubelet.TimeScale = &talostest.EtcdOptions{}, 0.02
	} else {
		var etcdOpts []etcdtest.Option
		if o.etcdQuota > 0 {
			etcdOpts, env.full = append(etcdOpts, etcdtest.WithQuota(o.etcdQuota)), true
		}
		env.etcd = etcdtest.StartTLS(t, etcdOpts...)
		env.kv = env.etcd.TestClient(t)
		env.etcdAccess = recovery.EtcdOptions{Endpoints: env.etcd.Endpoints, CACert: env.etcd.CAFile, Cert: env.etcd.CertFile, Key: env.etcd.KeyFile}
		if o.deadlock {
			env.putWebhook()
		}
		copts.EtcdMember = env.etcdMember()
		copts.EtcdSnapshot = func(ctx context.Context, _ *talostest.Node, w io.Writer) error {
			rc, err := env.kv.Snapshot(ctx)
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(w, rc)
			return err
		}
	}
	env.cluster, err = talostest.NewCluster(t.Context(), copts)
	if err != nil {
		t.Fatal(err)
	}
	if o.members {
		env.reachMembers(bundle)
		env.perNodeMembers = true
	}
	t.Cleanup(env.cluster.Close)
	env.putKubeSystem()
	path, err := env.cluster.Talosconfig(role.Admin)
	if err != nil {
		t.Fatal(err)
	}
	topts := talos.Options{Talosconfig: path}
	if o.targetWorkers {
		for _, n := range env.cluster.Nodes {
			topts.Nodes = append(topts.Nodes, n.IP)
		}
	}
	if env.tc, err = talos.Connect(t.Context(), topts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.tc.Close() })

	env.original, env.originalDisk = map[string][]byte{}, map[string][]byte{}
	for _, n := range env.cluster.Nodes {
		env.original[n.IP], env.originalDisk[n.IP] = n.RunningConfig(), n.PersistentConfig()
	}
	env.waitSettled()
	return env
}

// clusterUID is the engine tests' cluster: its kube-system namespace's UID.
const clusterUID = "5eed0000-engine-test-kube-system"

// putKubeSystem stores the kube-system namespace as kube-apiserver makes
// it on its first start: what tells a copy of etcd's data to be of this
// cluster.
func (e *engineEnv) putKubeSystem() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.kv.Put(ctx, "/registry/namespaces/kube-system", string(etcdtest.Namespace("kube-system", clusterUID))); err != nil {
		e.t.Fatal(err)
	}
	// A key a colleague deletes once an incident changed something
	// (promises_test.go): what the incident does next must keep that.
	if _, err := e.kv.Put(ctx, "/registry/configmaps/default/colleague-deletes-me", "stale"); err != nil {
		e.t.Fatal(err)
	}
}

// putWebhook stores the incident's webhook configuration (failurePolicy
// Fail, every resource, its backend in the cluster) as kube-apiserver
// stores it: protobuf, admissionregistration.k8s.io/v1.
func (e *engineEnv) putWebhook() {
	e.t.Helper()
	obj := etcdtest.FailClosedWebhook(testWebhook, "https://"+e.backend.Addr()+"/validate")
	b, err := etcdtest.EncodeProtobuf(obj, admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.kv.Put(ctx, webhookKey, string(b)); err != nil {
		e.t.Fatal(err)
	}
	e.webhookValue = b
	e.webhook.Store(true)
}

func (e *engineEnv) closePorts() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.apiPorts {
		r.Close()
	}
	e.backend.Close()
}

// baseArgs are the flags Talos renders, with the port the node's stand-in
// serves on (a free one, held for the test).
func (e *engineEnv) baseArgs(n *talostest.Node, spec *k8s.APIServerConfigSpec) map[string]string {
	args := talostest.TalosBaseArgs(n, spec)
	args["secure-port"] = fmt.Sprint(e.apiPort(n.IP).Port())
	return args
}

func (e *engineEnv) apiPort(ip string) *talostest.PortReservation {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.apiPorts[ip]; r != nil {
		return r
	}
	r, err := talostest.ReservePort(ip, 0)
	if err != nil {
		panic(err) // a loopback port: cannot fail but for exhaustion
	}
	e.apiPorts[ip] = r
	return r
}

func (e *engineEnv) servingCert(ip string) (tls.Certificate, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.certs[ip]; ok {
		return c, nil
	}
	crt, key, err := e.k8sCA.IssueServer([]string{ip}, time.Hour)
	if err != nil {
		return tls.Certificate{}, err
	}
	c, err := tls.X509KeyPair(crt, key)
	if err == nil {
		e.certs[ip] = c
	}
	return c, err
}

func (e *engineEnv) setServing(ip, container string) {
	e.mu.Lock()
	e.serving[ip] = container
	e.mu.Unlock()
}

func (e *engineEnv) servingNow(ip string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.serving[ip]
}

// deadlocks tells whether a kube-apiserver started with these flags cannot
// finish its start-up: the fail-closed webhook is in etcd, its backend
// (in the cluster) cannot answer before some API server created the
// bootstrap objects, and the plugin that calls it is on.
func (e *engineEnv) deadlocks(c talostest.ContainerConfig) bool {
	return e.webhook.Load() && !e.bootstrapped.Load() && !talostest.FlagHas(c, "disable-admission-plugins", vaw)
}

// bootstrap: an API server is ready, the cluster's workloads (the
// webhook's backend among them) run again.
func (e *engineEnv) bootstrap() {
	e.bootstrapped.Store(true)
	e.backendOnce.Do(func() {
		ln, err := e.backend.Listen()
		if err != nil {
			return // the wait for the backend then says it does not answer
		}
		e.t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	})
}

func klog(sev byte, file string) string {
	return fmt.Sprintf("%c%s       1 %s]", sev, time.Now().UTC().Format("0102 15:04:05.000000"), file)
}

// Run plays kube-apiserver (talostest.PodRunner): it serves /readyz over
// TLS with a certificate of the cluster CA on the node's address and
// --secure-port; deadlocked, its log shows the webhook refusing the
// start-up writes and /readyz fails the bootstrap hooks, as v1.34 does.
func (e *engineEnv) Run(ctx context.Context, c talostest.Container, logs io.Writer) error {
	if e.refuses != nil {
		if line := e.refuses(c.ContainerConfig); line != "" {
			fmt.Fprintln(logs, line)
			return errors.New("exit status 1")
		}
	}
	fmt.Fprintf(logs, "%s stand-in kube-apiserver %s starting: %s\n", klog('I', "server.go:150"), c.Image, strings.Join(c.Args(), " "))
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(10 * time.Millisecond):
	}
	ip := c.Node.IP
	cert, err := e.servingCert(ip)
	if err != nil {
		fmt.Fprintf(logs, "%s %v\n", klog('E', "server.go:160"), err)
		return err
	}
	ln, err := e.apiPort(ip).Listen()
	if err != nil {
		fmt.Fprintf(logs, "%s failed to listen: %v\n", klog('E', "server.go:170"), err)
		return err
	}
	deadlocked := e.deadlocks(c.ContainerConfig)
	var unreadable []string
	e.mu.Lock()
	check := e.unreadable
	e.mu.Unlock()
	if check != nil {
		unreadable = check(e.cluster.Node(c.Node.IP))
		for _, l := range unreadable {
			fmt.Fprintln(logs, l)
		}
	}
	if deadlocked {
		url := "https://" + e.backend.Addr() + "/validate"
		webhook := testWebhook + ".breakglass.test"
		fmt.Fprintf(logs, "%s Failed calling webhook, failing closed %s: failed calling webhook %q: failed to call webhook: Post \"%s?timeout=10s\": dial tcp %s: connect: connection refused\n",
			klog('W', "dispatcher.go:217"), webhook, webhook, url, e.backend.Addr())
		fmt.Fprintf(logs, "%s \"Event occurred\" object=\"kubernetes\" kind=\"ServiceCIDR\" reason=\"KubernetesDefaultServiceCIDRError\" message=\"The default ServiceCIDR can not be created\"\n", klog('I', "event.go:389"))
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if e.full && e.noSpace(r.Context()) {
			// As kube-apiserver on a full etcd: its writes are refused.
			fmt.Fprintf(logs, "%s \"Unhandled Error\" err=\"etcdserver: mvcc: database space exceeded\"\n", klog('E', "controller.go:145"))
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "[+]ping ok\n[+]etcd ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n")
			return
		}
		e.mu.Lock()
		check := e.unreadable
		e.mu.Unlock()
		if check != nil && len(check(e.cluster.Node(ip))) > 0 { // read again, as the reflector lists again: what was unreadable may be gone
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "[+]ping ok\n[+]etcd ok\n[-]informer-sync failed: reason withheld\nreadyz check failed\n")
			return
		}
		if deadlocked {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "[+]ping ok\n[+]etcd ok\n[-]poststarthook/start-kubernetes-service-cidr-controller failed: reason withheld\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed\n")
			return
		}
		fmt.Fprint(w, "[+]ping ok\n[+]etcd ok\nreadyz check passed\n")
	})
	srv := &http.Server{Handler: handler, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})) //nolint:errcheck
	if !deadlocked && len(unreadable) == 0 {
		fmt.Fprintf(logs, "%s stand-in kube-apiserver: serving, ready\n", klog('I', "server.go:200"))
		e.bootstrap()
	}
	e.setServing(ip, c.ID)
	<-ctx.Done()
	e.setServing(ip, "")
	srv.Close()
	fmt.Fprintf(logs, "%s stand-in kube-apiserver: received SIGTERM, shutting down\n", klog('I', "server.go:210"))
	return nil
}

// waitSettled waits until every control-plane node's kube-apiserver runs
// and serves, and Talos reports that container.
func (e *engineEnv) waitSettled() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range e.cluster.ControlPlanes() {
		for {
			p := n.Pod()
			if p.Running && p.ContainerID != "" && e.servingNow(n.IP) == p.ContainerID {
				n.RefreshPodStatus()
				st, err := e.tc.ReadAPIServerStatus(e.t.Context(), n.IP, n.Name)
				if err == nil && st.Running && strings.HasSuffix(st.ContainerID, p.ContainerID) {
					break
				}
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("node %s: kube-apiserver did not settle: pod %+v, serving %q", n.IP, n.Pod(), e.servingNow(n.IP))
			}
			time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
		}
	}
}

// etcdState is every key in etcd with its value and mod revision, and the
// store's revision.
type etcdState struct {
	Revision int64
	Keys     map[string]string // key -> mod revision and value
}

func (e *engineEnv) etcdState() etcdState {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.kv.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		e.t.Fatal(err)
	}
	s := etcdState{Revision: resp.Header.Revision, Keys: map[string]string{}}
	for _, kv := range resp.Kvs {
		s.Keys[string(kv.Key)] = fmt.Sprintf("%d %x", kv.ModRevision, kv.Value)
	}
	return s
}

func (e *engineEnv) registry() map[string]string {
	out := map[string]string{}
	for k, v := range e.etcdState().Keys {
		if strings.HasPrefix(k, "/registry/") {
			out[k] = v
		}
	}
	return out
}

// webhookInEtcd is the stored webhook configuration, nil when absent.
func (e *engineEnv) webhookInEtcd() []byte {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.kv.Get(ctx, webhookKey)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0].Value
}

// assertConfigsOriginal checks that every node runs, and has on disk, the
// config it started with, byte for byte.
func (e *engineEnv) assertConfigsOriginal(skip ...string) {
	e.t.Helper()
	for _, n := range e.cluster.Nodes {
		if slices.Contains(skip, n.IP) {
			continue
		}
		if !bytes.Equal(n.RunningConfig(), e.original[n.IP]) {
			e.t.Errorf("node %s: the running config differs from the original", n.IP)
		}
		if !bytes.Equal(n.PersistentConfig(), e.originalDisk[n.IP]) {
			e.t.Errorf("node %s: the config on disk differs from the original", n.IP)
		}
	}
}

// assertPodsDisable checks the flags of the kube-apiserver running on
// every control-plane node: with ValidatingAdmissionWebhook disabled or not.
func (e *engineEnv) assertPodsDisable(disabled bool) {
	e.t.Helper()
	for _, n := range e.cluster.ControlPlanes() {
		p := n.Pod()
		if got := talostest.FlagHas(p.Config, "disable-admission-plugins", vaw); !p.Running || got != disabled {
			v, _ := p.Config.Flag("disable-admission-plugins")
			e.t.Errorf("node %s: kube-apiserver running %v with disable-admission-plugins=%q, want %s disabled: %v", n.IP, p.Running, v, vaw, disabled)
		}
	}
}

// assertNothingChanged: the nodes' configs, the state directory's records
// and etcd's admission objects are as they were.
func (e *engineEnv) assertNothingChanged(registry map[string]string) {
	e.t.Helper()
	e.assertConfigsOriginal()
	if recs := admissionRecords(e.t, e); len(recs) > 0 {
		e.t.Errorf("admission records left in the state directory for %v", recs)
	}
	if got := e.registry(); !mapsEqual(got, registry) {
		e.t.Errorf("etcd's /registry changed:\nbefore %v\nafter  %v", registry, got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func hasStep(steps []string, name string) bool { return slices.Contains(steps, name) }

func wantOutcome(t *testing.T, res runOutcome, err error, outcome string, wantErr bool) {
	t.Helper()
	if res.Outcome != outcome || (err != nil) != wantErr {
		t.Fatalf("outcome %q, error %v; want %q (error: %v)\nsteps %+v\nnext %v", res.Outcome, err, outcome, wantErr, res.Steps, res.Next)
	}
}

func wantStep(t *testing.T, res runOutcome, name, outcome string) {
	t.Helper()
	if got := res.step(name); got.Outcome != outcome {
		t.Errorf("step %s: %s (%s), want %s", name, got.Outcome, got.Message, outcome)
	}
}

// The incident breakglass exists for: kube-apiserver deadlocked by a
// fail-closed webhook. The guided recovery diagnoses it from the log and
// /readyz, disables ValidatingAdmissionWebhook, waits for the API server,
// waits for the webhook's backend, puts the plugin back byte for byte and
// verifies.
func TestEngineRecoverDeadlockCompletes(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	var disabledSeen, recordsSeen atomic.Bool
	res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{begin: func(step string) {
		if step == "restore" { // between the two changes: the plugin is off, the API server up
			disabledSeen.Store(true)
			for _, n := range env.cluster.ControlPlanes() {
				disabledSeen.Store(disabledSeen.Load() && talostest.FlagHas(n.Pod().Config, "disable-admission-plugins", vaw))
			}
			recordsSeen.Store(len(admissionRecords(t, env)) == 2)
		}
	}}})
	wantOutcome(t, res, err, "completed", false)
	for _, s := range []string{"preflight", "diagnose", "disable", "wait-apiserver", "wait-webhook", "restore", "verify"} {
		wantStep(t, res, s, "ok")
	}
	wantStep(t, res, "snapshot", "skipped")
	wantStep(t, res, "delete-webhook", "skipped")
	if m := res.step("diagnose").Message; !strings.Contains(m, "admission-deadlock") || !strings.Contains(m, vaw) {
		t.Errorf("diagnose: %q, want the deadlock and its plugin", m)
	}
	if !disabledSeen.Load() || !recordsSeen.Load() {
		t.Errorf("before restore: plugin disabled on every node %v, records kept %v", disabledSeen.Load(), recordsSeen.Load())
	}
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("records left after the restore: %v", recs)
	}
	if !bytes.Equal(env.webhookInEtcd(), env.webhookValue) {
		t.Error("the webhook configuration was changed without --delete")
	}
	if h := lockHolder(t, env); h != "" {
		t.Errorf("the cluster lock is still held by %s", h)
	}
	if info := incident(t, env, res.Incident); info.State != "completed" {
		t.Errorf("journal says %s", info.State)
	}
	if _, err := resumeRun(t, env, res.Incident, engineHooks{}); !errorIs(err, "invalid-input") || !strings.Contains(fmt.Sprint(err), "nothing to resume") {
		t.Errorf("resume of the completed incident: %v", err)
	}
}

// resumeAfter interrupts a recover --delete at step (how: "begin" cancels
// the context as the step begins, "confirm" at its confirmation, "wait"
// right after the disable is applied, while it waits for the new pods),
// then resumes it to the end.
func resumeAfter(t *testing.T, step, how string) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var hooks engineHooks
	switch how {
	case "begin":
		hooks.begin = func(s string) {
			if s == step {
				cancel()
			}
		}
	case "confirm":
		var armed atomic.Bool
		interrupt := func() error {
			if !armed.Load() {
				return nil
			}
			cancel()
			return fmt.Errorf("%w (interrupted at the confirmation)", declined())
		}
		hooks.begin = func(s string) { armed.Store(s == step) }
		hooks.confirm = func(string) error { return interrupt() }
		hooks.confirmText = func(string, string) error { return interrupt() }
	case "wait":
		hooks.progress = func(_, msg string) {
			if strings.Contains(msg, "re-render") || strings.Contains(msg, "new pod") {
				cancel()
			}
		}
	}
	first, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Delete: []string{testWebhook}, Hooks: hooks})
	wantOutcome(t, first, err, "aborted", true)
	wantStep(t, first, step, "aborted")
	if how == "wait" && !slices.ContainsFunc(env.cluster.Nodes, func(n *talostest.Node) bool { return !bytes.Equal(n.RunningConfig(), env.original[n.IP]) }) {
		t.Fatal("interrupted after the apply, but no node was changed")
	}
	done := map[string]bool{}
	for _, s := range first.Steps {
		if s.Outcome == "ok" || s.Outcome == "skipped" {
			done[s.Name] = true
		}
	}

	res, err := resumeRun(t, env, first.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	for name := range done {
		if hasStep(res.Begun, name) {
			t.Errorf("step %s completed in the first run and ran again", name)
		}
		if s := res.step(name); s.Outcome != "skipped" || !strings.Contains(s.Message, "earlier run") {
			t.Errorf("step %s: %+v, want skipped as completed earlier", name, s)
		}
	}
	if !hasStep(res.Begun, step) {
		t.Errorf("the interrupted step %s did not run again (ran %v)", step, res.Begun)
	}
	for _, s := range []string{"delete-webhook", "restore", "verify"} {
		if !done[s] {
			wantStep(t, res, s, "ok")
		}
	}
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("records left: %v", recs)
	}
	if env.webhookInEtcd() != nil {
		t.Error("the webhook configuration is still in etcd")
	}
	if h := lockHolder(t, env); h != "" {
		t.Errorf("the cluster lock is still held by %s", h)
	}
	if info := incident(t, env, first.Incident); info.State != "completed" || !slices.Equal(info.FinishedOutcomes, []string{"aborted", "completed"}) {
		t.Errorf("journal: state %s, finish records %v", info.State, info.FinishedOutcomes)
	}
}

func TestEngineResumeAfterInterruptAtDisable(t *testing.T) { resumeAfter(t, "disable", "begin") }

// Applied on the nodes, but interrupted while waiting for the new pods: the
// resumed disable finds the plugin already off and goes on.
func TestEngineResumeAfterInterruptDuringDisableWait(t *testing.T) { resumeAfter(t, "disable", "wait") }

func TestEngineResumeAfterInterruptAtDelete(t *testing.T) {
	resumeAfter(t, "delete-webhook", "confirm")
}

func TestEngineResumeAfterInterruptAtRestore(t *testing.T) { resumeAfter(t, "restore", "begin") }

func TestEngineResumeAfterInterruptAtRestoreConfirm(t *testing.T) {
	resumeAfter(t, "restore", "confirm")
}

// Ctrl-C while a step talks to the nodes: the run ends as aborted, and
// its error says so too, since the exit code (8, "declined at the
// confirmation, or interrupted") is read from the error, not the outcome.
func TestEngineInterruptedRunErrorIsAborted(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{begin: func(s string) {
		if s == "disable" {
			cancel()
		}
	}}})
	wantOutcome(t, res, err, "aborted", true)
	wantStep(t, res, "disable", "aborted")
	if k := exitKind(err); k != "declined" || !errorIs(err, "aborted") {
		t.Errorf("the run ended %s, but its error does not say so: exit code %s, not declined (8): %v (%#v)", res.Outcome, k, err, err)
	}
	env.assertConfigsOriginal()
}

// recover --delete --keep-disabled removes the webhook configuration and
// leaves the plugin off; revert --objects puts both back: the configs
// byte for byte, the object byte-identical in etcd.
func TestEngineRevertRestoresPluginsAndObject(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	res, err := recoverRun(t, env, recoverRequest{Delete: []string{testWebhook}, KeepDisabled: true})
	wantOutcome(t, res, err, "completed", false)
	wantStep(t, res, "snapshot", "ok")
	wantStep(t, res, "delete-webhook", "ok")
	wantStep(t, res, "restore", "skipped")
	if env.webhookInEtcd() != nil {
		t.Fatal("the webhook configuration is still in etcd")
	}
	env.assertPodsDisable(true)
	if info := incident(t, env, res.Incident); !slices.Contains(info.Files, "etcd.snapshot") || !slices.ContainsFunc(info.Files, func(f string) bool { return strings.HasPrefix(f, "backup-delete-webhook") }) {
		t.Errorf("incident files %v: want the snapshot and the backup", info.Files)
	}

	rev, err := revertRun(t, env, res.Incident, true, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	wantStep(t, rev, "revert-admission", "ok")
	wantStep(t, rev, "revert-objects", "ok")
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("records left: %v", recs)
	}
	if got := env.webhookInEtcd(); !bytes.Equal(got, env.webhookValue) {
		t.Errorf("restored object differs (%d bytes, want %d)", len(got), len(env.webhookValue))
	}
	if h := lockHolder(t, env); h != "" {
		t.Errorf("the cluster lock is still held by %s", h)
	}
}

// revert --dry-run --objects of a recover --delete --keep-disabled: it
// changes nothing (configs, records, etcd's revision), says which objects
// it would restore, and does not claim that nothing was disabled.
func TestEngineRevertDryRunChangesNothing(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	res, err := recoverRun(t, env, recoverRequest{Delete: []string{testWebhook}, KeepDisabled: true})
	wantOutcome(t, res, err, "completed", false)
	n := env.cluster.Nodes[0]
	disabled, records, before := n.RunningConfig(), admissionRecords(t, env), env.etcdState()

	rev, err := revertRun(t, env, res.Incident, true, true, engineHooks{
		confirm: func(q string) error { return fmt.Errorf("a dry run asked %q", q) },
	})
	wantOutcome(t, rev, err, "completed", false)
	if m := rev.step("revert-objects").Message; rev.step("revert-objects").Outcome != "ok" || !strings.Contains(m, "would-restore") {
		t.Errorf("revert-objects: %+v", rev.step("revert-objects"))
	}
	if !bytes.Equal(n.RunningConfig(), disabled) || !slices.Equal(admissionRecords(t, env), records) {
		t.Error("the dry run changed the node or the records")
	}
	if after := env.etcdState(); after.Revision != before.Revision || !mapsEqual(after.Keys, before.Keys) {
		t.Errorf("etcd changed: revision %d -> %d", before.Revision, after.Revision)
	}
	if m := rev.step("revert-admission").Message; strings.Contains(m, "nothing was disabled") {
		t.Errorf("revert-admission says %q, but %s runs with %s disabled by this incident", m, n.IP, vaw)
	}
}

// Another engineer's run holds the cluster lock: recover is refused as a
// conflict naming it, and nothing changes, not even in etcd.
func TestEngineLockHeldByAnotherRun(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	holdLock(t, env, "alice@laptop", "20260101-000000-alice1")
	before := env.etcdState()
	res, err := recoverRun(t, env, recoverRequest{Delete: []string{testWebhook}})
	wantOutcome(t, res, err, "failed", true)
	if exitKind(err) != "conflict" || !strings.Contains(fmt.Sprint(err), "alice@laptop") {
		t.Errorf("recover under someone's lock: %v (exit code %s), want a conflict naming the holder", err, exitKind(err))
	}
	if !errorIs(err, "conflict") {
		t.Errorf("recover under someone's lock: errors.Is(err, failure.Conflict) is false for %v (%#v)", err, err)
	}
	wantStep(t, res, "preflight", "failed")
	if len(res.Begun) != 1 {
		t.Errorf("steps run after the refusal: %v", res.Begun)
	}
	if after := env.etcdState(); after.Revision != before.Revision || !mapsEqual(after.Keys, before.Keys) {
		t.Errorf("etcd changed: revision %d -> %d", before.Revision, after.Revision)
	}
	env.assertNothingChanged(env.registry())
	env.assertPodsDisable(false)
	if h := lockHolder(t, env); h != "20260101-000000-alice1" {
		t.Errorf("lock holder now %q", h)
	}
	if !slices.ContainsFunc(res.Next, func(s string) bool { return strings.Contains(s, "nothing was changed") }) {
		t.Errorf("next %v: should say nothing was changed", res.Next)
	}
}

// recover --dry-run walks the whole runbook (the nodes validate the
// change) and touches nothing: configs, etcd's revision, the state
// directory (the journal only, marked dry run).
func TestEngineDryRunChangesNothing(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	before := env.etcdState()
	res, err := recoverRun(t, env, recoverRequest{DryRun: true, Delete: []string{testWebhook}})
	wantOutcome(t, res, err, "completed", false)
	if !res.DryRun {
		t.Error("the result is not marked dry run")
	}
	wantStep(t, res, "disable", "ok")
	wantStep(t, res, "delete-webhook", "ok")
	if m := res.step("disable").Message; !strings.Contains(m, "dry run") {
		t.Errorf("disable: %q", m)
	}
	if m := res.step("delete-webhook").Message; !strings.Contains(m, "dry run") {
		t.Errorf("delete: %q", m)
	}
	if after := env.etcdState(); after.Revision != before.Revision || !mapsEqual(after.Keys, before.Keys) {
		t.Errorf("etcd changed: revision %d -> %d", before.Revision, after.Revision)
	}
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("admission records written: %v", recs)
	}
	info := incident(t, env, res.Incident)
	if !info.DryRun || !slices.Equal(info.Files, []string{"journal.jsonl"}) {
		t.Errorf("incident: dry run %v, files %v; want a dry-run journal and nothing else", info.DryRun, info.Files)
	}
	for _, n := range env.cluster.Nodes {
		if pending, _ := n.RollbackPending(); pending {
			t.Errorf("node %s: a try-mode change is pending after the dry run", n.IP)
		}
	}
}

// The operator answers no to the disable: nothing changes, and the run
// ends as aborted (exit code of a declined confirmation).
func TestEngineDeclinedConfirmation(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	registry := env.registry()
	var asked atomic.Int32
	res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{confirm: func(string) error { asked.Add(1); return declined() }}})
	if !errorIs(err, "aborted") {
		t.Fatalf("declined: %v, want ErrAborted", err)
	}
	wantOutcome(t, res, err, "aborted", true)
	wantStep(t, res, "disable", "aborted")
	if asked.Load() != 1 || hasStep(res.Begun, "wait-apiserver") {
		t.Errorf("asked %d time(s); steps begun %v", asked.Load(), res.Begun)
	}
	env.assertNothingChanged(registry)
	if h := lockHolder(t, env); h != "" {
		t.Errorf("the cluster lock is still held by %s", h)
	}
}

// admission disable outside a guided recovery is journaled as an
// incident; revert of that incident puts the plugins back, byte for byte.
func TestEngineStandaloneDisableThenRevert(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	id, err := standaloneDisable(t, env, []string{vaw})
	if err != nil || id == "" {
		t.Fatalf("admission disable: incident %q, %v", id, err)
	}
	env.assertPodsDisable(true)
	if info := incident(t, env, id); !info.Standalone || info.State != "completed" {
		t.Errorf("incident %s: standalone %v, state %s", id, info.Standalone, info.State)
	}
	if recs := admissionRecords(t, env); len(recs) != 2 {
		t.Errorf("records %v, want both nodes", recs)
	}

	res, err := revertRun(t, env, id, false, false, engineHooks{})
	wantOutcome(t, res, err, "reverted", false)
	wantStep(t, res, "revert-admission", "ok")
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("records left: %v", recs)
	}
	if h := lockHolder(t, env); h != "" {
		t.Errorf("the cluster lock is still held by %s", h)
	}
}

// A standalone change has no runbook to continue: resume says so, as bad
// input with the command to run instead, and changes nothing.
func TestEngineResumeStandaloneRefused(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	id, err := standaloneDisable(t, env, []string{vaw})
	if err != nil {
		t.Fatal(err)
	}
	disabled := env.cluster.Nodes[0].RunningConfig()
	res, err := resumeRun(t, env, id, engineHooks{})
	if err == nil || !errorIs(err, "invalid-input") || !strings.Contains(err.Error(), "nothing to resume") {
		t.Fatalf("resume %s: %v, want bad input saying there is nothing to resume", id, err)
	}
	if len(res.Begun) > 0 {
		t.Errorf("steps ran: %v", res.Begun)
	}
	// Without an ID, the newest interrupted guided recovery: there is none.
	if _, err := resumeRun(t, env, "", engineHooks{}); err == nil || !errorIs(err, "invalid-input") || !strings.Contains(err.Error(), "no interrupted incident") {
		t.Errorf("resume without an ID: %v", err)
	}
	if !bytes.Equal(env.cluster.Nodes[0].RunningConfig(), disabled) {
		t.Error("the refused resume changed the node")
	}
}

// kube-apiserver is healthy: recover stops after the diagnosis, a success
// with nothing changed.
func TestEngineHealthyNothingToDo(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2})
	registry := env.registry()
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "nothing-to-do", false)
	if !slices.Equal(res.Begun, []string{"preflight", "diagnose"}) {
		t.Errorf("steps begun %v, want preflight and diagnose only", res.Begun)
	}
	env.assertNothingChanged(registry)
	if h := lockHolder(t, env); h != "" {
		t.Errorf("the cluster lock is still held by %s", h)
	}
	if info := incident(t, env, res.Incident); info.State != "nothing-to-do" {
		t.Errorf("journal says %s", info.State)
	}
}

// addExtraArg is the config with one more cluster.apiServer.extraArgs
// entry (the generated config has none).
func addExtraArg(t *testing.T, cfg []byte, line string) []byte {
	t.Helper()
	const anchor = "\n    apiServer:\n"
	if bytes.Count(cfg, []byte(anchor)) != 1 || bytes.Contains(cfg, []byte("        extraArgs:")) {
		t.Fatal("unexpected generated config")
	}
	return bytes.Replace(cfg, []byte(anchor), []byte(anchor+"        extraArgs:\n            "+line+"\n"), 1)
}

// Someone changes the second node's config between the plan and the
// apply: that node is refused (conflict), the first one is disabled; the
// run fails as a partial failure, names the revert, and the revert puts
// the first node back while keeping the other one's change.
func TestEngineOneNodeChangedMeanwhile(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true})
	n1, n2 := env.cluster.Nodes[0], env.cluster.Nodes[1]
	theirs := addExtraArg(t, env.original[n2.IP], "event-ttl: 2h0m0s")
	res, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{confirm: func(q string) error {
		if strings.HasPrefix(q, "disable") {
			_, err := env.tc.Apply(t.Context(), n2.IP, talos.ApplyRequest{Config: theirs, Mode: talos.NoReboot})
			return err
		}
		return nil
	}}})
	wantOutcome(t, res, err, "failed", true)
	if !errorIs(err, "partial") || !errorIs(err, "conflict") || !strings.Contains(err.Error(), n2.IP) {
		t.Fatalf("error %v: want a partial failure, a conflict naming %s", err, n2.IP)
	}
	wantStep(t, res, "disable", "failed")
	if hasStep(res.Begun, "wait-apiserver") {
		t.Errorf("went on after the failed disable: %v", res.Begun)
	}
	if !slices.ContainsFunc(res.Next, func(s string) bool { return strings.Contains(s, "breakglass revert "+res.Incident) }) {
		t.Errorf("next %v: should name the revert", res.Next)
	}
	if recs := admissionRecords(t, env); !slices.Equal(recs, []string{n1.IP}) {
		t.Errorf("records %v, want the disabled node %s only", recs, n1.IP)
	}
	if !talostest.FlagHas(n1.Pod().Config, "disable-admission-plugins", vaw) {
		t.Errorf("node %s: the plugin is not disabled", n1.IP)
	}

	rev, err := revertRun(t, env, res.Incident, false, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	env.assertConfigsOriginal(n2.IP)
	if !bytes.Equal(n2.RunningConfig(), theirs) {
		t.Errorf("node %s: the other change was not kept", n2.IP)
	}
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("records left: %v", recs)
	}
}

// A worker among the target nodes: preflight refuses it by name before
// anything changes or the lock is taken.
func TestEngineWorkerNodeRefusedInPreflight(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 1, workers: 1, targetWorkers: true, deadlock: true})
	before := env.etcdState()
	res, err := recoverRun(t, env, recoverRequest{})
	wantOutcome(t, res, err, "failed", true)
	worker := env.cluster.Nodes[1].IP
	if !strings.Contains(fmt.Sprint(err), worker) || !strings.Contains(fmt.Sprint(err), "control") {
		t.Fatalf("error %v: want the worker %s named as not a control plane", err, worker)
	}
	if !slices.Equal(res.Begun, []string{"preflight"}) {
		t.Errorf("steps begun %v", res.Begun)
	}
	if after := env.etcdState(); after.Revision != before.Revision {
		t.Errorf("etcd changed: revision %d -> %d", before.Revision, after.Revision)
	}
	env.assertConfigsOriginal()
}

// recover --delete of an object that is not in etcd stops in preflight,
// with the names that are there, before any change (not even the lock).
func TestEngineRequestedDeleteMissingFailsInPreflight(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	before := env.etcdState()
	res, err := recoverRun(t, env, recoverRequest{Delete: []string{"kyverno-resource-validating-webhook"}})
	wantOutcome(t, res, err, "failed", true)
	var nf *etcd.NotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), testWebhook) {
		t.Fatalf("error %v: want the missing name, with the one present", err)
	}
	wantStep(t, res, "preflight", "failed")
	if len(res.Begun) != 1 {
		t.Errorf("steps begun %v", res.Begun)
	}
	if after := env.etcdState(); after.Revision != before.Revision || !mapsEqual(after.Keys, before.Keys) {
		t.Errorf("etcd changed: revision %d -> %d", before.Revision, after.Revision)
	}
	env.assertConfigsOriginal()
	if recs := admissionRecords(t, env); len(recs) > 0 {
		t.Errorf("records: %v", recs)
	}
}

// killedAfterDeleteNoted is a recover --delete of the test webhook,
// interrupted as the wait for the webhook's backend begins, whose journal
// is then cut as a kill leaves it right after delete-webhook noted its
// backup (the lock.pid of a dead process, the lease still held).
func killedAfterDeleteNoted(t *testing.T, env *engineEnv) runOutcome {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Delete: []string{testWebhook}, Hooks: engineHooks{begin: func(s string) {
		if s == "wait-webhook" {
			cancel()
		}
	}}})
	wantOutcome(t, first, err, "aborted", true)
	simulateKillAfter(t, env, first.Incident, "note", "delete-webhook")
	return first
}

// The run is killed right after the webhook configuration was deleted
// from etcd, before the step's end was journaled; its lease on the cluster
// lock is still alive. resume takes the dead run's lock over, sees the
// object gone with its verified backup, goes on to the end; revert
// --objects then restores the object from that backup, byte-identical.
func TestEngineResumeAfterKillDuringDelete(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	first := killedAfterDeleteNoted(t, env)
	wantStep(t, first, "delete-webhook", "ok")
	if env.webhookInEtcd() != nil {
		t.Fatal("not deleted")
	}
	if info := incident(t, env, first.Incident); info.State != "interrupted" || info.LastStep != "delete-webhook" {
		t.Fatalf("after the kill the journal says %s at %s", info.State, info.LastStep)
	}

	res, err := resumeRun(t, env, "", engineHooks{confirmText: func(q, w string) error {
		return fmt.Errorf("asked to type %q again for an object already removed", w)
	}})
	wantOutcome(t, res, err, "completed", false)
	if s := res.step("delete-webhook"); s.Outcome != "ok" || !strings.Contains(s.Message, "already removed") {
		t.Errorf("delete-webhook: %+v, want already removed in the earlier run", s)
	}
	env.assertConfigsOriginal()
	env.assertPodsDisable(false)
	if h := lockHolder(t, env); h != "" {
		t.Errorf("the cluster lock is still held by %s", h)
	}

	rev, err := revertRun(t, env, first.Incident, true, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	if got := env.webhookInEtcd(); !bytes.Equal(got, env.webhookValue) {
		t.Errorf("restored object differs (%d bytes, want %d)", len(got), len(env.webhookValue))
	}
	env.assertConfigsOriginal()
}

// The same kill, one step earlier: the backup was written, the object not
// yet deleted. The backup is never overwritten; resume writes its own
// beside it and deletes the object once; revert restores it.
func TestEngineResumeAfterKillBetweenBackupAndDelete(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true})
	first := killedAfterDeleteNoted(t, env)
	// The delete had not happened yet: the object is there, as it was.
	putCtx, putCancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer putCancel()
	if _, err := env.kv.Put(putCtx, webhookKey, string(env.webhookValue)); err != nil {
		t.Fatal(err)
	}

	res, err := resumeRun(t, env, first.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	if s := res.step("delete-webhook"); s.Outcome != "ok" || !strings.Contains(s.Message, "removed ") || !strings.Contains(s.Message, testWebhook) || strings.Contains(s.Message, "already") {
		t.Errorf("delete-webhook: %+v", s)
	}
	if env.webhookInEtcd() != nil {
		t.Error("the webhook configuration is still in etcd")
	}
	info := incident(t, env, first.Incident)
	if !slices.Contains(info.Files, "backup-delete-webhook.json") || !slices.Contains(info.Files, "backup-delete-webhook-2.json") {
		t.Errorf("incident files %v: want the first backup kept and a second one", info.Files)
	}
	env.assertConfigsOriginal()

	rev, err := revertRun(t, env, first.Incident, true, false, engineHooks{})
	wantOutcome(t, rev, err, "reverted", false)
	if got := env.webhookInEtcd(); !bytes.Equal(got, env.webhookValue) {
		t.Errorf("restored object differs (%d bytes, want %d)", len(got), len(env.webhookValue))
	}
}
