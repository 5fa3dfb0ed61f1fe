package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// RehearseOptions tune a rehearsal.
type RehearseOptions struct {
	// Scenario is the incident to rehearse: kyverno-servicecidr (the
	// default) or a flags scenario (FlagsScenarios), recovered with the
	// guided recovery as `breakglass recover --yes` runs it.
	Scenario    string
	Nodes       int
	Dir         string // default: a temporary directory, removed afterwards
	KubeBinDir  string
	Out         io.Writer // progress and the final report; nil: discard
	ToolVersion string
	// Lab overrides the lab's options (ports, addresses, kubelet); Dir,
	// Nodes and KubeBinDir are taken from here.
	Lab Options
}

// ErrRehearsalFailed: the rehearsal ran but a verification failed (exit
// code failure.LabFailed).
var ErrRehearsalFailed = failure.New(failure.LabFailed, "rehearsal failed")

// RehearsalError lists the failed checks.
type RehearsalError struct{ Failed []string }

func (e *RehearsalError) Error() string {
	return "rehearsal failed: " + strings.Join(e.Failed, "; ")
}
func (e *RehearsalError) Unwrap() error { return ErrRehearsalFailed }
func (e *RehearsalError) Hints() []string {
	return []string{"run it again with the lab kept for a look: breakglass lab up --scenario " + ScenarioKyvernoServiceCIDR}
}

// Rehearsal is the outcome of a rehearsal.
type Rehearsal struct {
	Nodes    int         `json:"nodes"`
	Incident string      `json:"incident"` // the recovery's incident, in the lab's state directory
	Plugins  []string    `json:"plugins"`  // what its diagnosis planned to disable
	Deadlock []Deadlock  `json:"deadlock"`
	Disable  Measurement `json:"disable"`
	Restore  Measurement `json:"restore"`
	Checks   []Check     `json:"checks"`
	Timeline *Timeline   `json:"timeline"`
	// Recovery is a flags scenario's guided recovery, from recover's start
	// to its end (kube-apiserver ready on every node).
	Recovery time.Duration `json:"recovery,omitempty"`
	Wall     time.Duration
	// KubeletRestart: the recovery restarted the kubelets (the default);
	// PollSeed: the kubelets' poll phase (talostest.KubeletOptions.PollSeed).
	KubeletRestart bool   `json:"kubeletRestart"`
	PollSeed       uint64 `json:"pollSeed"`
}

// Check is one verification.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Measurement compares breakglass's time for a step with the floor: the
// node's own time from the apply to the new kube-apiserver's first /readyz
// 200 (the kubelet's next manifest poll, the old container stopping, the
// new one starting), as the lab sees it every 25ms. No tool can be faster
// once the config is applied.
type Measurement struct {
	Total    time.Duration `json:"total"`    // breakglass: plan + execute + wait until ready
	Floor    time.Duration `json:"floor"`    // slowest node's apply-to-ready
	Poll     time.Duration `json:"poll"`     // of which: waiting for the kubelet's manifest poll (slowest node)
	Shutdown time.Duration `json:"shutdown"` // of which: the old container stopping (slowest node)
	Startup  time.Duration `json:"startup"`  // of which: new process start to first /readyz 200 (slowest node)
	Overhead time.Duration `json:"overhead"` // Total - Floor
	Ratio    float64       `json:"ratio"`    // Total / Floor
	Notice   time.Duration `json:"notice"`   // from the last node's readiness to breakglass returning
	Plan     time.Duration `json:"plan"`
	// Failed are the containers that started after the change and never
	// became ready (each node's restart-to-ready includes their time).
	Failed []string `json:"failed,omitempty"`
}

// Rehearse runs the kyverno-servicecidr scenario (or opts.Scenario, a flags
// one) on a fresh lab, recovers through the code path an on-call engineer
// runs, `breakglass recover --yes` (recovery.Recover with the
// webhook-deadlock runbook: its diagnosis decides the plugins, or switches
// to apiserver-flags), with a UI that times each step, and verifies the
// cluster is back exactly as it was, minus the deadlock (a flags scenario:
// ready, the configs changed in the refused flag only). The error is a
// *RehearsalError when a check fails.
func Rehearse(ctx context.Context, opts RehearseOptions) (*Rehearsal, error) {
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	lo := opts.Lab
	lo.Nodes, lo.KubeBinDir = opts.Nodes, opts.KubeBinDir
	if opts.Scenario == ScenarioEtcdNoSpace && lo.EtcdQuotaBytes == 0 {
		lo.EtcdQuotaBytes = NoSpaceQuota
	}
	if lo.Nodes <= 0 {
		lo.Nodes = 1
	}
	if isEtcdLossScenario(opts.Scenario) {
		lo.Nodes = EtcdScenarioNodes // one member lost, or two, of three
	}
	var err error
	if lo.KubeBinDir, err = Binaries(ctx, lo.KubeBinDir, out, OldVersion, NewVersion); err != nil {
		return nil, err
	}
	lo.Dir = opts.Dir
	if lo.Dir == "" {
		d, err := os.MkdirTemp("", "breakglass-lab-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		lo.Dir = d
	}
	if lo.Log == nil {
		lo.Log = out
	}
	start := time.Now()
	tl := NewTimeline(out)
	rep := &Rehearsal{Nodes: lo.Nodes, Timeline: tl, KubeletRestart: !lo.NoKubeletRestart, PollSeed: lo.Kubelet.PollSeed}

	var l *Lab
	if err := tl.Step(fmt.Sprintf("lab up: etcd, %d emulated Talos node(s), kube-apiserver %s", lo.Nodes, OldVersion), func() error {
		var err error
		l, err = Start(ctx, lo)
		return err
	}); err != nil {
		return rep, err
	}
	defer l.Close()

	if opts.Scenario == ScenarioEtcdNoSpace {
		if _, err := RunScenario(ctx, l, opts.Scenario, tl); err != nil {
			return rep, err
		}
		if err := rehearseNoSpace(ctx, l, rep, tl, out, opts.ToolVersion); err != nil {
			return rep, err
		}
		return rep, rep.finish(out, start)
	}
	if isEtcdLossScenario(opts.Scenario) {
		if _, err := RunScenario(ctx, l, opts.Scenario, tl); err != nil {
			return rep, err
		}
		if err := rehearseEtcdLoss(ctx, l, opts.Scenario, rep, tl, out, opts.ToolVersion); err != nil {
			return rep, err
		}
		return rep, rep.finish(out, start)
	}
	if isFlagsScenario(opts.Scenario) {
		if _, err := RunScenario(ctx, l, opts.Scenario, tl); err != nil {
			return rep, err
		}
		if err := rehearseFlags(ctx, l, opts.Scenario, rep, tl, out, opts.ToolVersion); err != nil {
			return rep, err
		}
		return rep, rep.finish(out, start)
	}
	if opts.Scenario != "" && opts.Scenario != ScenarioKyvernoServiceCIDR {
		return rep, fmt.Errorf("%w %q: rehearse plays %s, %s, %s, %s or a flags scenario (%s)", ErrUnknownScenario, opts.Scenario, ScenarioKyvernoServiceCIDR, ScenarioEtcdNoSpace,
			ScenarioEtcdMemberLost, ScenarioEtcdQuorumLost, strings.Join(slices.Sorted(maps.Keys(FlagsScenarios)), ", "))
	}
	if rep.Deadlock, err = RunScenario(ctx, l, ScenarioKyvernoServiceCIDR, tl); err != nil {
		return rep, err
	}
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return rep, err
	}
	defer tc.Close()
	before := map[string]string{}
	for _, ip := range l.Nodes() {
		cfg, err := tc.ReadMachineConfig(ctx, ip)
		if err != nil {
			return rep, err
		}
		before[ip] = cfg.Hash()
	}
	st := recovery.State{Dir: filepath.Join(lo.Dir, "state")}
	var answeredBefore int64
	ui := newMeasuringUI(out, func(step string) {
		if step == "restore" {
			answeredBefore = l.Webhook.Answered()
		}
	})
	res, err := rehearseRecover(ctx, l, tc, st, ui, opts.ToolVersion)
	if res != nil {
		rep.Incident, rep.Plugins = res.Incident, decided(res)
	}
	if err != nil {
		return rep, err
	}
	if rep.Disable, err = ui.measure(l, tl, "disable "+strings.Join(rep.Plugins, ","), "disable", "wait-apiserver"); err != nil {
		return rep, err
	}
	if w := ui.times("wait-webhook"); w != nil {
		tl.Add("webhook backend back (the default ServiceCIDR exists)", w.begin, w.end)
	}
	if rep.Restore, err = ui.measure(l, tl, "restore the recorded extraArgs", "restore", "verify"); err != nil {
		return rep, err
	}
	_ = tl.Step("verify", func() error {
		rep.Checks = verify(ctx, l, tc, st, before, answeredBefore)
		rep.Checks = append(rep.Checks, Check{Name: "the diagnosis planned the plugins the scenario needs", OK: sameSet(rep.Plugins, RecoveryPlugins),
			Detail: fmt.Sprintf("planned %s, needs %s", strings.Join(rep.Plugins, ","), strings.Join(RecoveryPlugins, ","))})
		return nil
	})
	return rep, rep.finish(out, start)
}

// finish prints the rehearsal and fails it when a check failed.
func (r *Rehearsal) finish(out io.Writer, start time.Time) error {
	r.Wall = time.Since(start)
	r.Print(out)
	var failed []string
	for _, c := range r.Checks {
		if !c.OK {
			failed = append(failed, c.Name+": "+c.Detail)
		}
	}
	if len(failed) > 0 {
		return &RehearsalError{Failed: failed}
	}
	return nil
}

// DefaultKubelet is the lab kubelet: the real kubelet's and Talos's times
// (manifest poll 20s, termination grace 30s, back-off 10s doubling to 5m,
// StaticPodStatus refresh 15s). Options.TimeScale scales them.
func DefaultKubelet() talostest.KubeletOptions {
	return talostest.KubeletOptions{}
}

// rehearseRecover is `breakglass recover --yes` on the lab: the same
// public operation, with the lab's etcd endpoints.
// guidedRecovery runs `breakglass recover --yes` as one step of the
// rehearsal (its runbook is the one the diagnosis picks), timing it into
// rep; the check it returns adds a check to rep, the first being that
// recover completed. res is nil when recover ended before it had one.
func guidedRecovery(ctx context.Context, l *Lab, tc *talos.Client, runbook string, rep *Rehearsal, tl *Timeline, out io.Writer, toolVersion string) (res *recovery.RecoverResult, check func(name string, ok bool, detail string)) {
	st := recovery.State{Dir: filepath.Join(l.Dir, "state")}
	start := time.Now()
	recErr := tl.Step("breakglass recover --yes (no expert flag): the diagnosis picks runbook "+runbook, func() error {
		var err error
		res, err = rehearseRecover(ctx, l, tc, st, newMeasuringUI(out, func(string) {}), toolVersion)
		return err
	})
	rep.Recovery = time.Since(start)
	if res != nil {
		rep.Incident = res.Incident
	}
	check = func(name string, ok bool, detail string) {
		rep.Checks = append(rep.Checks, Check{Name: name, OK: ok, Detail: detail})
	}
	check("recover completed with no expert flag", recErr == nil, fmt.Sprint(recErr))
	return res, check
}

func rehearseRecover(ctx context.Context, l *Lab, tc *talos.Client, st recovery.State, ui recovery.UI, toolVersion string) (*recovery.RecoverResult, error) {
	rb, err := runbooks.Resolve("webhook-deadlock")
	if err != nil {
		return nil, err
	}
	res, err := recovery.Recover(ctx, tc, st, recovery.Live(tc), ui, recovery.RecoverOptions{Runbook: rb.Metadata.Name, Steps: recovery.StepsOf(rb),
		Etcd: recovery.EtcdOptions{Endpoints: l.Etcd.Endpoints}, ToolVersion: toolVersion, Command: "recover", NoKubeletRestart: l.opts.NoKubeletRestart})
	if err == nil && res.Outcome != "completed" {
		err = fmt.Errorf("recover ended %s", res.Outcome)
	}
	if err != nil {
		return res, fmt.Errorf("recover: %w", err)
	}
	return res, nil
}

// decided are the plugins the recovery's diagnosis planned.
func decided(res *recovery.RecoverResult) []string {
	if res.Decision == nil {
		return nil
	}
	if a, ok := res.Decision.Of.(*recovery.AdmissionDecision); ok {
		return a.Plugins
	}
	return nil
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// measuringUI is the rehearsal's recovery.UI: it answers yes to every
// question, as --yes does, prints the steps and their progress, and times
// each step's begin, its question (the plan is made then: configs read,
// the nodes' dry run done) and its end.
type measuringUI struct {
	out     io.Writer
	onBegin func(step string)
	mu      sync.Mutex
	current string
	steps   map[string]*stepClock
}

type stepClock struct{ begin, asked, end time.Time }

func newMeasuringUI(out io.Writer, onBegin func(string)) *measuringUI {
	return &measuringUI{out: out, onBegin: onBegin, steps: map[string]*stepClock{}}
}

func (u *measuringUI) Begin(index, total int, s recovery.Step) {
	u.mu.Lock()
	u.current, u.steps[s.Name] = s.Name, &stepClock{begin: time.Now()}
	u.mu.Unlock()
	fmt.Fprintf(u.out, "           [%d/%d] %s\n", index, total, s.Name)
	u.onBegin(s.Name)
}

func (u *measuringUI) End(s recovery.Step, outcome string, elapsed time.Duration, message string) {
	u.mu.Lock()
	if t := u.steps[s.Name]; t != nil {
		t.end = time.Now()
	}
	u.mu.Unlock()
	fmt.Fprintf(u.out, "           => %s %s (%s): %s\n", s.Name, outcome, round(elapsed), message)
}

func (u *measuringUI) Progress(node, msg string) {
	fmt.Fprintf(u.out, "           %s: %s\n", node, msg)
}

func (u *measuringUI) Show(recovery.View) {}

func (u *measuringUI) Confirm(context.Context, recovery.Question) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if t := u.steps[u.current]; t != nil && t.asked.IsZero() {
		t.asked = time.Now()
	}
	return nil
}

func (u *measuringUI) times(step string) *stepClock {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.steps[step]
}

// measure is one admission change, from its step's begin to the end of the
// wait that follows it, against the floor: the plan (until its question),
// the apply and the wait for the new static pod (until the step's end), the
// wait until kube-apiserver is ready (the wait step).
func (u *measuringUI) measure(l *Lab, tl *Timeline, name, change, wait string) (Measurement, error) {
	var m Measurement
	c, w := u.times(change), u.times(wait)
	if c == nil || w == nil || c.asked.IsZero() || c.end.IsZero() || w.end.IsZero() {
		return m, fmt.Errorf("%s: the recovery did not run steps %s and %s through to their end", name, change, wait)
	}
	t0, t1, end := c.begin, c.asked, w.end
	m.Plan = t1.Sub(t0)
	tl.Add(name+": plan (read configs, node dry-run)", t0, t1)
	tl.Add(name+": apply and wait for the new static pod", t1, c.end)
	tl.Add(name+": wait until kube-apiserver is ready (readyz)", w.begin, end)
	m.Total = end.Sub(t0)
	var lastReady time.Time
	for _, ip := range l.Nodes() {
		// The lab's own 25ms readiness watch may record a moment after
		// breakglass saw the node ready: give it a little time.
		f, ok := floorOf(l.Runs(), ip, t0)
		for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); {
			time.Sleep(25 * time.Millisecond)
			f, ok = floorOf(l.Runs(), ip, t0)
		}
		if !ok {
			return m, fmt.Errorf("%s: node %s: the lab saw no new kube-apiserver become ready", name, ip)
		}
		if floor := f.ready.Sub(t1); floor > m.Floor {
			m.Floor, m.Poll, m.Shutdown, m.Startup = floor, f.from.Sub(t1), f.shutdown, f.startup
		}
		m.Failed = append(m.Failed, f.failed...)
		if f.ready.After(lastReady) {
			lastReady = f.ready
		}
	}
	m.Overhead = m.Total - m.Floor
	m.Ratio = float64(m.Total) / float64(m.Floor)
	m.Notice = end.Sub(lastReady)
	return m, nil
}

type floorTimes struct {
	floor, shutdown, startup time.Duration
	from, ready              time.Time // the kubelet acting on the change; the new one ready
	failed                   []string
}

// floorOf measures, on a node, kube-apiserver's restart-to-ready after t0:
// from the kubelet stopping the container that ran at t0 (or, when none
// ran, requesting the first new one) to the first new container's first
// /readyz 200. Containers that failed before one became ready count in it,
// and are listed.
func floorOf(runs []ContainerRun, node string, t0 time.Time) (floorTimes, bool) {
	var f floorTimes
	var from time.Time
	for i := range runs {
		r := &runs[i]
		if r.Node != node {
			continue
		}
		if r.Requested.Before(t0) {
			if !r.StopRequested.IsZero() && r.StopRequested.After(t0) {
				from = r.StopRequested
				f.shutdown = r.Exited.Sub(r.StopRequested)
			}
			continue
		}
		if from.IsZero() {
			from = r.Requested
		}
		if r.Ready.IsZero() {
			if !r.Exited.IsZero() {
				desc := fmt.Sprintf("node %s: container %.12s exited %s after its start (%s)", node, r.ID, round(r.Exited.Sub(r.Requested)), r.ExitErr)
				if r.LastLog != "" {
					desc += ": " + r.LastLog
				}
				f.failed = append(f.failed, desc)
			}
			continue
		}
		f.from, f.ready, f.startup, f.floor = from, r.Ready, r.Ready.Sub(r.Started), r.Ready.Sub(from)
		return f, true
	}
	return f, false
}

func waitServing(ctx context.Context, b *WebhookBackend, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !b.Serving() {
		if time.Now().After(deadline) {
			return errors.New("the webhook backend did not come back")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// verify checks the end state.
func verify(ctx context.Context, l *Lab, tc *talos.Client, st recovery.State, before map[string]string, answeredBefore int64) []Check {
	var checks []Check
	add := func(name string, ok bool, detail string) {
		checks = append(checks, Check{Name: name, OK: ok, Detail: detail})
	}

	health, err := recovery.CheckHealth(ctx, tc)
	ready := err == nil
	var detail []string
	for _, h := range health {
		if !h.Ready {
			ready = false
		}
		detail = append(detail, h.Node+" "+h.Summary())
	}
	if err != nil {
		detail = append(detail, err.Error())
	}
	add("kube-apiserver ready on every node", ready, strings.Join(detail, ", "))

	for _, ip := range l.Nodes() {
		pod, err := tc.ReadAPIServerPod(ctx, ip)
		switch {
		case err != nil:
			add("node "+ip+": flag gone from the static pod", false, err.Error())
		default:
			left := pod.DisabledPlugins()
			add("node "+ip+": flag gone from the static pod", len(left) == 0, fmt.Sprintf("disable-admission-plugins=%s", strings.Join(left, ",")))
		}
		run := l.Current()[ip]
		running := !slices.ContainsFunc(run.Args, func(a string) bool { return strings.HasPrefix(a, "--disable-admission-plugins=") })
		add("node "+ip+": flag gone from the running process", running && run.Exited.IsZero() && !run.Ready.IsZero(), fmt.Sprintf("container %.12s", run.ID))
		cfg, err := tc.ReadMachineConfig(ctx, ip)
		if err != nil {
			add("node "+ip+": config byte-identical to before", false, err.Error())
		} else {
			add("node "+ip+": config byte-identical to before", cfg.Hash() == before[ip], cfg.Hash())
		}
		rec, err := st.LoadAdmission(l.Cluster.Name, ip)
		add("node "+ip+": no record left in the state directory", err == nil && rec == nil, fmt.Sprint(err))
	}
	exists, err := l.EtcdKeyExists(ctx, "/registry/servicecidrs/kubernetes")
	add("the default ServiceCIDR exists in etcd", err == nil && exists, fmt.Sprint(err))
	kube, err := l.Kube(ctx)
	if err != nil {
		add("webhooks answer reviews again", false, err.Error())
		return checks
	}
	for _, path := range []string{
		"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/" + ValidatingWebhookConfig,
		"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" + MutatingWebhookConfig,
	} {
		err := kube.Do(ctx, "GET", path, nil, nil)
		add("webhook configuration still installed: "+filepath.Base(path), err == nil, fmt.Sprint(err))
	}
	err = ProbeWebhook(ctx, kube, l.Webhook, "after-restore")
	add("webhooks answer reviews again", err == nil && l.Webhook.Answered() > answeredBefore,
		fmt.Sprintf("%d reviews answered since the deadlock (%d in all); %v", l.Webhook.Answered()-answeredBefore, l.Webhook.Answered(), err))
	return checks
}

// Print writes the checks, the timeline and the measurements.
func (r *Rehearsal) Print(w io.Writer) {
	fmt.Fprintln(w)
	for _, d := range r.Deadlock {
		fmt.Fprintf(w, "deadlock on %s: readyz failing %s; %d log line(s) %q\n", d.Node, strings.Join(d.FailingChecks, ", "), d.LogLines, DeadlockLogLine)
	}
	r.Timeline.Print(w)
	if r.Recovery > 0 {
		fmt.Fprintf(w, "guided recovery (%d node(s)): %s from recover's start to kube-apiserver ready on every node\n", r.Nodes, round(r.Recovery))
	} else {
		fmt.Fprintf(w, "measurements (%d node(s)):\n", r.Nodes)
	}
	for _, m := range []struct {
		name string
		m    Measurement
	}{{"disable", r.Disable}, {"restore", r.Restore}} {
		if m.m.Total == 0 {
			continue // not measured: a flags rehearsal disables nothing
		}
		fmt.Fprintf(w, "  %-8s breakglass %s = the node's apply-to-ready %s (kubelet poll %s, old one stopping %s, new one starting %s) + overhead %s (ratio %.2f; plan %s; ready noticed %s after readiness)\n",
			m.name, round(m.m.Total), round(m.m.Floor), round(m.m.Poll), round(m.m.Shutdown), round(m.m.Startup), round(m.m.Overhead), m.m.Ratio, round(m.m.Plan), round(m.m.Notice))
		for _, f := range m.m.Failed {
			fmt.Fprintf(w, "           failed start: %s\n", f)
		}
	}
	fmt.Fprintln(w, "checks:")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s", mark, c.Name)
		if !c.OK && c.Detail != "" {
			fmt.Fprintf(w, " (%s)", c.Detail)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "rehearsal wall time: %s\n", round(r.Wall))
}
