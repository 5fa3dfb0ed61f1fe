package diagnose

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Verdict is the conclusion; commands map each to its own exit code.
type Verdict string

// Verdicts.
const (
	Healthy           Verdict = "healthy"            // kube-apiserver ready on every node
	AdmissionDeadlock Verdict = "admission-deadlock" // admission refuses kube-apiserver's own start-up writes
	OtherFailure      Verdict = "other-failure"      // not ready, for a known reason that is not admission
	FlagsRefused      Verdict = "flags-refused"      // kube-apiserver refuses its own flags and exits at once
	EtcdNoSpace       Verdict = "etcd-nospace"       // etcd is full (NOSPACE alarm): every write is refused
	EtcdMemberLost    Verdict = "etcd-member-lost"   // an etcd member is down, corrupt or removed; quorum holds
	EtcdQuorumLost    Verdict = "etcd-quorum-lost"   // too few healthy etcd members: no write goes through
	EncryptionDrift   Verdict = "encryption-drift"   // stored data does not decrypt with the encryption configuration
	Unknown           Verdict = "unknown"            // could not tell: nodes unread, or no known signature
)

// Category is the verdict's exit code: OK when healthy.
func (v Verdict) Category() failure.Category {
	switch v {
	case Healthy:
		return failure.OK
	case AdmissionDeadlock:
		return failure.DiagnoseDeadlock
	case OtherFailure:
		return failure.DiagnoseOther
	case FlagsRefused:
		return failure.DiagnoseFlags
	case EtcdNoSpace:
		return failure.DiagnoseNoSpace
	case EtcdMemberLost:
		return failure.DiagnoseMemberLost
	case EtcdQuorumLost:
		return failure.DiagnoseQuorumLost
	case EncryptionDrift:
		return failure.DiagnoseEncryption
	}
	return failure.DiagnoseUnknown
}

// Report is the diagnosis: the verdict, the objects to blame, the
// evidence behind it, and the next command.
type Report struct {
	Verdict Verdict `json:"verdict"`
	// Summary says what is wrong in one sentence.
	Summary string `json:"summary"`
	// Culprits are the admission objects that refuse the start-up writes.
	Culprits []Culprit `json:"culprits,omitempty"`
	// Findings are the signatures seen, causes first.
	Findings []Finding `json:"findings"`
	// Next lists exact commands, the recommended one first.
	Next []string `json:"next,omitempty"`
	// Notes are things worth knowing that do not change the verdict.
	Notes []string `json:"notes,omitempty"`
	// Plugins are the admission plugins that must be off for kube-apiserver
	// to start (an admission deadlock), each with why; a guided recovery
	// disables these.
	Plugins []PluginNeed `json:"plugins,omitempty"`
	// Runbook is the built-in runbook that fits the culprits.
	Runbook string `json:"runbook,omitempty"`
	// Suspected: no log line names the culprit, but start-up is stuck and
	// etcd holds admission objects that can block it (a policy's denial is
	// not logged at default verbosity); Plugins are theirs.
	Suspected bool `json:"suspected,omitempty"`
	// Flags are kube-apiserver's own flags its binary refuses at start
	// (verdict flags-refused), each with the node and kube-apiserver's words.
	Flags    []RefusedFlag `json:"flags,omitempty"`
	Evidence *Evidence     `json:"evidence"`
}

// PluginNeed is one admission plugin to disable, and why.
type PluginNeed struct {
	Plugin string `json:"plugin"`
	Why    string `json:"why"`
}

// PluginNames lists the plugins to disable, in kube-apiserver's order.
func (r *Report) PluginNames() []string {
	var out []string
	for _, p := range r.Plugins {
		out = append(out, p.Plugin)
	}
	return out
}

// AdmissionEvidence tells whether the logs show an admission webhook or
// policy refusing writes (failing closed, or denying): positive evidence
// of an admission problem even when readiness could not be checked.
func (r *Report) AdmissionEvidence() bool { return len(r.byClass(ClassAdmission)) > 0 }

// Finding is one signature seen on one or more nodes.
type Finding struct {
	Signature string   `json:"signature"`
	Class     Class    `json:"class"`
	Subject   string   `json:"subject,omitempty"`
	Detail    string   `json:"detail,omitempty"` // a policy's binding
	Meaning   string   `json:"meaning"`
	Nodes     []string `json:"nodes"`
	Count     int      `json:"count"` // matching log lines and readyz checks, all nodes
	Lines     []Line   `json:"lines"` // distinct lines, the most frequent first, at most Options.MaxLines
}

// Line is a piece of evidence: the first occurrence of a line, how often
// it occurred (ignoring time stamp and process id) and on which nodes.
type Line struct {
	Nodes  []string `json:"nodes"`
	Source Source   `json:"source"`
	Text   string   `json:"text"`
	Count  int      `json:"count"`
}

// Culprit is an admission object that refuses kube-apiserver's start-up
// writes.
type Culprit struct {
	// Kind is ValidatingWebhookConfiguration, MutatingWebhookConfiguration,
	// ValidatingAdmissionPolicy or MutatingAdmissionPolicy.
	Kind string `json:"kind,omitempty"`
	// Name is the object's name: what to delete. Empty when etcd was not
	// read, or holds no such object.
	Name string `json:"name,omitempty"`
	// Webhook is the webhook's name inside the configuration, as logged.
	Webhook string `json:"webhook,omitempty"`
	// Binding is the policy binding named in the log, for a policy.
	Binding       string `json:"binding,omitempty"`
	FailurePolicy string `json:"failurePolicy,omitempty"`
	Target        string `json:"target,omitempty"`
	Key           string `json:"key,omitempty"`
	// Plugin is the admission plugin that calls it (what to disable).
	Plugin string `json:"plugin,omitempty"`
	// FoundInEtcd tells whether the object was found in etcd.
	FoundInEtcd bool `json:"foundInEtcd"`
}

// Admission plugins a culprit can belong to.
const (
	PluginValidatingWebhook = kinds.PluginValidatingWebhook
	PluginMutatingWebhook   = kinds.PluginMutatingWebhook
	PluginValidatingPolicy  = kinds.PluginValidatingPolicy
	PluginMutatingPolicy    = kinds.PluginMutatingPolicy
)

// nodeState is what is known of one node's kube-apiserver.
type nodeState int

const (
	stateUnknown nodeState = iota
	stateReady
	stateNotReady
	// stateUnchecked: the container runs, but /readyz could not be asked.
	// On Talos kube-apiserver's pod has no probes: it is "Ready" whenever the
	// container runs, deadlocked or not, so that proves nothing.
	stateUnchecked
)

func (ne NodeEvidence) state() nodeState {
	if r := ne.Readyz; r != nil && r.Error == "" {
		if r.Ready {
			return stateReady
		}
		return stateNotReady
	}
	if p := ne.Pod; p != nil && p.Found {
		if p.Running {
			return stateUnchecked
		}
		return stateNotReady
	}
	if ne.Pod != nil && !ne.Pod.Found {
		return stateNotReady // kubelet has not reported the pod
	}
	return stateUnknown
}

// Analyze draws the conclusion from the evidence. It reads nothing.
func Analyze(ev *Evidence, opts Options) *Report {
	opts = opts.withDefaults()
	r := &Report{Evidence: ev, Findings: findings(ev, opts.MaxLines)}

	var ready, notReady, unchecked, unknown []string
	for _, ne := range ev.Nodes {
		switch ne.state() {
		case stateReady:
			ready = append(ready, ne.Node)
		case stateNotReady:
			notReady = append(notReady, ne.Node)
		case stateUnchecked:
			unchecked = append(unchecked, ne.Node)
		default:
			unknown = append(unknown, ne.Node)
		}
		if len(ne.DisabledPlugins) > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("node %s runs kube-apiserver with --disable-admission-plugins=%s: policies are bypassed until it is reverted (breakglass admission restore)", ne.Node, strings.Join(ne.DisabledPlugins, ",")))
		}
	}
	if ev.Etcd.Error != "" {
		r.Notes = append(r.Notes, "etcd was not read: "+ev.Etcd.Error)
	}
	if ev.HealthError != "" {
		r.Notes = append(r.Notes, "readyz could not be asked: "+ev.HealthError)
	}

	admission := r.byClass(ClassAdmission)
	failures := r.byClass(ClassFailure)
	startupStuck := r.has("default-servicecidr", "poststarthook-failed", "readyz-service-cidr", "readyz-rbac-bootstrap", "readyz-autoregister", "readyz-priority-classes", "readyz-ip-repair")

	// A running container whose readiness could not be checked is judged by
	// the logs alone: positive evidence of a failure counts, its absence
	// proves nothing.
	suspect := append(slices.Clone(notReady), unchecked...)
	var trapped []NodeEvidence
	var trapWhy string
	for _, ne := range ev.Nodes {
		if why, ok := mapGateTrap(ne); ok && ne.state() != stateReady {
			trapped, trapWhy = append(trapped, ne), why
		}
	}
	etcdPolicies := policyCulprits(ev.Etcd)
	switch {
	case r.quorumLost(ev):
		// Nothing writes at all until etcd is bootstrapped again.
	case r.noSpace(ev, suspect, ready):
		// Nothing starts, whatever else it logged, until etcd has room.
	case r.memberLost(ev):
		// A node's kube-apiserver has no etcd to talk to; the cluster
		// limps on the others until the member is back.
	case r.flagsRefused(ev, suspect):
		// It never starts: nothing else it logged can matter yet.
	case r.encryptionDrift(ev, suspect):
		// It runs and never becomes ready: it cannot read what is stored.
	case len(trapped) > 0:
		// Every write is refused before admission objects are consulted:
		// deleting one would change nothing.
		r.Verdict = OtherFailure
		var names []string
		for _, ne := range trapped {
			names = append(names, ne.Node)
			for _, n := range mapGateTrapNext(ne) {
				r.addNext(n)
			}
		}
		r.Summary = fmt.Sprintf("not an admission object: on %s %s", nodeList(names, len(ev.Nodes)), trapWhy)
		if len(admission) > 0 {
			r.Notes = append(r.Notes, "admission refusals were logged too; fix the flags first, then diagnose again")
		}
	case len(admission) > 0 && (len(notReady) > 0 || (startupStuck && len(ready) == 0)):
		r.Verdict = AdmissionDeadlock
		r.Culprits = culprits(admission, ev.Etcd)
		r.deadlock(suspect, ev)
	case len(etcdPolicies) > 0 && startupStuck && (len(notReady) > 0 || len(ready) == 0):
		// A policy's denial of the default ServiceCIDR is not logged at
		// default verbosity: the audit of etcd names the candidates.
		r.Verdict = AdmissionDeadlock
		r.Culprits, r.Suspected = etcdPolicies, true
		r.deadlock(suspect, ev)
		r.Notes = append(r.Notes, "no log line names the culprit: the admission policies named are those the audit of etcd says reject start-up writes (breakglass audit --from-etcd)")
	case len(suspect) > 0 && len(failures) > 0:
		r.Verdict = OtherFailure
		f := failures[0]
		r.Summary = fmt.Sprintf("kube-apiserver is not ready on %s: %s", nodeList(suspect, len(ev.Nodes)), f.Meaning)
		if f.Subject != "" {
			r.Summary += " (" + f.Subject + ")"
		}
		for _, f := range failures {
			if s, ok := SignatureByID(f.Signature); ok && s.Next != "" {
				r.addNext(fill(s.Next, f, ev))
			}
		}
	case len(notReady) > 0:
		r.Verdict = Unknown
		r.Summary = fmt.Sprintf("kube-apiserver is not ready on %s, and its last log lines show no known cause", nodeList(notReady, len(ev.Nodes)))
		if stuck := r.symptoms(); stuck != "" {
			r.Summary += "; start-up is stuck at " + stuck
		}
		for _, n := range notReady {
			ne := nodeByName(ev, n)
			r.addNext(fmt.Sprintf("talosctl -n %s logs -k kube-system/kube-apiserver-%s:kube-apiserver --tail 1000", n, ne.NodeName))
		}
		if s := suspects(ev.Etcd); s != "" {
			r.Notes = append(r.Notes, "fail-closed webhooks in etcd that could block start-up: "+s)
		}
		r.suspectPlugins(ev.Etcd)
	case len(admission) > 0 && len(unchecked) > 0:
		// Positive evidence in the log, readiness unknown: name the culprits
		// and the plugins, but do not claim a deadlock that was not seen.
		r.Culprits = culprits(admission, ev.Etcd)
		r.deadlock(unchecked, ev)
		r.Verdict = Unknown
		r.Summary = fmt.Sprintf("kube-apiserver's readiness could not be checked on %s, but its log shows admission refusing writes: %s", nodeList(unchecked, len(ev.Nodes)), r.Summary)
	case len(unchecked) > 0:
		r.Verdict = Unknown
		r.Summary = fmt.Sprintf("kube-apiserver's container runs on %s, but its readiness could not be checked and its logs show no known failure: on Talos a running pod proves nothing (kube-apiserver has no probes there)", nodeList(unchecked, len(ev.Nodes)))
		if ev.HealthError != "" {
			r.Summary += "; /readyz: " + ev.HealthError
		}
		if len(unknown) > 0 {
			r.Summary += fmt.Sprintf("; could not read kube-apiserver's state on %s", nodeList(unknown, len(ev.Nodes)))
		}
		for _, n := range unchecked {
			ne := nodeByName(ev, n)
			if ne.Readyz != nil && ne.Readyz.Error != "" {
				r.Notes = append(r.Notes, fmt.Sprintf("node %s: /readyz could not be asked: %s", n, ne.Readyz.Error))
			}
		}
		r.addNext("breakglass apiserver wait --timeout 30s   # asks /readyz with the cluster's admin credentials (needs os:admin)")
		if s := suspects(ev.Etcd); s != "" {
			r.Notes = append(r.Notes, "fail-closed webhooks in etcd that could block start-up: "+s)
		}
	case len(unknown) > 0:
		r.Verdict = Unknown
		r.Summary = fmt.Sprintf("could not read kube-apiserver's state on %s", nodeList(unknown, len(ev.Nodes)))
		for _, n := range unknown {
			ne := nodeByName(ev, n)
			if len(ne.Errors) > 0 {
				r.Summary += fmt.Sprintf("; %s", ne.Errors[0])
			}
			r.addNextFor(ne, n)
		}
	default:
		r.Verdict = Healthy
		r.Summary = fmt.Sprintf("kube-apiserver is ready on %s", nodeList(ready, len(ev.Nodes)))
		if len(admission) > 0 {
			r.Notes = append(r.Notes, "admission failures were logged, but kube-apiserver is ready: no deadlock now")
		}
	}
	if len(unknown) > 0 && len(suspect) > 0 {
		// Concluded from the nodes that could be read; the others are named.
		for _, n := range unknown {
			ne := nodeByName(ev, n)
			note := "node " + n + " could not be read"
			if len(ne.Errors) > 0 {
				note += ": " + ne.Errors[0]
			}
			r.Notes = append(r.Notes, note)
			r.addNextFor(ne, n)
		}
	}
	return r
}

func (r *Report) deadlock(notReady []string, ev *Evidence) {
	var who []string
	plugins := map[string]bool{}
	var validating, mutating, bindings []string
	ambiguous := map[string]bool{}
	for _, c := range r.Culprits {
		if c.Webhook != "" {
			ambiguous[c.Webhook] = ambiguous[c.Webhook] || countWebhook(r.Culprits, c.Webhook) > 1
		}
	}
	why := map[string][]string{}
	for _, c := range r.Culprits {
		desc := ""
		switch {
		case c.Webhook != "" && c.Name != "":
			desc = fmt.Sprintf("webhook %q of %s %s (failurePolicy %s, %s)", c.Webhook, c.Kind, c.Name, c.FailurePolicy, c.Target)
		case c.Webhook != "":
			desc = fmt.Sprintf("webhook %q", c.Webhook)
		case c.Binding != "":
			desc = fmt.Sprintf("%s %s (binding %s)", c.Kind, c.Name, c.Binding)
		default:
			desc = fmt.Sprintf("%s %s", c.Kind, c.Name)
		}
		who = append(who, desc)
		if c.Plugin != "" {
			plugins[c.Plugin] = true
			source := "log"
			if r.Suspected {
				source = "audit of etcd; the log names no culprit"
			}
			why[c.Plugin] = appendOnce(why[c.Plugin], desc+" refuses start-up writes ("+source+")")
		} else {
			plugins[PluginValidatingWebhook], plugins[PluginMutatingWebhook] = true, true
			for _, p := range []string{PluginValidatingWebhook, PluginMutatingWebhook} {
				why[p] = appendOnce(why[p], desc+" refuses start-up writes (log; its kind is not known without etcd)")
			}
		}
		switch {
		case !c.FoundInEtcd || ambiguous[c.Webhook]:
		case c.Kind == kinds.ValidatingWebhookConfiguration:
			validating = appendOnce(validating, c.Name)
		case c.Kind == kinds.MutatingWebhookConfiguration:
			mutating = appendOnce(mutating, c.Name)
		case c.Kind == kinds.ValidatingAdmissionPolicy && c.Binding != "" && hasObject(ev.Etcd, kinds.ValidatingAdmissionPolicyBinding, c.Binding),
			c.Kind == kinds.MutatingAdmissionPolicy && c.Binding != "" && hasObject(ev.Etcd, kinds.MutatingAdmissionPolicyBinding, c.Binding):
			bindings = appendOnce(bindings, c.Binding)
		}
	}
	// A fail-closed webhook later in the chain is not in the log (the first
	// failure ends each request) but blocks start-up too: the audit says
	// which. Leaving its plugin on would keep the API server down.
	for _, o := range ev.Etcd.Objects {
		if o.StartupRisk != "deadlock" || contains(validating, o.Name) || contains(mutating, o.Name) {
			continue
		}
		switch o.Kind {
		case kinds.ValidatingWebhookConfiguration:
			plugins[PluginValidatingWebhook] = true
			why[PluginValidatingWebhook] = appendOnce(why[PluginValidatingWebhook], o.Kind+" "+o.Name+" fails closed on start-up writes too (audit of etcd; not in the log yet)")
		case kinds.MutatingWebhookConfiguration:
			plugins[PluginMutatingWebhook] = true
			why[PluginMutatingWebhook] = appendOnce(why[PluginMutatingWebhook], o.Kind+" "+o.Name+" fails closed on start-up writes too (audit of etcd; not in the log yet)")
		case kinds.ValidatingAdmissionPolicy, kinds.MutatingAdmissionPolicy:
			if culpritNamed(r.Culprits, o.Kind, o.Name) {
				continue
			}
			plugins[o.Kind] = true // the plugin has the kind's name
			why[o.Kind] = appendOnce(why[o.Kind], o.Kind+" "+o.Name+" rejects start-up writes too (audit of etcd; its denials are not all logged)")
		default:
			continue
		}
		r.Notes = append(r.Notes, fmt.Sprintf("%s %s is not in the log yet, but the audit says it blocks start-up too (breakglass audit --from-etcd): its plugin must be off as well", o.Kind, o.Name))
	}
	// The guided recovery first: its runbooks name the plugin and the kind
	// of object they delete (runbooks/builtin).
	switch {
	case len(validating) > 0 && len(mutating) > 0:
		r.addNext("breakglass recover --plugins " + PluginValidatingWebhook + "," + PluginMutatingWebhook + " --delete " + strings.Join(validating, ","))
		r.addNext("breakglass etcd delete --kind mutating " + strings.Join(mutating, " "))
	case len(validating) > 0 && plugins[PluginMutatingWebhook]:
		r.addNext("breakglass recover --plugins " + PluginValidatingWebhook + "," + PluginMutatingWebhook + " --delete " + strings.Join(validating, ","))
	case len(validating) > 0:
		r.addNext("breakglass recover --delete " + strings.Join(validating, ","))
	case len(mutating) > 0 && plugins[PluginValidatingWebhook]:
		r.addNext("breakglass recover --runbook mutating-webhook-deadlock --plugins " + PluginValidatingWebhook + "," + PluginMutatingWebhook + " --delete " + strings.Join(mutating, ","))
	case len(mutating) > 0:
		r.addNext("breakglass recover --runbook mutating-webhook-deadlock --delete " + strings.Join(mutating, ","))
	}
	if len(bindings) > 0 {
		r.addNext("breakglass recover --runbook policy-deadlock --delete " + strings.Join(bindings, ","))
	}
	where := "kube-apiserver cannot finish its start-up"
	if len(notReady) > 0 {
		where = "kube-apiserver is not ready on " + nodeList(notReady, len(ev.Nodes))
	}
	r.Summary = fmt.Sprintf("admission deadlock: %s refuses kube-apiserver's own start-up writes; %s", strings.Join(who, ", "), where)
	if s := r.symptoms(); s != "" {
		r.Summary += " (stuck at " + s + ")"
	}
	var ps []string
	for _, p := range []string{PluginValidatingWebhook, PluginMutatingWebhook, PluginValidatingPolicy, PluginMutatingPolicy} {
		if plugins[p] {
			ps = append(ps, p)
			r.Plugins = append(r.Plugins, PluginNeed{Plugin: p, Why: strings.Join(why[p], "; ")})
		}
	}
	switch {
	case plugins[PluginValidatingWebhook]:
		r.Runbook = "webhook-deadlock"
	case plugins[PluginMutatingWebhook]:
		r.Runbook = "mutating-webhook-deadlock"
	case plugins[PluginValidatingPolicy], plugins[PluginMutatingPolicy]:
		r.Runbook = "policy-deadlock"
	}
	r.addNext("breakglass admission disable --plugins " + strings.Join(ps, ","))
	if !ev.Etcd.Asked || ev.Etcd.Error != "" {
		r.Notes = append(r.Notes, "etcd was not read, so the configuration holding the webhook is not named: run again with etcd access (--etcd-endpoints, or an os:admin talosconfig)")
	}
	for w, amb := range ambiguous {
		if amb {
			r.Notes = append(r.Notes, fmt.Sprintf("webhook name %q appears in several configurations: check which one before deleting", w))
		}
	}
}

func hasObject(ee EtcdEvidence, kind, name string) bool {
	for _, o := range ee.Objects {
		if o.Kind == kind && o.Name == name {
			return true
		}
	}
	return false
}

func countWebhook(cs []Culprit, w string) int {
	n := 0
	for _, c := range cs {
		if c.Webhook == w && c.FoundInEtcd {
			n++
		}
	}
	return n
}

// symptoms names what start-up is stuck at, from the findings.
func (r *Report) symptoms() string {
	var out []string
	for _, f := range r.Findings {
		switch f.Signature {
		case "default-servicecidr":
			out = appendOnce(out, "the default ServiceCIDR")
		case "poststarthook-failed":
			out = appendOnce(out, "PostStartHook "+f.Subject+" (exits)")
		case "readyz-service-cidr", "readyz-rbac-bootstrap", "readyz-autoregister", "readyz-priority-classes", "readyz-ip-repair":
			out = appendOnce(out, f.Subject)
		}
	}
	return strings.Join(out, ", ")
}

// suspectPlugins names, for a start-up stuck with no culprit in the log,
// the plugins of the admission objects in etcd that can block it: webhook
// configurations the audit says can deadlock, and admission policies (whose
// denials kube-apiserver does not log at default verbosity).
func (r *Report) suspectPlugins(ee EtcdEvidence) {
	if r.symptoms() == "" {
		return
	}
	why := map[string][]string{}
	for _, o := range ee.Objects {
		switch {
		case o.Kind == kinds.ValidatingWebhookConfiguration && o.StartupRisk == "deadlock":
			why[PluginValidatingWebhook] = append(why[PluginValidatingWebhook], o.Kind+" "+o.Name+" can block start-up (audit of etcd)")
		case o.Kind == kinds.MutatingWebhookConfiguration && o.StartupRisk == "deadlock":
			why[PluginMutatingWebhook] = append(why[PluginMutatingWebhook], o.Kind+" "+o.Name+" can block start-up (audit of etcd)")
		case o.StartupRisk == string(audit.RiskNone):
			// The audit says it cannot block start-up (Warn/Audit only, no binding, ...).
		case o.Kind == kinds.ValidatingAdmissionPolicy || o.Kind == kinds.ValidatingAdmissionPolicyBinding:
			why[PluginValidatingPolicy] = append(why[PluginValidatingPolicy], o.Kind+" "+o.Name+" is in etcd (a policy's denial of the start-up writes is not logged)")
		case o.Kind == kinds.MutatingAdmissionPolicy || o.Kind == kinds.MutatingAdmissionPolicyBinding:
			why[PluginMutatingPolicy] = append(why[PluginMutatingPolicy], o.Kind+" "+o.Name+" is in etcd (a policy's failure on the start-up writes is not logged)")
		}
	}
	for _, p := range []string{PluginValidatingWebhook, PluginMutatingWebhook, PluginValidatingPolicy, PluginMutatingPolicy} {
		if len(why[p]) > 0 {
			r.Plugins = append(r.Plugins, PluginNeed{Plugin: p, Why: "suspected, start-up is stuck at " + r.symptoms() + ": " + strings.Join(why[p], "; ")})
			r.Suspected = true
		}
	}
	if r.Suspected {
		r.Notes = append(r.Notes, "no log line names the culprit; suspects from etcd: "+strings.Join(r.PluginNames(), ","))
	}
}

func (r *Report) byClass(c Class) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Class == c {
			out = append(out, f)
		}
	}
	return out
}

func (r *Report) has(ids ...string) bool {
	for _, f := range r.Findings {
		if contains(ids, f.Signature) {
			return true
		}
	}
	return false
}

// addNextFor is what to do next about a node that could not be read: the
// ways to a working talosconfig when apid refused its client certificate,
// else a talosctl line that tells whether the node answers.
func (r *Report) addNextFor(ne NodeEvidence, n string) {
	if len(ne.certHints) > 0 {
		for _, h := range ne.certHints {
			r.addNext(h)
		}
		return
	}
	r.addNext(fmt.Sprintf("talosctl -n %s version", n))
}

func (r *Report) addNext(cmd string) {
	if cmd != "" && !contains(r.Next, cmd) {
		r.Next = append(r.Next, cmd)
	}
}

// culprits maps the webhooks and policies named in the findings to the
// objects in etcd.
func culprits(admission []Finding, ee EtcdEvidence) []Culprit {
	var out []Culprit
	seen := map[string]bool{}
	for _, f := range admission {
		if f.Subject == "" || seen[f.Signature+"/"+f.Subject] {
			continue
		}
		seen[f.Signature+"/"+f.Subject] = true
		found := false
		switch f.Signature {
		case "policy-denied":
			for _, o := range ee.Objects {
				if o.Name == f.Subject && (o.Kind == kinds.ValidatingAdmissionPolicy || o.Kind == kinds.MutatingAdmissionPolicy) {
					found = true
					out = append(out, Culprit{Kind: o.Kind, Name: o.Name, Binding: f.Detail, FailurePolicy: o.Failure, Key: o.Key, Plugin: o.Kind, FoundInEtcd: true})
				}
			}
			if !found {
				kind := kinds.ValidatingAdmissionPolicy
				if strings.Contains(strings.Join(linesText(f), "\n"), "MutatingAdmissionPolicy '"+f.Subject+"'") {
					kind = kinds.MutatingAdmissionPolicy
				}
				out = append(out, Culprit{Kind: kind, Name: f.Subject, Binding: f.Detail, Plugin: kind})
			}
		default:
			for _, o := range ee.Objects {
				for _, w := range o.Webhooks {
					if w.Name != f.Subject {
						continue
					}
					found = true
					plugin := PluginValidatingWebhook
					if o.Kind == kinds.MutatingWebhookConfiguration {
						plugin = PluginMutatingWebhook
					}
					out = append(out, Culprit{Kind: o.Kind, Name: o.Name, Webhook: w.Name, FailurePolicy: w.FailurePolicy, Target: w.Target, Key: o.Key, Plugin: plugin, FoundInEtcd: true})
				}
			}
			if !found {
				out = append(out, Culprit{Webhook: f.Subject})
			}
		}
	}
	return out
}

func linesText(f Finding) []string {
	var out []string
	for _, l := range f.Lines {
		out = append(out, l.Text)
	}
	return out
}

// suspects lists the fail-closed webhooks in etcd.
func suspects(ee EtcdEvidence) string {
	var out []string
	for _, o := range ee.Objects {
		for _, w := range o.Webhooks {
			if w.FailurePolicy == "Fail" {
				out = append(out, fmt.Sprintf("%s %s (webhook %q, %s)", o.Kind, o.Name, w.Name, w.Target))
			}
		}
	}
	return strings.Join(out, "; ")
}

// findings matches every log line and failing readyz check of every node,
// and groups the matches by signature and subject.
func findings(ev *Evidence, maxLines int) []Finding {
	type key struct{ id, subject, detail string }
	type lineAcc struct {
		line  Line
		order int
	}
	type acc struct {
		f     Finding
		lines map[string]*lineAcc // by line key
	}
	groups := map[key]*acc{}
	var order []key
	n := 0
	add := func(m Match, node string, src Source, text, lk string) {
		k := key{m.ID, m.Subject, m.Detail}
		a := groups[k]
		if a == nil {
			s, _ := SignatureByID(m.ID)
			a = &acc{f: Finding{Signature: m.ID, Class: s.Class, Subject: m.Subject, Detail: m.Detail, Meaning: s.Meaning}, lines: map[string]*lineAcc{}}
			groups[k] = a
			order = append(order, k)
		}
		a.f.Count++
		a.f.Nodes = appendOnce(a.f.Nodes, node)
		if la := a.lines[lk]; la != nil {
			la.line.Count++
			la.line.Nodes = appendOnce(la.line.Nodes, node)
			return
		}
		n++
		a.lines[lk] = &lineAcc{line: Line{Nodes: []string{node}, Source: src, Text: text, Count: 1}, order: n}
	}
	for _, ne := range ev.Nodes {
		for _, l := range ne.Logs {
			for _, m := range MatchLine(l) {
				add(m, ne.Node, SourceLog, l, lineKey(l))
			}
		}
		// The same refusal, seen in the flags before any log line: kube-apiserver
		// prints the overlap as a Go list, "[A B]".
		if both := overlap(ne.EnabledPlugins, ne.DisabledPlugins); len(both) > 0 {
			text := "--enable-admission-plugins=" + strings.Join(ne.EnabledPlugins, ",") + " --disable-admission-plugins=" + strings.Join(ne.DisabledPlugins, ",")
			add(Match{ID: "admission-plugins-overlapped", Subject: strings.Join(both, " ")}, ne.Node, SourceFlags, text, text)
		}
		if r := ne.Readyz; r != nil && r.Error == "" {
			for _, c := range r.FailingChecks {
				text := "[-]" + c + " failed"
				add(MatchReadyzCheck(c), ne.Node, SourceReadyz, text, text)
			}
		}
	}
	out := make([]Finding, 0, len(order))
	for _, k := range order {
		a := groups[k]
		var ls []*lineAcc
		for _, la := range a.lines {
			ls = append(ls, la)
		}
		// Most frequent first, then first seen.
		sort.Slice(ls, func(i, j int) bool {
			if ls[i].line.Count != ls[j].line.Count {
				return ls[i].line.Count > ls[j].line.Count
			}
			return ls[i].order < ls[j].order
		})
		for i, la := range ls {
			if i == maxLines {
				break
			}
			a.f.Lines = append(a.f.Lines, la.line)
		}
		out = append(out, a.f)
	}
	rank := map[Class]int{ClassAdmission: 0, ClassFailure: 1, ClassSymptom: 2, ClassInfo: 3}
	tableIndex := map[string]int{}
	for i, s := range Signatures {
		tableIndex[s.ID] = i
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if rank[a.Class] != rank[b.Class] {
			return rank[a.Class] < rank[b.Class]
		}
		if tableIndex[a.Signature] != tableIndex[b.Signature] {
			return tableIndex[a.Signature] < tableIndex[b.Signature]
		}
		return a.Count > b.Count
	})
	return out
}

// fill puts the first node showing the finding into a Next template.
func fill(tmpl string, f Finding, ev *Evidence) string {
	node, name := "NODE", "NODENAME"
	if len(f.Nodes) > 0 {
		node = f.Nodes[0]
		if ne := nodeByName(ev, node); ne.NodeName != "" {
			name = ne.NodeName
		}
	}
	return strings.NewReplacer("{node}", node, "{nodeName}", name, "{subject}", f.Subject).Replace(tmpl)
}

func nodeByName(ev *Evidence, node string) NodeEvidence {
	for _, ne := range ev.Nodes {
		if ne.Node == node {
			return ne
		}
	}
	return NodeEvidence{}
}

func nodeList(nodes []string, total int) string {
	if len(nodes) == total && total > 1 {
		return fmt.Sprintf("all %d nodes (%s)", total, strings.Join(nodes, ", "))
	}
	if len(nodes) == 1 {
		return "node " + nodes[0]
	}
	return fmt.Sprintf("nodes %s", strings.Join(nodes, ", "))
}

func overlap(a, b []string) []string {
	var out []string
	for _, x := range a {
		if contains(b, x) {
			out = appendOnce(out, x)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func appendOnce(list []string, s string) []string {
	if contains(list, s) {
		return list
	}
	return append(list, s)
}
