package recovery_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// hourPoll is a kubelet that polls its static pods once an hour: a new pod
// runs within a test's time only if the kubelet is restarted.
var hourPoll = talostest.KubeletOptions{TimeScale: 0.005, PollInterval: time.Hour, PollPhase: 59 * time.Minute,
	RestartStop: 20 * time.Millisecond, RestartStart: 100 * time.Millisecond}

// progressLog collects the lines a run says per node.
type progressLog struct {
	mu    sync.Mutex
	lines []string
}

func (p *progressLog) add(node, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, node+": "+msg)
}

func (p *progressLog) count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// A change of kube-apiserver's static pod restarts each node's kubelet once
// the node has rendered the new pod, so the new pod runs without waiting for
// the kubelet's poll; the plan says so, and the journal records it per node.
func TestAdmissionChangeRestartsTheKubelets(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 2, deadlock: true, kubelet: &hourPoll})
	var progress progressLog
	var shown strings.Builder
	ui := newTestUI(t, engineHooks{progress: progress.add, show: func(s string) { shown.WriteString(s) }})
	start := time.Now()
	res, err := recovery.DisableAdmission(t.Context(), env.tc, env.state(), env.effects(false), ui,
		recovery.AdmissionChange{Plugins: []string{vaw}, WaitTimeout: 15 * time.Second, Etcd: env.etcdOptions(), ToolVersion: "kubelet-test"})
	if err != nil {
		t.Fatalf("disable: %v (after %s)", err, time.Since(start))
	}
	if !strings.Contains(shown.String(), "the kubelet is restarted through the Talos API") {
		t.Errorf("the plan does not say the kubelets are restarted:\n%s", shown.String())
	}
	if n := progress.count("kubelet restarted"); n != 2 {
		t.Errorf("%d node(s) said their kubelet restarted, want 2:\n%s", n, strings.Join(progress.lines, "\n"))
	}
	for _, n := range env.cluster.Nodes {
		if p := n.Pod(); !p.Running || !talostest.FlagHas(p.Config, "disable-admission-plugins", vaw) {
			t.Errorf("node %s: %+v", n.IP, p)
		}
	}
	_, entries, err := env.state().ReadIncident(outcomeOf(res, ui).Incident)
	if err != nil {
		t.Fatal(err)
	}
	restarted := 0
	for _, e := range entries {
		if e.Kind == "end" && e.Step == "disable" {
			restarted = strings.Count(string(e.Data), `"kubeletRestart":"restarted"`)
		}
	}
	if restarted != 2 {
		t.Errorf("the journal records %d kubelet restart(s), want one per node", restarted)
	}
}

// --no-kubelet-restart is today's behaviour: the plan says the kubelets are
// left to their poll, nothing restarts them, and with a poll of an hour the
// wait times out on the old pod.
func TestNoKubeletRestartWaitsForThePoll(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true, kubelet: &hourPoll})
	var progress progressLog
	var shown strings.Builder
	ui := newTestUI(t, engineHooks{progress: progress.add, show: func(s string) { shown.WriteString(s) }})
	before := env.cluster.Nodes[0].Pod()
	_, err := recovery.DisableAdmission(t.Context(), env.tc, env.state(), env.effects(false), ui,
		recovery.AdmissionChange{Plugins: []string{vaw}, WaitTimeout: 2 * time.Second, NoKubeletRestart: true, Etcd: env.etcdOptions(), ToolVersion: "kubelet-test"})
	if !errorIs(err, "timeout") {
		t.Errorf("disable with --no-kubelet-restart and a poll of an hour: %v, want a timeout", err)
	}
	if !strings.Contains(shown.String(), "not restarted (--no-kubelet-restart)") {
		t.Errorf("the plan does not say the kubelets are left alone:\n%s", shown.String())
	}
	if n := progress.count("restarting the kubelet"); n != 0 {
		t.Errorf("a kubelet was restarted:\n%s", strings.Join(progress.lines, "\n"))
	}
	if p := env.cluster.Nodes[0].Pod(); p.UID != before.UID || p.ContainerID != before.ContainerID {
		t.Errorf("the pod changed without a poll: %+v, before %+v", p, before)
	}
}

// A dry run restarts nothing, and its plan says what a real run would do.
func TestDryRunRestartsNoKubelet(t *testing.T) {
	env := newEngineEnv(t, envOptions{deadlock: true, kubelet: &hourPoll})
	var progress progressLog
	var shown strings.Builder
	ui := newTestUI(t, engineHooks{progress: progress.add, show: func(s string) { shown.WriteString(s) }})
	if _, err := recovery.DisableAdmission(t.Context(), env.tc, env.state(), env.effects(true), ui,
		recovery.AdmissionChange{Plugins: []string{vaw}, WaitTimeout: 5 * time.Second, Etcd: env.etcdOptions(), ToolVersion: "kubelet-test"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown.String(), "the kubelet is restarted through the Talos API") {
		t.Errorf("the dry run's plan does not say the kubelets would be restarted:\n%s", shown.String())
	}
	if n := progress.count("kubelet"); n != 0 {
		t.Errorf("the dry run touched a kubelet:\n%s", strings.Join(progress.lines, "\n"))
	}
}
