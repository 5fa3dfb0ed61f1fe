package diagnose

// kube-apiserver refusing its own command line: an upgrade carried
// cluster.apiServer.extraArgs the new minor no longer takes (a feature gate
// locked or gone, a flag removed, a --runtime-config version it no longer
// registers). It exits at once, before any start-up write, and the kubelet
// restarts it with back-off, forever. The signatures are the real binaries'
// lines (testdata/logs/flags-*.log, taken by testdata/capture); without a
// log line, the pod's rendered flags are checked against what its version
// accepts, as the lab's binaries answered (internal/apiserverargs).

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
)

// FlagsRunbook is the built-in runbook that takes refused flags out.
const FlagsRunbook = "apiserver-flags"

// The words of kube-apiserver v1.32 to v1.37 (component-base featuregate,
// apiserver api_enablement and resourceconfig, pflag), as the binaries
// printed them.
var (
	gateRefusal    = regexp.MustCompile(`cannot set feature gate ([A-Za-z0-9]+) to (true|false), feature is (?:locked to (?:true|false)|PreAlpha at emulated version [0-9.]+)`)
	gateUnknown    = regexp.MustCompile(`unrecognized feature gate: ([A-Za-z0-9]+)`)
	flagUnknown    = regexp.MustCompile(`Error: unknown flag: --([a-z0-9][a-z0-9-]*)`)
	versionUnknown = regexp.MustCompile(`group version ([a-z0-9.-]+/[a-z0-9]+) that has not been registered`)
	groupUnknown   = regexp.MustCompile(`unknown api groups ([a-z0-9./,-]+)`)
)

var flagSignatures = []Signature{
	{
		ID: "flag-unknown", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"unknown flag"},
		Pattern:  flagUnknown,
		Meaning:  "kube-apiserver refuses a flag of its own command line it no longer has, and exits at once: the kubelet restarts it with back-off",
		Next:     "breakglass recover",
	},
	{
		ID: "feature-gate-refused", Source: SourceLog, Class: ClassFailure, Multi: true,
		Literals: []string{"cannot set feature gate"},
		Pattern:  gateRefusal,
		Meaning:  "kube-apiserver refuses a feature gate value its version no longer allows (the gate is locked), and exits at once: the kubelet restarts it with back-off",
		Next:     "breakglass recover",
	},
	{
		ID: "feature-gate-unknown", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"unrecognized feature gate"},
		Pattern:  gateUnknown,
		Meaning:  "kube-apiserver does not know a feature gate its --feature-gates names, and exits at once: the kubelet restarts it with back-off",
		Next:     "breakglass recover",
	},
	{
		ID: "runtime-config-refused", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"that has not been registered", "unknown api groups"},
		Pattern:  regexp.MustCompile(versionUnknown.String() + `|` + groupUnknown.String()),
		Meaning:  "kube-apiserver does not serve an API group version its --runtime-config names, and exits at once: the kubelet restarts it with back-off",
		Next:     "breakglass recover",
	},
	{
		ID: "feature-gate-warning", Source: SourceLog, Class: ClassInfo,
		Literals: []string{"feature gate"},
		// Up to 1.35 "Setting GA feature gate NAME=true. ..."; structured from 1.36.
		Pattern: regexp.MustCompile(`Setting (?:GA|deprecated) feature gate ([A-Za-z0-9]+)=(true|false)\. It will be removed in a future release|` +
			`"Warning: setting (?:GA|deprecated) feature gate\. It will be removed in a future release\." featureGate="([A-Za-z0-9]+)" value=(true|false)`),
		Meaning: "kube-apiserver accepts a GA or deprecated feature gate, with a warning: the next minor may lock or remove it, and then refuse to start",
	},
	{
		ID: "flag-deprecated", Source: SourceLog, Class: ClassInfo,
		Literals: []string{"has been deprecated"},
		Pattern:  regexp.MustCompile(`Flag --([a-z0-9-]+) has been deprecated`),
		Meaning:  "kube-apiserver accepts a deprecated flag, with a warning: the next minor may remove it, and then refuse to start",
	},
}

func init() { Signatures = append(Signatures, flagSignatures...) }

var flagSignatureIDs = []string{"flag-unknown", "feature-gate-refused", "feature-gate-unknown", "runtime-config-refused"}

// RefusedFlag is one of kube-apiserver's own flags its binary refuses.
type RefusedFlag struct {
	// Flag is the extraArgs key (feature-gates, runtime-config, cloud-provider).
	Flag string `json:"flag"`
	// Item is the gate or entry as the pod's command line has it
	// (MultiCIDRServiceAllocator=false); empty for a whole flag.
	Item string `json:"item,omitempty"`
	// Name is the gate's or the API group version's name.
	Name string `json:"name,omitempty"`
	// Refusal is kube-apiserver's own words.
	Refusal string   `json:"refusal"`
	Nodes   []string `json:"nodes"`
	// Source: log (its log line), or flags (the pod's rendered flags
	// against what its version accepts, when no log line says it).
	Source Source `json:"source"`
}

// Subject is the flag, with its item.
func (f RefusedFlag) Subject() string {
	if f.Item == "" {
		return "--" + f.Flag
	}
	return "--" + f.Flag + " " + f.Item
}

// flagsRefused concludes flags-refused when a node that is not ready shows
// kube-apiserver refusing its own flags.
func (r *Report) flagsRefused(ev *Evidence, suspect []string) bool {
	var refused []RefusedFlag
	add := func(rf RefusedFlag, node string) {
		for i := range refused {
			if refused[i].Flag == rf.Flag && refused[i].Item == rf.Item && refused[i].Name == rf.Name {
				if !slices.Contains(refused[i].Nodes, node) {
					refused[i].Nodes = append(refused[i].Nodes, node)
				}
				return
			}
		}
		rf.Nodes = []string{node}
		refused = append(refused, rf)
	}
	fromLog := map[string]bool{}
	for _, f := range r.Findings {
		if !slices.Contains(flagSignatureIDs, f.Signature) {
			continue
		}
		for _, node := range f.Nodes {
			if !slices.Contains(suspect, node) {
				continue
			}
			fromLog[node] = true
			ne := nodeByName(ev, node)
			rf := refusedFromLog(f, ne)
			add(rf, node)
		}
	}
	for _, node := range suspect {
		ne := nodeByName(ev, node)
		if fromLog[node] || !crashLooping(ne) {
			continue
		}
		for _, rf := range refusedByRecord(ne) {
			add(rf, node)
			// The same signature as the log line would be, seen in the flags.
			s, _ := SignatureByID(recordedSignature(rf))
			r.Findings = append(r.Findings, Finding{Signature: s.ID, Class: s.Class, Subject: recordedSubject(rf), Meaning: s.Meaning + " (no log line says it: the pod's rendered flags, against what the lab's binary of its version answered)",
				Nodes: []string{node}, Count: 1, Lines: []Line{{Nodes: []string{node}, Source: SourceFlags, Text: "kube-apiserver " + imageVersion(ne.Image) + " " + rf.Subject() + ": " + rf.Refusal, Count: 1}}})
		}
	}
	if len(refused) == 0 {
		return false
	}
	r.Verdict, r.Flags, r.Runbook = FlagsRefused, refused, FlagsRunbook
	var nodes, what []string
	for _, rf := range refused {
		for _, n := range rf.Nodes {
			nodes = appendOnce(nodes, n)
		}
		what = append(what, fmt.Sprintf("%s (%s)", rf.Subject(), rf.Refusal))
	}
	slices.Sort(nodes)
	r.Summary = fmt.Sprintf("kube-apiserver refuses its own flags on %s and exits at once: %s", nodeList(nodes, len(ev.Nodes)), strings.Join(what, "; "))
	var backoff []string
	for _, n := range nodes {
		if p := nodeByName(ev, n).Pod; p != nil && p.Found {
			state := "not running"
			if p.WaitingReason != "" {
				state = p.WaitingReason
			}
			backoff = append(backoff, fmt.Sprintf("%s %s, %d restarts", n, state, p.Restarts))
		}
	}
	if len(backoff) > 0 {
		r.Summary += "; the kubelet restarts it with back-off (" + strings.Join(backoff, "; ") + ")"
	}
	r.Notes = append(r.Notes,
		"these flags come from each node's machine config, cluster.apiServer.extraArgs: Talos renders the kube-apiserver static pod from it, so the fix is there, not in etcd",
		"change them also where the machine configs are generated (Omni template, talhelper, Terraform, patch files), or the next apply brings them back")
	r.addNext("breakglass recover   # runbook " + FlagsRunbook + ": takes them out of cluster.apiServer.extraArgs on every control plane (shown, asked, applied without a reboot), waits for /readyz")
	for _, n := range nodes {
		r.addNext("talosctl -n " + n + " edit machineconfig --mode=no-reboot   # by hand: " + flagsEditHint(refused, n))
	}
	return true
}

// refusedFromLog is a flag signature's finding on one node, named as the
// pod's command line has it.
func refusedFromLog(f Finding, ne NodeEvidence) RefusedFlag {
	rf := RefusedFlag{Source: SourceLog, Refusal: words(f)}
	switch f.Signature {
	case "flag-unknown":
		rf.Flag = f.Subject
	case "feature-gate-refused", "feature-gate-unknown":
		rf.Flag, rf.Name = "feature-gates", f.Subject
		rf.Item = itemNamed(flaglist.Split(ne.Flags["feature-gates"]...), f.Subject, gateName)
		if rf.Item == "" && f.Detail != "" {
			rf.Item = f.Subject + "=" + f.Detail
		}
	case "runtime-config-refused":
		rf.Flag, rf.Name = "runtime-config", f.Subject
		rf.Item = itemNamed(flaglist.Split(ne.Flags["runtime-config"]...), f.Subject, runtimeConfigName)
	}
	return rf
}

// words is kube-apiserver's refusal in the finding's first line, for its subject.
func words(f Finding) string {
	s, _ := SignatureByID(f.Signature)
	for _, l := range f.Lines {
		for _, w := range s.Pattern.FindAllString(l.Text, -1) {
			if strings.Contains(w, f.Subject) {
				return w
			}
		}
	}
	return f.Meaning
}

// itemNamed is the item of a list flag that names name.
func itemNamed(items []string, name string, nameOf func(string) []string) string {
	for _, it := range items {
		if slices.Contains(nameOf(it), name) {
			return it
		}
	}
	return ""
}

// gateName of "kube:NAME=VALUE" is NAME.
func gateName(item string) []string {
	k, _, _ := strings.Cut(item, "=")
	return []string{strings.TrimPrefix(strings.TrimSpace(k), "kube:")}
}

// runtimeConfigName of "GROUP/VERSION[/RESOURCE]=VALUE" are GROUP/VERSION
// and GROUP (kube-apiserver names one or the other).
func runtimeConfigName(item string) []string {
	k, _, _ := strings.Cut(item, "=")
	t := strings.Split(strings.TrimSpace(k), "/")
	if len(t) < 2 {
		return t
	}
	return []string{t[0] + "/" + t[1], t[0]}
}

// crashLooping: the kubelet reports kube-apiserver's container not running,
// or restarted.
func crashLooping(ne NodeEvidence) bool {
	p := ne.Pod
	return p != nil && p.Found && (!p.Running || p.Restarts > 0 || p.WaitingReason != "")
}

var imageTag = regexp.MustCompile(`:(v?1\.\d+\.\d+)`)

func imageVersion(image string) string {
	if m := imageTag.FindStringSubmatch(image); m != nil {
		return m[1]
	}
	return ""
}

// refusedByRecord checks the pod's rendered flags against what its version
// accepts, as the lab's binary of that minor answered.
func refusedByRecord(ne NodeEvidence) []RefusedFlag {
	v := imageVersion(ne.Image)
	if v == "" || len(ne.Flags) == 0 {
		return nil
	}
	minor, err := audit.NormalizeVersion(v)
	if err != nil {
		return nil
	}
	ea := audit.ExtraArgs{Source: ne.Node}
	keys := make([]string, 0, len(ne.Flags))
	for k := range ne.Flags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ea.Args = append(ea.Args, audit.ExtraArg{Key: k, Values: ne.Flags[k]})
	}
	fs, err := audit.CheckExtraArgs([]audit.ExtraArgs{ea}, minor, minor)
	if err != nil {
		return nil
	}
	var out []RefusedFlag
	for _, f := range fs {
		if f.Risk != audit.RiskDeadlock {
			continue
		}
		rf := RefusedFlag{Flag: f.Flag, Item: f.Item, Refusal: f.OnTo, Source: SourceFlags}
		switch f.Flag {
		case "feature-gates":
			rf.Name = gateName(f.Item)[0]
		case "runtime-config":
			rf.Name = runtimeConfigName(f.Item)[0]
		}
		out = append(out, rf)
	}
	return out
}

// recordedSignature is the log signature of a refusal found by the record.
func recordedSignature(rf RefusedFlag) string {
	switch {
	case rf.Flag == "runtime-config":
		return "runtime-config-refused"
	case rf.Flag == "feature-gates" && gateUnknown.MatchString(rf.Refusal):
		return "feature-gate-unknown"
	case rf.Flag == "feature-gates":
		return "feature-gate-refused"
	}
	return "flag-unknown"
}

// flagsEditHint says what to take out on one node.
func flagsEditHint(refused []RefusedFlag, node string) string {
	var parts []string
	for _, rf := range refused {
		if !slices.Contains(rf.Nodes, node) {
			continue
		}
		if rf.Item == "" {
			parts = append(parts, "remove the key cluster.apiServer.extraArgs."+rf.Flag)
		} else {
			parts = append(parts, "remove "+rf.Item+" from cluster.apiServer.extraArgs."+rf.Flag)
		}
	}
	return strings.Join(parts, "; ")
}

// writeRefusedFlags prints the refused flags, after the verdict.
func writeRefusedFlags(b *strings.Builder, r *Report) {
	for _, rf := range r.Flags {
		fmt.Fprintf(b, "\nrefused flag: %s on %s (%s)\n  kube-apiserver says: %s\n  from the machine config: cluster.apiServer.extraArgs.%s\n",
			rf.Subject(), strings.Join(rf.Nodes, ", "), rf.Source, rf.Refusal, rf.Flag)
	}
}

// recordedSubject is the finding's subject for a refusal: the gate or group
// version, or the flag.
func recordedSubject(rf RefusedFlag) string {
	if rf.Name != "" {
		return rf.Name
	}
	return rf.Flag
}
