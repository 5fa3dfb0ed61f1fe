package audit

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Risk is the verdict for one webhook.
type Risk string

const (
	// RiskDeadlock: failurePolicy Fail and the webhook matches a start-up
	// write whose failure stops kube-apiserver. With its backend unreachable
	// (as in the incident, where the backend needs the service network that
	// the start-up writes create) kube-apiserver never becomes ready.
	RiskDeadlock Risk = "deadlock"
	// RiskSlowStart: failurePolicy Ignore, but a fatal start-up write waits
	// for the webhook's timeout on every call while the backend hangs.
	RiskSlowStart Risk = "slow-start"
	// RiskNone: no start-up write that matters is held up.
	RiskNone Risk = "none"
	// RiskUnknown: a matchCondition that decides it depends on what the audit
	// cannot model (the authorizer, object fields, functions it lacks).
	RiskUnknown Risk = "unknown"
)

// severity orders risks for sorting and for the worst-of.
func (r Risk) severity() int {
	switch r {
	case RiskDeadlock:
		return 3
	case RiskUnknown:
		return 2
	case RiskSlowStart:
		return 1
	}
	return 0
}

// DefaultSlowTimeout is the webhook timeout from which an Ignore webhook on a
// fatal start-up write counts as a slow-start risk. While the backend hangs
// (an unroutable ClusterIP, the incident's case) every call costs the full
// timeout. The hooks that gate readiness write one object after another
// within fixed budgets: service-ip-repair has a hard 1 minute for one
// IPAddress per Service, rbac/bootstrap-roles and the system PriorityClasses
// 30 s, APF 5 min. At 5 s a dozen Services without an IPAddress already
// exhaust the repair budget and the process exits; below it the delay stays
// in seconds.
const DefaultSlowTimeout = 5 * time.Second

// Options tune the audit.
type Options struct {
	// FromVersion is the minor the cluster runs before the start ("1.32" to
	// "1.37"; default 1.32, the incident's), ToVersion the one that starts
	// (default 1.34). What is written depends on both (see StartupRequests).
	FromVersion, ToVersion string
	// KubernetesVersion is the former name of ToVersion, used when ToVersion is empty.
	KubernetesVersion string
	// SlowTimeout is the threshold for slow-start; 0 means DefaultSlowTimeout.
	SlowTimeout time.Duration
	// RuntimeConfig lists extra group/versions enabled with --runtime-config
	// (e.g. "networking.k8s.io/v1beta1"); they matter for matchPolicy Equivalent.
	RuntimeConfig []string
	// NamespaceLabels adds labels to the system namespaces beyond
	// kubernetes.io/metadata.name, when the cluster has them.
	NamespaceLabels map[string]map[string]string
	// IncludeNewCluster also audits the writes made only on an empty etcd
	// (system namespaces, system PriorityClasses), where no webhook
	// configuration exists unless it was put there beforehand.
	IncludeNewCluster bool
	// Unreadable are admission objects whose stored value cannot be
	// decoded: each is a finding of risk unknown, never left out.
	Unreadable []Unreadable
	// ExtraArgs are the cluster's cluster.apiServer.extraArgs (one per
	// machine config read): each key and item ToVersion refuses at start is
	// a deadlock finding in Report.APIServerArgs (CheckExtraArgs).
	ExtraArgs []ExtraArgs

	// modelled audits the catalogue's model even for a pair recorded from
	// the binaries (the matcher's tests: the model has every kind of write).
	modelled bool
}

// startupRequests are the writes the options' upgrade audits.
func (o Options) startupRequests(from, to string) ([]StartupRequest, error) {
	if o.modelled {
		return ModelledStartupRequests(from, to)
	}
	return StartupRequests(from, to)
}

// Unreadable is an admission object known by kind and name only (its etcd
// value is encrypted at rest, or in no encoding breakglass reads).
type Unreadable struct {
	Kind, Name string
	Reason     string // e.g. "encrypted value"
	Stored     string // how etcd stores it ("encrypted"), for an object read from etcd
}

func unreadableFinding(u Unreadable) Finding {
	return Finding{Configuration: u.Name, ObjectKind: u.Kind, Risk: RiskUnknown, Blocks: []BlockedRequest{},
		Reasons: []string{"cannot be audited: " + u.Reason + "; audit it with --kubeconfig while an API server runs, or with -f from its manifest"}}
}

// BlockedRequest is one start-up write a webhook would hold up.
type BlockedRequest struct {
	StartupRequest
	// Request is the short form, e.g. "CREATE networking.k8s.io/v1 servicecidrs kubernetes".
	Request string `json:"request"`
	// Outcome: "rejected" (the call fails, failurePolicy Fail),
	// "rejected-condition-error" (a matchCondition errors, failurePolicy Fail),
	// "delayed" (failurePolicy Ignore: waits up to the timeout, then goes on)
	// or "unknown".
	Outcome string `json:"outcome"`
	// Why lists the rule, selectors and conditions that decided it.
	Why []string `json:"why"`
}

// Outcomes of BlockedRequest.
const (
	OutcomeRejected       = "rejected"
	OutcomeConditionError = "rejected-condition-error"
	OutcomeDelayed        = "delayed"
	OutcomeUnknown        = "unknown"
)

// Finding is the verdict for one webhook.
type Finding struct {
	Configuration  string `json:"configuration"`
	Webhook        string `json:"webhook"`
	Kind           Kind   `json:"kind"`
	Risk           Risk   `json:"risk"`
	FailurePolicy  string `json:"failurePolicy"`
	TimeoutSeconds int32  `json:"timeoutSeconds"`
	// Blocks lists the start-up writes it would hold up (fatal or not).
	Blocks []BlockedRequest `json:"blocks"`
	// Reasons sums up the verdict.
	Reasons []string `json:"reasons"`
	// Fix is the matchCondition expression that removes the risk, when there is one.
	Fix string `json:"fix,omitempty"`
	// ObjectKind is the Kubernetes kind of a policy:
	// ValidatingAdmissionPolicy or MutatingAdmissionPolicy.
	ObjectKind string `json:"objectKind,omitempty"`
	// Binding is the binding the finding is for (admission policies only;
	// Configuration is then the policy's name).
	Binding string `json:"binding,omitempty"`

	configIndex  int // position of the configuration in Audit's input
	webhookIndex int
	bindingIndex int // position of the binding in Audit's input (policies)
}

// Report is the audit of a set of configurations.
type Report struct {
	// KubernetesVersion is ToVersion (kept for readers of the first format).
	KubernetesVersion  string    `json:"kubernetesVersion"`
	FromVersion        string    `json:"fromVersion"`
	ToVersion          string    `json:"toVersion"`
	SlowTimeoutSeconds float64   `json:"slowTimeoutSeconds"`
	Findings           []Finding `json:"findings"`
	// APIServerArgs are the verdicts on the cluster's extraArgs (when given):
	// what kube-apiserver ToVersion refuses, warns about or cannot be told.
	APIServerArgs []ArgFinding `json:"apiServerArgs,omitempty"`
	// ArgsSources are the machine configs whose extraArgs were checked.
	ArgsSources []string `json:"apiServerArgsSources,omitempty"`
	// Risk is the worst finding's risk.
	Risk Risk `json:"risk"`
}

// Count returns how many findings have the risk.
func (r Report) Count(risk Risk) int {
	n := 0
	for _, f := range r.Findings {
		if f.Risk == risk {
			n++
		}
	}
	return n
}

// finding returns the finding of the i-th configuration's w-th webhook.
func (r Report) finding(configIndex, webhookIndex int) (Finding, bool) {
	return r.first(func(f Finding) bool { return f.configIndex == configIndex && f.webhookIndex == webhookIndex })
}

// first returns the first finding that matches.
func (r Report) first(match func(Finding) bool) (Finding, bool) {
	if i := slices.IndexFunc(r.Findings, match); i >= 0 {
		return r.Findings[i], true
	}
	return Finding{}, false
}

// ByWebhook returns the findings of every webhook with this name, for
// example the NAME of a "failed calling webhook NAME" log line.
func (r Report) ByWebhook(name string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Webhook == name {
			out = append(out, f)
		}
	}
	return out
}

// Find returns the finding of a webhook by names (the first, when names repeat).
func (r Report) Find(configuration, webhook string) (Finding, bool) {
	return r.first(func(f Finding) bool { return f.Configuration == configuration && f.Webhook == webhook })
}

// Audit decides, for every webhook, whether it can block kube-apiserver's own
// start-up writes (see StartupRequests), assuming its backend is unreachable.
func Audit(cfgs []Configuration, opts Options) (Report, error) {
	return AuditContext(context.Background(), cfgs, opts)
}

// AuditContext is Audit stopped by ctx, even in the middle of a CEL
// evaluation: it then returns ctx's cause.
func AuditContext(ctx context.Context, cfgs []Configuration, opts Options) (Report, error) {
	from, to, err := opts.Versions()
	if err != nil {
		return Report{}, err
	}
	reqs, err := opts.startupRequests(from, to)
	if err != nil {
		return Report{}, err
	}
	slow := opts.SlowTimeout
	if slow <= 0 {
		slow = DefaultSlowTimeout
	}
	env := newMatchEnv(opts)
	env.ctx = ctx
	rep := Report{KubernetesVersion: to, FromVersion: from, ToVersion: to, SlowTimeoutSeconds: slow.Seconds(), Findings: []Finding{}, Risk: RiskNone}
	add := func(f Finding) {
		rep.Findings = append(rep.Findings, f)
		if f.Risk.severity() > rep.Risk.severity() {
			rep.Risk = f.Risk
		}
	}
	for ci, c := range cfgs {
		for _, w := range c.webhooks() {
			f := auditWebhook(w, reqs, env, slow)
			f.configIndex = ci
			add(f)
		}
	}
	for _, f := range auditPolicies(cfgs, reqs, env) {
		add(f)
	}
	if ctx.Err() != nil {
		// Findings made of evaluations that never ran say nothing.
		return Report{}, context.Cause(ctx)
	}
	for _, u := range opts.Unreadable {
		add(unreadableFinding(u))
	}
	if len(opts.ExtraArgs) > 0 {
		if rep.APIServerArgs, err = CheckExtraArgs(opts.ExtraArgs, from, to); err != nil {
			return Report{}, err
		}
		for _, ea := range opts.ExtraArgs {
			rep.ArgsSources = append(rep.ArgsSources, ea.Source)
		}
		if r := argsRisk(rep.APIServerArgs); r.severity() > rep.Risk.severity() {
			rep.Risk = r
		}
	}
	sort.SliceStable(rep.Findings, func(i, j int) bool {
		a, b := rep.Findings[i], rep.Findings[j]
		if a.Risk.severity() != b.Risk.severity() {
			return a.Risk.severity() > b.Risk.severity()
		}
		if a.configIndex != b.configIndex {
			return a.configIndex < b.configIndex
		}
		if a.webhookIndex != b.webhookIndex {
			return a.webhookIndex < b.webhookIndex
		}
		return a.bindingIndex < b.bindingIndex
	})
	return rep, nil
}

// Versions resolves the upgrade the options describe to "1.NN" minors, with
// the defaults (1.32 -> 1.34; KubernetesVersion when ToVersion is empty).
func (o Options) Versions() (from, to string, err error) {
	to = o.ToVersion
	if to == "" {
		to = o.KubernetesVersion
	} else if o.KubernetesVersion != "" {
		a, errA := NormalizeVersion(to)
		b, errB := NormalizeVersion(o.KubernetesVersion)
		if errA == nil && errB == nil && a != b {
			return "", "", &UnsupportedVersionError{Version: o.KubernetesVersion + " (KubernetesVersion differs from ToVersion " + o.ToVersion + ")"}
		}
	}
	f, t, err := parseVersions(o.FromVersion, to)
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("1.%d", f), fmt.Sprintf("1.%d", t), nil
}

func newMatchEnv(opts Options) matchEnv {
	env := matchEnv{namespaceLabels: opts.NamespaceLabels, runtimeConfig: map[string]bool{}, newCluster: opts.IncludeNewCluster}
	for _, rc := range opts.RuntimeConfig {
		env.runtimeConfig[rc] = true
	}
	return env
}

func auditWebhook(w *webhook, reqs []StartupRequest, env matchEnv, slow time.Duration) Finding {
	f := Finding{Configuration: w.configuration, Webhook: w.name, Kind: w.kind, FailurePolicy: string(w.failurePolicy),
		TimeoutSeconds: w.timeoutSeconds, Blocks: []BlockedRequest{}, Reasons: []string{}, webhookIndex: w.index}
	fail := w.failurePolicy != admissionregistrationv1.Ignore
	long := time.Duration(w.timeoutSeconds)*time.Second >= slow

	var fatalHit, fatalUnknown, anyHit []StartupRequest
	for _, r := range reqs {
		if env.done() {
			break
		}
		if r.NewClusterOnly && !env.newCluster {
			continue
		}
		m := w.match(r, env)
		var out string
		switch m.outcome {
		case outNoMatch:
			continue
		case outMatch:
			out = OutcomeDelayed
			if fail {
				out = OutcomeRejected
			}
		case outCondError:
			if !fail {
				continue
			}
			out = OutcomeConditionError
		case outUnknown:
			out = OutcomeUnknown
		}
		f.Blocks = append(f.Blocks, BlockedRequest{StartupRequest: r, Request: r.String(), Outcome: out, Why: m.why})
		if out == OutcomeUnknown {
			if r.Fatal {
				fatalUnknown = append(fatalUnknown, r)
			}
			continue
		}
		anyHit = append(anyHit, r)
		if r.Fatal {
			fatalHit = append(fatalHit, r)
		}
	}

	hooks := func(rs []StartupRequest) string {
		seen := map[string]bool{}
		var hs []string
		for _, r := range rs {
			if !seen[r.Hook] {
				seen[r.Hook] = true
				hs = append(hs, r.Hook)
			}
		}
		return strings.Join(hs, ", ")
	}
	switch {
	case fail && len(fatalHit) > 0:
		f.Risk = RiskDeadlock
		f.Reasons = append(f.Reasons, fmt.Sprintf("failurePolicy %s: while its backend is unreachable, %d fatal start-up write(s) are rejected; kube-apiserver fails %s",
			w.failurePolicy, len(fatalHit), hooks(fatalHit)))
	case fail && len(fatalUnknown) > 0:
		f.Risk = RiskUnknown
		f.Reasons = append(f.Reasons, fmt.Sprintf("failurePolicy %s: whether it rejects %d fatal start-up write(s) depends on matchConditions the audit cannot evaluate", w.failurePolicy, len(fatalUnknown)))
	case !fail && long && len(fatalHit) > 0:
		f.Risk = RiskSlowStart
		f.Reasons = append(f.Reasons, fmt.Sprintf("failurePolicy Ignore with timeoutSeconds %d (>= %s): each of %d fatal start-up write(s) waits up to %ds while the backend hangs, delaying %s",
			w.timeoutSeconds, slow, len(fatalHit), w.timeoutSeconds, hooks(fatalHit)))
		for _, r := range fatalHit {
			if r.ID == "ipaddress-create" && w.timeoutSeconds > 0 {
				// repairip.go runOnce: one IPAddress per Service, one after
				// another, within the hook's hard minute.
				f.Reasons = append(f.Reasons, fmt.Sprintf("service-ip-repair creates one IPAddress per existing Service one after another within 1m: from %d Services on, the first start of 1.33+ exits",
					60/w.timeoutSeconds+1))
				break
			}
		}
	case !fail && long && len(fatalUnknown) > 0:
		f.Risk = RiskUnknown
		f.Reasons = append(f.Reasons, fmt.Sprintf("failurePolicy Ignore with timeoutSeconds %d: whether it delays %d fatal start-up write(s) depends on matchConditions the audit cannot evaluate", w.timeoutSeconds, len(fatalUnknown)))
	default:
		f.Risk = RiskNone
		switch {
		case fail && len(f.Blocks) > 0:
			f.Reasons = append(f.Reasons, fmt.Sprintf("it can reject only non-fatal start-up writes (%d): logged and retried", len(f.Blocks)))
		case len(f.Blocks) > 0:
			f.Reasons = append(f.Reasons, fmt.Sprintf("failurePolicy Ignore with timeoutSeconds %d (< %s): matched start-up writes go on after at most %ds", w.timeoutSeconds, slow, w.timeoutSeconds))
		default:
			f.Reasons = append(f.Reasons, "no start-up write of kube-apiserver matches")
		}
	}
	if f.Risk != RiskNone {
		f.Fix = ExcludeAPIServerExpression
	}
	return f
}
