package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// These tests prove `breakglass recover` (issue 5) end to end: the real
// command as a subprocess, against a lab deadlocked by the
// kyverno-servicecidr scenario, with real kube-apiserver binaries.
//
// What the scenario needs, checked by TestDeadlockAndBothWebhookPlugins:
// its validating AND mutating webhooks are fail-closed and catch-all, so
// the built-in webhook-deadlock runbook alone (ValidatingAdmissionWebhook)
// leaves the default ServiceCIDR blocked by the mutating webhook. The
// diagnosis finds both (TestRecoverNoFlags: recover as typed); the tests of
// other paths pass --plugins with both (RecoveryPlugins) to be independent
// of it, and the runbook picks which kind of object --delete names.

// guided is one lab with a deadlocked kube-apiserver and what the tests
// need to drive breakglass against it.
type guided struct {
	t        *testing.T
	l        *Lab
	tc       *talos.Client
	bin      string
	stateDir string
	st       recovery.State
	orig     map[string]string // node -> config hash before anything
	keys     []string          // etcd keys of the scenario's objects
	etcdEP   string            // --etcd-endpoints (the lab's free ports, not 2379)
	started  time.Time         // when the scenario's deadlock was there
}

func newGuided(t *testing.T, nodes int) *guided {
	t.Helper()
	return newGuidedWith(t, nodes, func(ctx context.Context, l *Lab) error {
		_, err := RunScenario(ctx, l, ScenarioKyvernoServiceCIDR, NewTimeline(testWriter{t}))
		return err
	}, objectKey(ValidatingWebhookConfig), objectKey(MutatingWebhookConfig))
}

// newGuidedWith starts a lab, plays scenario on it, and remembers the
// configs and the etcd keys of the scenario's objects (which must exist).
func newGuidedWith(t *testing.T, nodes int, scenario func(context.Context, *Lab) error, keys ...string) *guided {
	t.Helper()
	l := startLab(t, nodes, DefaultKubelet())
	if err := scenario(context.Background(), l); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	g := guidedOn(t, l)
	g.keys = keys
	g.mustHaveKeys(keys...)
	return g
}

// guidedOn is breakglass driven against the lab l, whose scenario has run.
func guidedOn(t *testing.T, l *Lab) *guided {
	t.Helper()
	bin := buildBreakglass(t)
	ctx := context.Background()
	tc, err := l.TalosClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	g := &guided{t: t, l: l, tc: tc, bin: bin, stateDir: filepath.Join(l.Dir, "state"), etcdEP: strings.Join(l.Etcd.Endpoints, ","), started: time.Now()}
	g.st = recovery.State{Dir: g.stateDir}
	g.orig = configHashes(t, ctx, tc, l.Nodes())
	return g
}

// deadlockedAgain waits until every node's kube-apiserver is back in the
// deadlock. A revert returns once the kubelet runs the new pod; until its
// kube-apiserver has reached etcd, readyz fails on every check, etcd
// included, which a diagnosis rightly does not call a webhook deadlock.
func (g *guided) deadlockedAgain() {
	g.t.Helper()
	ctx := withTimeout(g.t, context.Background(), 2*time.Minute)
	kube, err := g.l.Kube(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, server := range g.l.APIServers() {
		var failing []string
		for !slices.Contains(failing, DeadlockCheck) || slices.Contains(failing, "etcd") {
			var ready bool
			ready, failing, err = kube.WithServer(server).Readyz(ctx)
			if ready || ctx.Err() != nil {
				g.t.Fatalf("%s: not back in the deadlock (ready %v, failing %v, %v)", server, ready, failing, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// command is breakglass with the lab's talosconfig and a state directory of
// its own; the etcd endpoints go to the commands that take them.
func (g *guided) command(args ...string) *exec.Cmd {
	full := append([]string{"--talosconfig", g.l.Talosconfig, "--state-dir", g.stateDir}, args...)
	cmd := exec.Command(g.bin, full...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	return cmd
}

// etcdFlags are for recover, revert and lock: the lab's etcd is not on 2379.
func (g *guided) etcdFlags() []string { return []string{"--etcd-endpoints", g.etcdEP} }

type result struct {
	stdout, stderr string
	code           int
}

// run runs breakglass to the end with stdin (empty: none) and returns its
// output and exit code.
func (g *guided) run(stdin string, args ...string) result {
	g.t.Helper()
	cmd := g.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(stdin)
	err := runWithin(cmd, 5*time.Minute)
	return result{out.String(), errb.String(), exitCode(g.t, err, args)}
}

func runWithin(cmd *exec.Cmd, d time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running after %s: killed", d)
	}
}

func exitCode(t *testing.T, err error, args []string) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	}
	t.Fatalf("breakglass %v: %v", args, err)
	return -1
}

func (g *guided) mustHaveObjects(names ...string) {
	g.t.Helper()
	for _, n := range names {
		g.mustHaveKeys(objectKey(n))
	}
}

func (g *guided) mustHaveKeys(keys ...string) {
	g.t.Helper()
	for _, k := range keys {
		if ok, err := g.l.EtcdKeyExists(context.Background(), k); err != nil || !ok {
			g.t.Fatalf("%s missing from etcd (%v)", k, err)
		}
	}
}

func objectKey(name string) string {
	if name == MutatingWebhookConfig {
		return "/registry/mutatingwebhookconfigurations/" + name
	}
	return "/registry/validatingwebhookconfigurations/" + name
}

// unchanged: every node's config is still the original and breakglass
// holds no record of a change, the scenario's objects are still in etcd,
// and the lock is free.
func (g *guided) unchanged(when string) {
	g.t.Helper()
	ctx := context.Background()
	now := configHashes(g.t, ctx, g.tc, g.l.Nodes())
	for _, ip := range g.l.Nodes() {
		if now[ip] != g.orig[ip] {
			g.t.Errorf("%s: node %s: config changed (%s, was %s)", when, ip, now[ip], g.orig[ip])
		}
		if rec, err := g.st.LoadAdmission(g.l.Cluster.Name, ip); err != nil || rec != nil {
			g.t.Errorf("%s: node %s: a state record exists (%+v, %v)", when, ip, rec, err)
		}
	}
	g.mustHaveKeys(g.keys...)
	g.lockFree(when)
}

func (g *guided) lockHolder() *etcd.LockHolder {
	g.t.Helper()
	r := g.run("", append([]string{"lock", "status", "-o", "json"}, g.etcdFlags()...)...)
	if r.code != 0 {
		g.t.Fatalf("lock status: exit %d\n%s", r.code, r.stderr)
	}
	var v struct {
		Holder *etcd.LockHolder `json:"holder"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		g.t.Fatalf("lock status -o json: %v: %s", err, r.stdout)
	}
	return v.Holder
}

func (g *guided) lockFree(when string) {
	g.t.Helper()
	if h := g.lockHolder(); h != nil {
		g.t.Errorf("%s: the cluster lock is still held: %+v", when, *h)
	}
}

// explained: each node runs the original config (and a record, if any,
// says it started from it), or exactly the change a record describes, made
// from the original. Anything else is a config the state directory cannot
// explain.
func (g *guided) explained(when string) {
	g.t.Helper()
	ctx := context.Background()
	for _, ip := range g.l.Nodes() {
		cfg, err := g.tc.ReadMachineConfig(ctx, ip)
		if err != nil {
			g.t.Fatalf("%s: %v", when, err)
		}
		rec, err := g.st.LoadAdmission(g.l.Cluster.Name, ip)
		if err != nil {
			g.t.Fatalf("%s: node %s: state record unreadable: %v", when, ip, err)
		}
		h := cfg.Hash()
		switch {
		case h == g.orig[ip] && (rec == nil || rec.ConfigHashBefore == g.orig[ip]):
		case rec != nil && h == rec.ConfigHashAfter && rec.ConfigHashBefore == g.orig[ip]:
		default:
			g.t.Fatalf("%s: node %s runs a config the state directory cannot explain: hash %s, original %s, record %+v", when, ip, h, g.orig[ip], rec)
		}
	}
}

// records are the admission records of every node; nil when a node has
// none (a restore killed a moment ago had already removed it).
func (g *guided) records() []*recovery.AdmissionRecord {
	g.t.Helper()
	var out []*recovery.AdmissionRecord
	for _, ip := range g.l.Nodes() {
		rec, err := g.st.LoadAdmission(g.l.Cluster.Name, ip)
		if err != nil {
			g.t.Fatal(err)
		}
		if rec == nil {
			g.t.Logf("node %s: no admission record left before the restore run", ip)
			return nil
		}
		out = append(out, rec)
	}
	return out
}

// waitConfigs waits until every node's config has the wanted hash.
func (g *guided) waitConfigs(want map[string]string, exited <-chan struct{}) {
	g.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if maps.Equal(configHashes(g.t, context.Background(), g.tc, g.l.Nodes()), want) {
			return
		}
		select {
		case <-exited:
			g.t.Fatal("breakglass exited before the configs changed")
		default:
		}
		if time.Now().After(deadline) {
			g.t.Fatal("the configs did not change within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// journaledBackup is the backup path the incident's delete-webhook step
// recorded when it ended ok.
func (g *guided) journaledBackup(id string) string {
	g.t.Helper()
	return g.journaledBackupOf(id, "delete-webhook")
}

func (g *guided) journaledBackupOf(id, step string) string {
	g.t.Helper()
	var p string
	for _, e := range journalEntries(g.journalPath(id)) {
		if e.Kind == "end" && e.Step == step && e.Outcome == recovery.OutcomeOK {
			var d recovery.DeleteResult
			if json.Unmarshal(e.Data, &d) == nil {
				p = d.Backup
			}
		}
	}
	if p == "" {
		g.t.Fatalf("incident %s: no backup recorded by %s", id, step)
	}
	if filepath.Dir(p) != filepath.Join(g.stateDir, "incidents", id) {
		g.t.Errorf("backup %s is not in the incident directory", p)
	}
	return p
}

// recovered checks the end state of a completed recovery that removed
// deleted (one of the scenario's configurations) from etcd, backed up to
// backup: API server ready with the webhook plugins on, no flag, configs
// byte-identical, no record left, the object gone and its backup verified,
// the other configuration still there and its webhook called, lock free.
func (g *guided) recovered(deleted, backup string) {
	g.t.Helper()
	ctx := context.Background()
	health, err := recovery.CheckHealth(ctx, g.tc)
	if err != nil {
		g.t.Fatalf("health after recovery: %v", err)
	}
	for _, h := range health {
		if !h.Ready {
			g.t.Errorf("node %s not ready after recovery: %s", h.Node, h.Summary())
		}
	}
	final := configHashes(g.t, ctx, g.tc, g.l.Nodes())
	for _, ip := range g.l.Nodes() {
		if final[ip] != g.orig[ip] {
			g.t.Errorf("node %s: config not byte-identical after recovery: %s, was %s", ip, final[ip], g.orig[ip])
		}
		pod, err := g.tc.ReadAPIServerPod(ctx, ip)
		if err != nil {
			g.t.Fatal(err)
		}
		if v := pod.DisabledPlugins(); len(v) > 0 {
			g.t.Errorf("node %s: kube-apiserver still runs with --disable-admission-plugins=%v", ip, v)
		}
		if rec, err := g.st.LoadAdmission(g.l.Cluster.Name, ip); err != nil || rec != nil {
			g.t.Errorf("node %s: state record left after a completed recovery: %+v (%v)", ip, rec, err)
		}
	}
	if ok, err := g.l.EtcdKeyExists(ctx, objectKey(deleted)); err != nil || ok {
		g.t.Errorf("%s still in etcd after recovery (%v)", objectKey(deleted), err)
	}
	other := MutatingWebhookConfig
	if deleted == MutatingWebhookConfig {
		other = ValidatingWebhookConfig
	}
	g.mustHaveObjects(other)
	b, err := etcd.ReadBackup(backup)
	if err != nil {
		g.t.Fatalf("backup of %s: %v", deleted, err)
	}
	if len(b.Keys) != 1 || b.Keys[0].Key != objectKey(deleted) {
		g.t.Errorf("backup %s holds %+v, want exactly %s", backup, b.Keys, objectKey(deleted))
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		g.t.Errorf("backup %s: mode %v (%v), want 0600", backup, fi.Mode().Perm(), err)
	}
	// The remaining webhook is enforced again: its backend answers a review.
	kube, err := g.l.Kube(ctx)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := probeOne(ctx, kube, g.l.Webhook); err != nil {
		g.t.Errorf("the remaining webhook is not called after recovery: %v", err)
	}
	g.lockFree("after recovery")
}

// probeOne writes a ConfigMap and waits until the backend has answered at
// least one review for it (one webhook configuration is left).
func probeOne(ctx context.Context, kube *KubeClient, b *WebhookBackend) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		before := b.AnsweredKind("ConfigMap")
		body := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("recover-probe-%d-%d", time.Now().UnixNano()%1e6, i), "namespace": "default"}}
		err := kube.Do(ctx, "POST", "/api/v1/namespaces/default/configmaps", body, nil)
		if err == nil && b.AnsweredKind("ConfigMap") > before {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no review answered for a new ConfigMap (create: %v)", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// decodeResult reads `-o json` output of recover/resume/revert.
func decodeResult(t *testing.T, out string) recovery.RecoverResult {
	t.Helper()
	var res recovery.RecoverResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("-o json output is not a RecoverResult: %v\n%s", err, out)
	}
	return res
}

// runbookSteps lists the step names of a built-in runbook, from the CLI.
func (g *guided) runbookSteps(name string) []string {
	g.t.Helper()
	r := g.run("", "runbook", "show", name, "-o", "json")
	if r.code != 0 {
		g.t.Fatalf("runbook show %s: exit %d: %s", name, r.code, r.stderr)
	}
	var rb struct {
		Spec struct {
			Steps []struct {
				Name string `json:"name"`
			} `json:"steps"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rb); err != nil {
		g.t.Fatal(err)
	}
	var out []string
	for _, s := range rb.Spec.Steps {
		out = append(out, s.Name)
	}
	return out
}

// timelineLists checks that `journal timeline ID --format markdown` names
// every step.
func (g *guided) timelineLists(id string, steps []string) {
	g.t.Helper()
	r := g.run("", "journal", "timeline", id, "--format", "markdown")
	if r.code != 0 {
		g.t.Fatalf("journal timeline: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "|") {
		g.t.Errorf("timeline is not a markdown table:\n%s", r.stdout)
	}
	for _, s := range steps {
		if !strings.Contains(r.stdout, s) {
			g.t.Errorf("timeline of %s lacks step %s:\n%s", id, s, r.stdout)
		}
	}
	g.t.Logf("journal timeline %s --format markdown:\n%s", id, r.stdout)
}

// journalPath is an incident's journal file.
func (g *guided) journalPath(id string) string {
	return filepath.Join(g.stateDir, "incidents", id, "journal.jsonl")
}

// incidents lists the incident IDs in the state directory.
func (g *guided) incidents() map[string]bool {
	ents, _ := os.ReadDir(filepath.Join(g.stateDir, "incidents"))
	out := map[string]bool{}
	for _, e := range ents {
		if e.IsDir() {
			out[e.Name()] = true
		}
	}
	return out
}

// newIncident is the incident that is not in before ("" while there is
// none; IDs made in the same second do not sort by time).
func (g *guided) newIncident(before map[string]bool) string {
	for id := range g.incidents() {
		if !before[id] {
			return id
		}
	}
	return ""
}

// journalEntries reads a journal, tolerating a missing file.
func journalEntries(path string) []recovery.Entry {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []recovery.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<24)
	for sc.Scan() {
		var e recovery.Entry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// waitBegin waits until the journal at path has more than skip records and
// one of the new ones begins step; it fails if the process ends first.
func waitBegin(t *testing.T, path string, skip int, step string, exited <-chan struct{}, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		es := journalEntries(path)
		for i := skip; i < len(es); i++ {
			if es[i].Kind == "begin" && es[i].Step == step {
				return es[i].Time
			}
		}
		select {
		case <-exited:
			t.Fatalf("breakglass exited before step %s began", step)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("step %s did not begin within %s", step, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// bg is a breakglass process running in the background.
type bg struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	errOut *lockedBuffer
	exited chan struct{}
	err    error
}

func (g *guided) start(stdin io.Reader, args ...string) *bg {
	g.t.Helper()
	p := &bg{cmd: g.command(args...), out: &lockedBuffer{}, errOut: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr, p.cmd.Stdin = p.out, p.errOut, stdin
	if err := p.cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	g.t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// waitDisableBegins waits until the recover running in p has opened its
// incident (one not in before) and begun its disable step; it returns the
// incident's ID.
func (g *guided) waitDisableBegins(p *bg, before map[string]bool) string {
	g.t.Helper()
	var id string
	for id == "" {
		select {
		case <-p.exited:
			g.t.Fatalf("recover ended early:\n%s", p.errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		id = g.newIncident(before)
	}
	waitBegin(g.t, g.journalPath(id), 0, "disable", p.exited, time.Minute)
	return id
}

func (p *bg) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("breakglass %v still running after %s:\n%s", p.cmd.Args, d, p.errOut.String())
	}
	return exitCode(t, p.err, p.cmd.Args)
}

// TestRecoverGuidedYes is the guided flow non-interactively on three nodes:
// `recover --yes` with both webhook plugins and --delete of the validating
// configuration, while a second engineer's `recover` is refused naming the
// holder and `lock status` shows it; then the end state, the journal
// timeline, the JSON result, and the lock free again.
func TestRecoverGuidedYes(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuided(t, 3)
	args := append([]string{"recover", "--yes", "-o", "json",
		"--plugins", strings.Join(RecoveryPlugins, ","), "--delete", ValidatingWebhookConfig}, g.etcdFlags()...)
	before := g.incidents()
	t0 := time.Now()
	first := g.start(nil, args...)

	// Once the disable step begins, preflight has taken the lock.
	id := g.waitDisableBegins(first, before)

	h := g.lockHolder()
	if h == nil || h.Incident != id || h.Command != "recover" || h.By == "" {
		t.Errorf("lock status during the recovery: %+v, want held by incident %s (recover)", h, id)
	}
	second := g.run("", append([]string{"recover", "--yes", "--plugins", strings.Join(RecoveryPlugins, ","), "--delete", ValidatingWebhookConfig}, g.etcdFlags()...)...)
	if second.code != 6 {
		t.Errorf("second recover: exit %d, want 6 (another run holds the lock)\n%s", second.code, second.stderr)
	}
	for _, want := range []string{"holds the cluster lock", id, h.By, "hint: "} {
		if h != nil && !strings.Contains(second.stderr, want) {
			t.Errorf("second recover's refusal does not say %q:\n%s", want, second.stderr)
		}
	}

	if !strings.Contains(second.stdout, "nothing was changed") {
		t.Errorf("the refused recover should say that it changed nothing:\n%s", second.stdout)
	}
	// The same engineer, in another terminal, on the running incident: a
	// resume or a revert must not take the lock over from a live process.
	for _, cmd := range [][]string{{"resume", "--yes", id}, {"revert", "--yes", id}} {
		r := g.run("", cmd...)
		if r.code != 6 || !strings.Contains(r.stderr, "another breakglass process on this host") {
			t.Errorf("%s while the incident's recover runs: exit %d, want 6 naming the running process\n%s", cmd[0], r.code, r.stderr)
		}
	}

	code := first.wait(t, 5*time.Minute)
	wall := time.Since(t0)
	t.Logf("recover stderr:\n%s", first.errOut.String())
	if code != 0 {
		t.Fatalf("recover --yes: exit %d", code)
	}
	res := decodeResult(t, first.out.String())
	if res.Outcome != "completed" || res.Incident != id || res.DryRun {
		t.Errorf("result: outcome %q incident %q dryRun %v, want completed %s", res.Outcome, res.Incident, res.DryRun, id)
	}
	steps := g.runbookSteps("webhook-deadlock")
	var got []string
	for _, s := range res.Steps {
		got = append(got, s.Name)
		// Every input is there (a name to delete, a webhook URL to wait
		// for): no step may be skipped.
		if s.Outcome != recovery.OutcomeOK {
			t.Errorf("step %s: %s (%s), want ok", s.Name, s.Outcome, s.Message)
		}
	}
	if !slices.Equal(got, steps) {
		t.Errorf("result steps %v, want the runbook's %v", got, steps)
	}
	dir := filepath.Join(g.stateDir, "incidents", id)
	if b := g.journaledBackup(id); b != filepath.Join(dir, "backup-delete-webhook.json") {
		t.Errorf("backup at %s, want backup-delete-webhook.json in the incident directory", b)
	}
	g.recovered(ValidatingWebhookConfig, g.journaledBackup(id))
	if _, err := etcd.VerifySnapshotFile(filepath.Join(dir, "etcd.snapshot")); err != nil {
		t.Errorf("the incident's etcd snapshot: %v", err)
	}
	g.timelineLists(id, steps)
	logGuidedMeasurement(t, g, id, t0, wall)
}

// logGuidedMeasurement reports the whole recovery's wall time against the
// lab's floor: kube-apiserver's restart-to-ready for the disable plus the
// one for the restore (the slowest node each time).
func logGuidedMeasurement(t testing.TB, g *guided, id string, t0 time.Time, wall time.Duration) {
	m, err := measureGuided(g.l, journalEntries(g.journalPath(id)), t0, wall)
	if err != nil {
		t.Errorf("measure: %v", err)
		return
	}
	t.Logf("guided recovery on %d node(s): wall %s, floor %s (disable %s + restore %s), ratio %.2f",
		len(g.l.Nodes()), m.wall.Round(time.Millisecond), m.floor.Round(time.Millisecond),
		m.disableFloor.Round(time.Millisecond), m.restoreFloor.Round(time.Millisecond), m.ratio())
}

type guidedMeasurement struct {
	wall, floor, disableFloor, restoreFloor time.Duration
	steps                                   map[string]time.Duration
}

func (m guidedMeasurement) ratio() float64 { return float64(m.wall) / float64(m.floor) }

func measureGuided(l *Lab, entries []recovery.Entry, t0 time.Time, wall time.Duration) (guidedMeasurement, error) {
	m := guidedMeasurement{wall: wall, steps: map[string]time.Duration{}}
	var restoreAt time.Time
	for _, e := range entries {
		if e.Kind == "begin" && e.Action == "admission.restore" {
			restoreAt = e.Time
		}
		if e.Kind == "end" {
			m.steps[e.Step] = time.Duration(e.Elapsed)
		}
	}
	if restoreAt.IsZero() {
		return m, errors.New("no restore step in the journal")
	}
	for _, ip := range l.Nodes() {
		d, ok := floorOf(l.Runs(), ip, t0)
		if !ok {
			return m, fmt.Errorf("node %s: no kube-apiserver became ready after the disable", ip)
		}
		r, ok := floorOf(l.Runs(), ip, restoreAt)
		if !ok {
			return m, fmt.Errorf("node %s: no kube-apiserver became ready after the restore", ip)
		}
		m.disableFloor = max(m.disableFloor, d.floor)
		m.restoreFloor = max(m.restoreFloor, r.floor)
	}
	m.floor = m.disableFloor + m.restoreFloor
	return m, nil
}

// TestRecoverDryRunsDeclineAndScriptedTerminal, on one deadlocked node:
// every built-in runbook in --dry-run (nothing changes); the operator
// declining the disable (exit 8, nothing changes); then the real recovery
// with the mutating-webhook-deadlock runbook, answered prompt by prompt
// through a terminal (a pty from util-linux script, so the spinner path
// runs), typing the object's name to remove it from etcd.
func TestRecoverDryRunsDeclineAndScriptedTerminal(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuided(t, 1)

	// Every built-in runbook, dry run.
	r := g.run("", "runbook", "list", "-o", "json")
	if r.code != 0 {
		t.Fatalf("runbook list: exit %d: %s", r.code, r.stderr)
	}
	var list struct {
		Runbooks []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"runbooks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Runbooks) < 3 {
		t.Fatalf("runbook list -o json: %v: %s", err, r.stdout)
	}
	deletes := map[string][]string{
		"webhook-deadlock":          {"--delete", ValidatingWebhookConfig},
		"mutating-webhook-deadlock": {"--delete", MutatingWebhookConfig},
	}
	for _, rb := range list.Runbooks {
		name := rb.Metadata.Name
		args := append([]string{"recover", "--runbook", name, "--dry-run", "-o", "json"}, g.etcdFlags()...)
		args = append(args, deletes[name]...)
		r := g.run("", args...)
		if slices.Contains([]string{"apiserver-flags", "etcd-nospace", "etcd-member-lost", "etcd-quorum-lost", "encryption-drift"}, name) {
			// They fix another failure (refused flags, a full etcd, a lost etcd member or quorum,
			// stored data that no longer decrypts); on
			// this admission deadlock the diagnosis finds none, so each
			// stops before any change with diagnose's exit code and names
			// the plain recover.
			if r.code != 21 || !strings.Contains(r.stderr, "nothing was changed") || !strings.Contains(r.stderr, "hint: breakglass recover   # without --runbook: the diagnosis picks ") {
				t.Errorf("recover --runbook %s --dry-run on an admission deadlock: exit %d, want 21, nothing changed and the plain recover as the first hint\n%s", name, r.code, r.stderr)
			}
			g.unchanged(name + " dry run")
			continue
		}
		if r.code != 0 {
			t.Errorf("recover --runbook %s --dry-run: exit %d\n%s", name, r.code, r.stderr)
			continue
		}
		res := decodeResult(t, r.stdout)
		if !res.DryRun || res.Outcome != "completed" {
			t.Errorf("%s dry run: dryRun %v outcome %q", name, res.DryRun, res.Outcome)
		}
		steps := g.runbookSteps(name)
		if len(res.Steps) != len(steps) {
			t.Errorf("%s dry run walked %d steps, the runbook has %d", name, len(res.Steps), len(steps))
		}
		for _, s := range res.Steps {
			if s.Outcome == recovery.OutcomeFailed || s.Outcome == recovery.OutcomeAborted {
				t.Errorf("%s dry run: step %s %s: %s", name, s.Name, s.Outcome, s.Message)
			}
			if s.Action == "etcd.delete" && len(deletes[name]) > 0 && !strings.Contains(s.Message, "dry run: would back up and remove") {
				t.Errorf("%s dry run: step %s says %q, want the removal it would do", name, s.Name, s.Message)
			}
		}
		g.unchanged(name + " dry run")
		t.Logf("%s --dry-run: %d steps, nothing changed", name, len(res.Steps))
	}

	// Declined at the disable confirmation: exit 8, nothing changed.
	r = g.run("n\n", append([]string{"recover", "--plugins", strings.Join(RecoveryPlugins, ","), "--delete", ValidatingWebhookConfig}, g.etcdFlags()...)...)
	if r.code != 8 {
		t.Fatalf("declined recover: exit %d, want 8\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "[y/N]") || !strings.Contains(r.stdout, "aborted") {
		t.Errorf("declined recover: no prompt on stderr or no 'aborted' outcome on stdout:\n%s\n%s", r.stderr, r.stdout)
	}
	g.unchanged("after declining")

	// The truth about this scenario: the webhook-deadlock runbook's own
	// plugin (ValidatingAdmissionWebhook) is not enough, because the
	// fail-closed mutating webhook still blocks the ServiceCIDR. A user
	// runbook with the same steps and a short wait shows it: the wait times
	// out (exit 7) naming the failing check, and `revert` puts every config
	// back byte for byte.
	rbFile := filepath.Join(t.TempDir(), "validating-only.yaml")
	if err := os.WriteFile(rbFile, []byte(validatingOnlyRunbook), 0o600); err != nil {
		t.Fatal(err)
	}
	before := g.incidents()
	r = g.run("", append([]string{"runbook", "run", rbFile, "--yes", "-o", "json"}, g.etcdFlags()...)...)
	if r.code != 7 {
		t.Fatalf("validating-only runbook: exit %d, want 7 (timed out waiting for the API server)\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, DeadlockCheck[len("poststarthook/"):]) || !strings.Contains(r.stderr, "hint: ") {
		t.Errorf("the timeout does not name the failing check %s or give a hint:\n%s", DeadlockCheck, r.stderr)
	}
	res := decodeResult(t, r.stdout)
	if res.Outcome != "failed" || !slices.ContainsFunc(res.Next, func(n string) bool { return strings.Contains(n, "breakglass revert "+res.Incident) }) {
		t.Errorf("failed run: outcome %q, next %v; want failed and the revert command", res.Outcome, res.Next)
	}
	if id := g.newIncident(before); id != res.Incident {
		t.Errorf("incident %q in the result, %q in the state directory", res.Incident, id)
	}
	r = g.run("", "revert", "--yes", "-o", "json", res.Incident)
	if r.code != 0 {
		t.Fatalf("revert: exit %d\n%s", r.code, r.stderr)
	}
	if rv := decodeResult(t, r.stdout); rv.Outcome != "reverted" {
		t.Errorf("revert: outcome %q", rv.Outcome)
	}
	g.unchanged("after the revert")
	r = g.run("", "admission", "status", "-o", "json")
	if r.code != 0 {
		t.Errorf("admission status after the revert: exit %d (20: plugins still disabled)\n%s", r.code, r.stdout)
	}
	g.deadlockedAgain()

	// The real recovery, answered through a terminal, as typed: no runbook,
	// no plugins; the diagnosis plans and says why.
	args := append([]string{"recover", "--delete", MutatingWebhookConfig}, g.etcdFlags()...)
	answers := []answer{
		{prompt: "[y/N]", reply: "y"}, // disable
		{prompt: fmt.Sprintf("Type %q to continue", MutatingWebhookConfig), reply: MutatingWebhookConfig},
		{prompt: "[y/N]", reply: "y"}, // restore
	}
	before = g.incidents()
	t0 := time.Now()
	out, code, pty := g.scripted(t, args, answers)
	wall := time.Since(t0)
	t.Logf("scripted recover (pty %v):\n%s", pty, out)
	if code != 0 {
		t.Fatalf("scripted recover: exit %d", code)
	}
	for _, want := range []string{"Plan from the diagnosis (verdict admission-deadlock): disable ValidatingAdmissionWebhook,MutatingAdmissionWebhook", "  - MutatingAdmissionWebhook: ", "  - ValidatingAdmissionWebhook: "} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal does not show %q", want)
		}
	}
	if pty {
		// The spinner runs on through the apply and the wait that follow
		// the confirmation, counting from the step's start.
		i := strings.Index(out, "disable on 1 node(s)? [y/N]")
		j := strings.Index(out, "=> disable done")
		if i < 0 || j < i || !strings.Contains(out[i:j], "\r\x1b[K") || !strings.Contains(out[i:j], " disable ") {
			t.Errorf("on a terminal the spinner should show the disable step while it applies and waits after the confirmation")
		}
	}
	id := g.newIncident(before)
	if !strings.Contains(out, "Incident "+id+": completed") {
		t.Errorf("output does not end with incident %s completed", id)
	}
	g.recovered(MutatingWebhookConfig, g.journaledBackup(id))
	g.timelineLists(id, g.runbookSteps("webhook-deadlock"))
	logGuidedMeasurement(t, g, id, t0, wall)
}

// validatingOnlyRunbook is webhook-deadlock cut short: its plugin only and
// a 20s wait, to show that it cannot end this scenario's deadlock.
const validatingOnlyRunbook = `apiVersion: breakglass.dev/v1alpha1
kind: Runbook
metadata:
  name: validating-only
  description: ValidatingAdmissionWebhook alone, with a short wait.
spec:
  steps:
  - name: preflight
    action: preflight
  - name: disable
    action: admission.disable
    with:
      plugins: [ValidatingAdmissionWebhook]
  - name: wait-apiserver
    action: apiserver.wait
    with:
      timeout: 20s
  - name: restore
    action: admission.restore
  - name: verify
    action: verify
`

type answer struct{ prompt, reply string }

// scripted runs breakglass with a terminal when util-linux script is there
// (a pty: the spinner runs), plain pipes otherwise, and types each reply
// once its prompt has appeared. It returns everything the terminal showed.
func (g *guided) scripted(t *testing.T, args []string, answers []answer) (string, int, bool) {
	t.Helper()
	cmd := g.command(args...)
	pty := false
	if sp, err := exec.LookPath("script"); err == nil {
		// script -e returns the child's exit code; -c runs it on a new pty.
		line := shellQuote(cmd.Args)
		cmd = exec.Command(sp, "-q", "-e", "-c", line, "/dev/null")
		cmd.Env = append(os.Environ(), "NO_COLOR=1", "TERM=xterm")
		pty = true
	} else {
		t.Logf("util-linux script not found: the prompts are answered over plain pipes (no spinner)")
	}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	from := 0
	deadline := time.After(5 * time.Minute)
	for i := 0; i < len(answers); {
		s := out.String()
		if j := strings.Index(s[from:], answers[i].prompt); j >= 0 {
			from += j + len(answers[i].prompt)
			fmt.Fprintf(stdin, "%s\n", answers[i].reply)
			i++
			continue
		}
		select {
		case err := <-done:
			t.Fatalf("breakglass ended (%v) before prompt %q:\n%s", err, answers[i].prompt, s)
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("no prompt %q within 5 minutes:\n%s", answers[i].prompt, s)
		case <-time.After(20 * time.Millisecond):
		}
	}
	var werr error
	select {
	case werr = <-done:
	case <-deadline:
		_ = cmd.Process.Kill()
		t.Fatalf("breakglass still running after its last answer:\n%s", out.String())
	}
	stdin.Close()
	return out.String(), exitCode(t, werr, args), pty
}

func shellQuote(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

// TestResumeAfterKill runs the guided recovery on one deadlocked node and
// kills it with SIGKILL in each step that changes or waits on the cluster —
// disable, wait-apiserver, delete-webhook, restore — when the journal shows
// the step began (plus a random delay, seed logged); `resume --yes` carries
// on each time. After every kill each node's config must be explained by
// the state directory; in the end the recovery completes with configs
// byte-identical, the object removed with its backup, and the lock free.
func TestResumeAfterKill(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	g := newGuided(t, 1)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("random seed %d", seed)

	kills := []struct {
		step     string
		maxDelay time.Duration
	}{
		{"disable", 800 * time.Millisecond}, // plan, apply, wait for the new container (1-5s)
		{"wait-apiserver", 2 * time.Second},
		{"delete-webhook", 8 * time.Millisecond}, // 5-30ms: plan, backup, transaction; later, the kill would land in restore
		{"restore", 3 * time.Second},
	}
	args := append([]string{"recover", "--yes", "--plugins", strings.Join(RecoveryPlugins, ","), "--delete", ValidatingWebhookConfig}, g.etcdFlags()...)
	id := ""
	before := g.incidents()
	for i, k := range kills {
		skip := 0
		if i > 0 {
			skip = len(journalEntries(g.journalPath(id)))
			args = []string{"resume", "--yes", id}
		}
		var records []*recovery.AdmissionRecord
		if k.step == "restore" {
			records = g.records() // the disable's, before the restore removes them
		}
		p := g.start(nil, args...)
		for id == "" {
			select {
			case <-p.exited:
				t.Fatalf("recover ended early:\n%s", p.errOut.String())
			case <-time.After(10 * time.Millisecond):
			}
			id = g.newIncident(before)
		}
		began := waitBegin(t, g.journalPath(id), skip, k.step, p.exited, 3*time.Minute)
		if k.step == "restore" {
			// Kill once the nodes run the original config again (the
			// restore has applied and waits for the new containers), then
			// put the records back: what a kill between the apply and the
			// records' removal leaves, too narrow a window to hit at random.
			g.waitConfigs(g.orig, p.exited)
		} else {
			time.Sleep(time.Duration(rng.Int64N(int64(k.maxDelay))))
		}
		delay := time.Since(began)
		select {
		case <-p.exited:
			t.Fatalf("breakglass %v exited before the kill in %s:\n%s", p.cmd.Args[5:], k.step, p.errOut.String())
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		es := journalEntries(g.journalPath(id))
		last := es[len(es)-1]
		t.Logf("killed %s %s after step %s began; journal ends with %s %s %s", p.cmd.Args[5], delay.Round(time.Millisecond), k.step, last.Kind, last.Step, last.Outcome)
		g.explained("after the kill in " + k.step)
		restoreEnded := slices.ContainsFunc(es[skip:], func(e recovery.Entry) bool { return e.Kind == "end" && e.Step == "restore" })
		if k.step == "restore" && restoreEnded {
			t.Logf("the restore step had ended before the kill: no record to put back")
		}
		if k.step == "restore" && !restoreEnded {
			for _, rec := range records {
				if cur, _ := g.st.LoadAdmission(rec.Cluster, rec.Node); cur == nil {
					if err := g.st.SaveAdmission(*rec); err != nil {
						t.Fatal(err)
					}
					t.Logf("node %s: the record of the disable put back, as if the kill came before its removal", rec.Node)
				}
			}
			g.explained("with the records put back")
		}
		if k.step == "wait-apiserver" {
			// What a kill between the backup and the delete transaction
			// leaves (too narrow to hit at random): a complete backup at the
			// step's path, written by the real command, and a torn .part of a
			// second attempt. The resumed delete must neither fail on them
			// nor overwrite them.
			dir := filepath.Join(g.stateDir, "incidents", id)
			r := g.run("", append([]string{"etcd", "backup", ValidatingWebhookConfig, "--out", filepath.Join(dir, "backup-delete-webhook.json")}, g.etcdFlags()...)...)
			if r.code != 0 {
				t.Fatalf("etcd backup: exit %d: %s", r.code, r.stderr)
			}
			if err := os.WriteFile(filepath.Join(dir, "backup-delete-webhook-2.json.part"), []byte(`{"apiVersion":`), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := g.run("", "resume", "--yes", "-o", "json", id)
	if r.code != 0 {
		t.Fatalf("final resume: exit %d\n%s", r.code, r.stderr)
	}
	res := decodeResult(t, r.stdout)
	if res.Outcome != "completed" {
		t.Errorf("final resume: outcome %s", res.Outcome)
	}
	g.explained("after the final resume")
	g.recovered(ValidatingWebhookConfig, g.journaledBackup(id))
	// Every step of the runbook ended ok in the journal, across the runs.
	ok := map[string]bool{}
	for _, e := range journalEntries(g.journalPath(id)) {
		if e.Kind == "end" && e.Outcome == recovery.OutcomeOK {
			ok[e.Step] = true
		}
	}
	for _, s := range g.runbookSteps("webhook-deadlock") {
		if !ok[s] {
			t.Errorf("step %s never ended ok in the journal", s)
		}
	}
	g.timelineLists(id, g.runbookSteps("webhook-deadlock"))
}
