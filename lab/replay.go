package lab

// Replay tries an upgrade before it is done: the cluster's admission
// objects on a scratch lab node that runs kube-apiserver FROM, every webhook
// backend unreachable, then the node upgraded to TO the Talos way, and
// kube-apiserver TO watched until it is ready, exits, or the time is up.
// It is the truth the audit's model is checked against.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/labflags"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// ReplayOptions say what to replay.
type ReplayOptions struct {
	From, To string // Kubernetes versions, vX.Y.Z (a binary each under KubeBinDir)
	// Sources are the admission objects, as YAML or JSON documents (one
	// source per file; names are for messages).
	Sources []ReplaySource
	// Fix also replays with the fix `breakglass audit --fix` prints.
	Fix      bool
	FixStyle audit.Exclusion // default audit.ExcludeAPIServer
	// Timeout is how long kube-apiserver TO may take to become ready
	// (default DefaultReplayTimeout).
	Timeout    time.Duration
	KubeBinDir string    // default $BREAKGLASS_KUBE_BIN_DIR, else KubeCacheDir
	Dir        string    // scratch directory; default a new temporary one, removed after
	FirstIP    string    // the node's loopback address; default FirstIP
	Log        io.Writer // one line per step; nil: discard
	// APIServerArgs are the cluster's own cluster.apiServer.extraArgs (any
	// key but those ReplayArgRefusal names), set on the node before FROM's
	// objects are installed and kept for TO, as in the real upgrade.
	APIServerArgs map[string]string
	// TimeScale scales the emulated kubelet's and Talos's waits (the
	// replay is about kube-apiserver, not about the kubelet's pace);
	// default 0.05.
	TimeScale float64
}

// ReplaySource is one input of admission objects.
type ReplaySource struct {
	Name string
	Data []byte
}

// DefaultReplayTimeout is replay's default wait for kube-apiserver TO.
const DefaultReplayTimeout = labflags.ReplayTimeout

// Replay outcomes.
const (
	OutcomeStarts   = "starts"
	OutcomeDeadlock = "deadlock"
)

// ReplayReport is what the replay found: the run with the objects as
// given and, with Fix, the run with the fix applied. The last run decides.
// The deciding run's findings are repeated at the top, for scripts.
type ReplayReport struct {
	From          string     `json:"from"`
	To            string     `json:"to"`
	Outcome       string     `json:"outcome"` // starts or deadlock
	Ready         bool       `json:"ready"`
	FailingChecks []string   `json:"failingChecks"`
	Exited        bool       `json:"exited"`
	ExitReason    string     `json:"exitReason,omitempty"`
	Refusals      []Refusal  `json:"refusals"`
	Prediction    Prediction `json:"prediction"`
	// ArgsLeftOut are the machine configs' extraArgs keys the replay does
	// not set (see ReplayArgRefusal), each with why.
	ArgsLeftOut []string `json:"argsLeftOut,omitempty"`
	Agrees      bool     `json:"agrees"`
	Mismatch    string   `json:"mismatch,omitempty"`
	// Runs are every replay: as given, and with the fix.
	Runs    []*ReplayRun `json:"runs"`
	Elapsed string       `json:"elapsed"`
}

// ReplayRun is one replay of the upgrade.
type ReplayRun struct {
	Name    string `json:"name"`    // "as given" or "with the fix"
	Outcome string `json:"outcome"` // starts or deadlock
	Ready   bool   `json:"ready"`
	// ReadyAfter is the time from TO's start to its first /readyz 200.
	ReadyAfter    string   `json:"readyAfter,omitempty"`
	FailingChecks []string `json:"failingChecks"`
	Exited        bool     `json:"exited"`
	ExitReason    string   `json:"exitReason,omitempty"`
	// NeverStarts: kube-apiserver TO refused its own command line and
	// exited at once (ExitReason is its line), before any start-up write.
	NeverStarts bool `json:"neverStarts,omitempty"`
	// Refusals are the start-up writes each webhook or policy refused
	// (counted from kube-apiserver TO's log).
	Refusals []Refusal `json:"refusals"`
	// Installed counts the objects installed through FROM, by kind.
	Installed map[string]int `json:"installed"`
	// Prediction is the audit's verdict for the same objects and versions.
	Prediction Prediction `json:"prediction"`
	// Agrees tells whether the prediction matches the outcome; a
	// disagreement is a bug in the audit's model (the replay is the truth).
	Agrees   bool   `json:"agrees"`
	Mismatch string `json:"mismatch,omitempty"`
	Elapsed  string `json:"elapsed"`
}

// Refusal is how often one webhook or policy refused a start-up write.
type Refusal struct {
	Kind          string `json:"kind"`          // ValidatingWebhookConfiguration, ValidatingAdmissionPolicy, ...
	Configuration string `json:"configuration"` // the configuration or policy
	Webhook       string `json:"webhook,omitempty"`
	Count         int    `json:"count"`
}

// Prediction is the audit's verdict beside the replay's.
type Prediction struct {
	Risk    audit.Risk `json:"risk"`
	Outcome string     `json:"outcome"` // starts, deadlock, or undecided (risk unknown)
	// Culprits name the objects (and the flags) the audit blames.
	Culprits []string `json:"culprits,omitempty"`
	// Refusals are the words the audit expects kube-apiserver TO to exit
	// with, for the extraArgs it refuses.
	Refusals []string `json:"refusals,omitempty"`
}

// ErrReplayDeadlock: the upgrade deadlocks on the lab (exit 24, the
// meaning audit gives a deadlock).
var ErrReplayDeadlock = failure.New(failure.AuditDeadlock, "the upgrade deadlocks")

// Err is nil when the deciding run starts, and a deadlock error otherwise.
func (r *ReplayReport) Err() error {
	if r.Outcome == OutcomeStarts {
		return nil
	}
	return ErrReplayDeadlock
}

// Replay runs the upgrade as given and, with Fix, again with the fix.
func Replay(ctx context.Context, opts ReplayOptions) (*ReplayReport, error) {
	start := time.Now()
	leftOut, err := opts.takeMachineConfigs()
	if err != nil {
		return nil, err
	}
	if err := opts.check(ctx); err != nil {
		return nil, err
	}
	for _, l := range leftOut {
		fmt.Fprintf(opts.Log, "replay: cluster.apiServer.extraArgs %s left out\n", l)
	}
	objs, err := parseReplayObjects(opts.Sources)
	if err != nil {
		return nil, err
	}
	cfgs, err := auditConfigurations(opts.Sources)
	if err != nil {
		return nil, err
	}
	if err := fromAcceptsArgs(opts); err != nil {
		return nil, err
	}
	rep := &ReplayReport{From: opts.From, To: opts.To, ArgsLeftOut: leftOut}
	run, err := replayOnce(ctx, opts, "as given", objs, cfgs)
	if err != nil {
		return nil, err
	}
	rep.Runs = append(rep.Runs, run)
	if opts.Fix {
		fixed, fixedCfgs, err := applyAuditFix(ctx, objs, cfgs, opts)
		if err != nil {
			return nil, err
		}
		run, err := replayOnce(ctx, opts, "with the fix", fixed, fixedCfgs)
		if err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, run)
	}
	last := rep.Runs[len(rep.Runs)-1]
	rep.Outcome, rep.Ready, rep.FailingChecks, rep.Exited, rep.ExitReason = last.Outcome, last.Ready, last.FailingChecks, last.Exited, last.ExitReason
	rep.Refusals, rep.Prediction, rep.Agrees, rep.Mismatch = last.Refusals, last.Prediction, last.Agrees, last.Mismatch
	rep.Elapsed = time.Since(start).Round(time.Millisecond).String()
	return rep, nil
}

// check refuses what cannot be replayed before anything starts.
// olderRelease tells whether release a (vX.Y.Z) comes before b.
func olderRelease(a, b string) bool {
	num := func(v string) (out [3]int) {
		for i, p := range strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3) {
			out[i], _ = strconv.Atoi(p)
		}
		return out
	}
	x, y := num(a), num(b)
	return slices.Compare(x[:], y[:]) < 0
}

func (o *ReplayOptions) check(ctx context.Context) error {
	// Not urfave's Required: `breakglass lab replay` hands its arguments
	// over unparsed, and the message here names the form wanted.
	if o.From == "" || o.To == "" {
		return failure.Input("name both versions, e.g. --from v1.32.13 --to v1.34.4", "replay needs the version the cluster runs (--from) and the one to upgrade to (--to)")
	}
	for _, v := range []*string{&o.From, &o.To} {
		if !strings.HasPrefix(*v, "v") {
			*v = "v" + *v
		}
		if !regexp.MustCompile(`^v1\.\d+\.\d+$`).MatchString(*v) {
			return failure.Input("give full versions, e.g. --from v1.32.13 --to v1.34.4", "version %q is not a Kubernetes release (want vX.Y.Z)", strings.TrimPrefix(*v, "v"))
		}
	}
	if o.From == o.To {
		return failure.Input("--to must be the version upgraded to", "--from and --to are both %s: that is a restart, not an upgrade", o.From)
	}
	if olderRelease(o.To, o.From) {
		return failure.Input("swap them: --from "+o.To+" --to "+o.From+" (the replay plays upgrades)",
			"--to %s is older than --from %s: that is a downgrade, which kube-apiserver does not support", o.To, o.From)
	}
	if len(o.Sources) == 0 && len(o.APIServerArgs) == 0 {
		return failure.Input("pass the cluster's admission objects: -f FILE (or - for standard input), --kubeconfig FILE, or --from-etcd; or its kube-apiserver flags: -f MACHINECONFIG, --apiserver-arg KEY=VALUE", "nothing to replay")
	}
	if err := checkReplayArgs(o.APIServerArgs); err != nil {
		return err
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultReplayTimeout
	}
	if o.Timeout < 10*time.Second || o.Timeout > time.Hour {
		return failure.Input("give --timeout a value from 10s to 1h, e.g. --timeout 90s", "--timeout %s is out of range: from 10s to 1h", o.Timeout)
	}
	if o.TimeScale == 0 {
		o.TimeScale = 0.05
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	dir, err := Binaries(ctx, o.KubeBinDir, o.Log, o.From, o.To)
	if err != nil {
		return err
	}
	o.KubeBinDir = dir
	for _, v := range []string{o.From, o.To} {
		if err := CheckBinaryVersion(filepath.Join(o.KubeBinDir, v, "kube-apiserver"), v); err != nil {
			return err
		}
	}
	return nil
}

// replayOnce plays the upgrade on a fresh single-node lab.
func replayOnce(ctx context.Context, opts ReplayOptions, name string, objs []replayObject, cfgs []audit.Configuration) (_ *ReplayRun, err error) {
	t0 := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(opts.Log, "replay (%s): "+format+"\n", append([]any{name}, args...)...)
	}
	run := &ReplayRun{Name: name, FailingChecks: []string{}, Refusals: []Refusal{}, Installed: map[string]int{}}
	run.Prediction, err = predict(ctx, cfgs, opts)
	if err != nil {
		return nil, err
	}

	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "breakglass-replay-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	} else {
		dir = filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	logf("kube-apiserver %s on a scratch node and etcd", opts.From)
	l, err := Start(ctx, Options{Dir: dir, Nodes: 1, FirstIP: opts.FirstIP, Version: opts.From, KubeBinDir: opts.KubeBinDir, TimeScale: opts.TimeScale})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := l.WaitReadyVersion(ctx, opts.From, 3*time.Minute); err != nil {
		return nil, fmt.Errorf("replay: kube-apiserver %s did not become ready: %w", opts.From, err)
	}
	if len(opts.APIServerArgs) > 0 {
		logf("cluster.apiServer.extraArgs %s, applied the Talos way", describeArgs(opts.APIServerArgs))
		if err := SetAPIServerArgs(ctx, l, 3*time.Minute, opts.APIServerArgs); err != nil {
			return nil, fmt.Errorf("replay: kube-apiserver %s with %s: %w", opts.From, describeArgs(opts.APIServerArgs), err)
		}
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		return nil, err
	}
	// Every backend unreachable: a loopback port held closed for the run.
	closed, err := talostest.ReservePort("127.0.0.1", 0)
	if err != nil {
		return nil, err
	}
	defer closed.Close()
	if err := installReplayObjects(ctx, kube, objs, "https://127.0.0.1:"+fmt.Sprint(closed.Port()), run.Installed); err != nil {
		return nil, err
	}
	logf("installed %s through %s; every webhook now points at a closed port", describeCounts(run.Installed), opts.From)

	logf("upgrading the node to %s the Talos way (cluster.apiServer.image)", opts.To)
	if err := Upgrade(ctx, l, opts.To); err != nil {
		return nil, err
	}
	first, err := observeUpgrade(ctx, l, kube, opts, run)
	if err != nil {
		return nil, err
	}
	if first != nil {
		logs := containerLog(ctx, l, *first)
		run.Refusals = countRefusals(logs, objs)
		if run.Exited {
			run.ExitReason = exitReason(*first, logs)
			run.NeverStarts = startRefusal.MatchString(run.ExitReason)
		}
	}
	run.Outcome = OutcomeDeadlock
	if run.Ready {
		run.Outcome = OutcomeStarts
	}
	run.Agrees, run.Mismatch = compare(run.Prediction, run.Outcome, run)
	run.Elapsed = time.Since(t0).Round(time.Millisecond).String()
	logf("%s (%s)", run.Outcome, run.Elapsed)
	return run, nil
}

// observeUpgrade waits for kube-apiserver TO's first container, then until
// it is ready, exits, or opts.Timeout has passed since it started. It
// returns that container.
func observeUpgrade(ctx context.Context, l *Lab, kube *KubeClient, opts ReplayOptions, run *ReplayRun) (*ContainerRun, error) {
	node := l.Nodes()[0]
	// The kubelet notices the new manifest at its next poll, then stops the
	// old pod: bounded, whatever the time scale.
	switchDeadline := time.Now().Add(2 * time.Minute)
	var first *ContainerRun
	lastProbe := time.Time{}
	for {
		if first == nil {
			for _, r := range l.Runs() {
				if r.Node == node && strings.HasSuffix(r.Image, ":"+opts.To) && !r.Started.IsZero() {
					first = &r
					break
				}
			}
			if first == nil && time.Now().After(switchDeadline) {
				return nil, fmt.Errorf("replay: kube-apiserver %s was not started within 2m of the upgrade", opts.To)
			}
		}
		if first != nil {
			cur := runByID(l, first.ID)
			switch {
			case !cur.Ready.IsZero():
				run.Ready, run.ReadyAfter, run.FailingChecks = true, cur.Ready.Sub(cur.Started).Round(time.Millisecond).String(), []string{}
				return &cur, nil
			case !cur.Exited.IsZero():
				run.Exited = true
				return &cur, nil
			case time.Since(cur.Started) > opts.Timeout:
				return &cur, nil
			}
			if time.Since(lastProbe) > time.Second {
				lastProbe = time.Now()
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				if ready, failing, err := kube.Readyz(pctx); err == nil && !ready {
					run.FailingChecks = failing
				}
				cancel()
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func runByID(l *Lab, id string) ContainerRun {
	for _, r := range l.Runs() {
		if r.ID == id {
			return r
		}
	}
	return ContainerRun{}
}

// startRefusal is kube-apiserver refusing its own command line: pflag's
// unknown flag, or an error before anything started ("command failed":
// a feature gate, a --runtime-config entry, a flag's value).
var startRefusal = regexp.MustCompile(`Error: unknown flag: --\S+|E\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ run\.go:\d+\] "command failed" err=.*$`)

// klogFatal is a klog line of severity F, the line the process died on
// (behind the CRI log prefix the Logs API keeps).
var klogFatal = regexp.MustCompile(`(?:^|\s)(F\d{4} \d{2}:\d{2}:\d{2}\.\d+ .*)$`)

// exitReason is the process's own last word: its fatal log line (which
// post-start hook gave up) or its refusal of its command line, else how it
// ended.
func exitReason(r ContainerRun, logs string) string {
	// The Talos Logs API's copy first; the process's own last lines when
	// that is gone (a crashed container's log is garbage-collected soon).
	lines := strings.Split(logs+"\n"+r.LastLog, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m := klogFatal.FindStringSubmatch(lines[i]); m != nil {
			return strings.TrimSpace(m[1])
		}
		if m := startRefusal.FindStringSubmatch(lines[i]); m != nil {
			return strings.TrimSpace(m[0])
		}
	}
	if r.ExitErr != "" {
		return r.ExitErr
	}
	return strings.TrimSpace(r.LastLog)
}

// predict is the audit's verdict for the configurations and versions.
func predict(ctx context.Context, cfgs []audit.Configuration, opts ReplayOptions) (Prediction, error) {
	rep, err := audit.AuditContext(ctx, cfgs, auditOptions(opts))
	if err != nil {
		return Prediction{}, err
	}
	p := Prediction{Risk: rep.Risk, Outcome: OutcomeStarts}
	switch rep.Risk {
	case audit.RiskDeadlock:
		p.Outcome = OutcomeDeadlock
	case audit.RiskUnknown:
		p.Outcome = "undecided"
	}
	for _, f := range rep.Findings {
		if f.Risk == rep.Risk && rep.Risk != audit.RiskNone {
			p.Culprits = append(p.Culprits, string(f.Kind)+" "+f.Configuration+"/"+f.Webhook)
		}
	}
	for _, f := range rep.APIServerArgs {
		if f.Risk == audit.RiskDeadlock {
			p.Culprits = append(p.Culprits, f.Subject())
			p.Refusals = append(p.Refusals, f.OnTo)
		}
	}
	return p, nil
}

// auditOptions are the audit's options for the replayed versions.
func auditOptions(opts ReplayOptions) audit.Options {
	return audit.Options{FromVersion: opts.From, ToVersion: opts.To, ExtraArgs: replayExtraArgs(opts.APIServerArgs)}
}

// fromAcceptsArgs refuses, before anything starts, extraArgs that FROM
// itself refuses as the recorded binary answered: the cluster cannot be
// running them, and the scratch node would never start.
func fromAcceptsArgs(opts ReplayOptions) error {
	fs, err := audit.CheckExtraArgs(replayExtraArgs(opts.APIServerArgs), opts.From, opts.From)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if f.Risk == audit.RiskDeadlock {
			return failure.Input("replay from a version that accepts it, or leave it out: breakglass audit -f MACHINECONFIG --from "+opts.From+" says what else",
				"kube-apiserver %s refuses %s itself (%s): a cluster running %s cannot have it", opts.From, termsafe.Text(f.Subject()), termsafe.Text(f.OnTo), opts.From)
		}
	}
	return nil
}

// compare says whether the audit predicted the outcome, and if not, how.
// A start refused on a flag is predicted only if the audit named the very
// refusal the binary exited with.
func compare(p Prediction, outcome string, run *ReplayRun) (bool, string) {
	if len(p.Refusals) > 0 && outcome == OutcomeDeadlock {
		for _, r := range p.Refusals {
			if run.NeverStarts && strings.Contains(run.ExitReason, r) {
				return true, ""
			}
		}
		if !run.NeverStarts {
			return false, fmt.Sprintf("the audit predicted kube-apiserver refuses its flags (%s), but it started and then did not become ready", strings.Join(p.Culprits, ", "))
		}
		return false, fmt.Sprintf("kube-apiserver exited with %q, which is none of the refusals the audit predicted (%s)", run.ExitReason, strings.Join(p.Refusals, "; "))
	}
	switch {
	case p.Outcome == outcome:
		return true, ""
	case p.Outcome == "undecided":
		return false, fmt.Sprintf("the audit could not decide (risk unknown); the replay says %s", outcome)
	default:
		return false, fmt.Sprintf("the audit predicted %s (risk %s) but the upgrade %s on real binaries: the audit's model is wrong here, trust the replay", p.Outcome, p.Risk, map[string]string{OutcomeStarts: "started", OutcomeDeadlock: "deadlocked"}[outcome])
	}
}

// Log lines naming what refused a start-up write (klog quotes names with
// escaped or plain double quotes; policies with single quotes).
var (
	webhookFailureLine = regexp.MustCompile(`failed calling webhook \\?"([^"\\]+)\\?"`)
	policyDenialLine   = regexp.MustCompile(`(ValidatingAdmissionPolicy|MutatingAdmissionPolicy) '([^']+)'`)
)

// containerLog is one kube-apiserver container's whole log, read through
// the Talos Logs API as an engineer would (empty when it cannot be read).
func containerLog(ctx context.Context, l *Lab, run ContainerRun) string {
	api, err := l.machineryClient(ctx)
	if err != nil {
		return ""
	}
	defer api.Close()
	logs, _ := readContainerLogs(ctx, api, run.Node, l.Cluster.Nodes[0].Name, run.ID)
	return logs
}

// countRefusals counts, in a kube-apiserver log, the refused calls of each
// webhook and policy of the objects.
func countRefusals(logs string, objs []replayObject) []Refusal {
	owners := webhookOwners(objs)
	counts := map[Refusal]int{}
	for _, line := range strings.Split(logs, "\n") {
		if m := webhookFailureLine.FindStringSubmatch(line); m != nil {
			key := owners[m[1]]
			if key.Kind == "" {
				key = Refusal{Kind: "webhook", Webhook: m[1]}
			}
			counts[key]++
			continue
		}
		if m := policyDenialLine.FindStringSubmatch(line); m != nil {
			counts[Refusal{Kind: m[1], Configuration: m[2]}]++
		}
	}
	out := []Refusal{}
	for k, n := range counts {
		k.Count = n
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Configuration+out[i].Webhook < out[j].Configuration+out[j].Webhook
	})
	return out
}

// describeCounts writes {"A": 2, "B": 1} as "2 A, 1 B".
func describeCounts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
