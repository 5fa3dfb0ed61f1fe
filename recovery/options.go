package recovery

// What a run is asked (RecoverOptions), what it returns (RecoverResult),
// and how the commands it prints reach the incident's cluster (Target).

import (
	"regexp"
	"strings"

	"github.com/breakglass-dev/breakglass/runbooks"
)

// RecoverOptions are what the operator asked for; they are stored in the
// incident record so that a resume continues the same way.
type RecoverOptions struct {
	Runbook      string `json:"runbook"`
	Steps        []Step `json:"steps"` // the runbook's, with the command line's overrides
	KeepDisabled bool   `json:"keepDisabled,omitempty"`
	// AllowPendingChange: apply even over someone else's pending TRY or STAGED change.
	AllowPendingChange bool `json:"allowPendingChange,omitempty"`
	// PluginsExplicit, RunbookExplicit: --plugins or --runbook was given;
	// otherwise the diagnosis decides (see Decision).
	PluginsExplicit bool `json:"pluginsExplicit,omitempty"`
	RunbookExplicit bool `json:"runbookExplicit,omitempty"`
	// Delete names admission objects to remove (recover --delete), of any
	// kind unless DeleteKind says; they are resolved in etcd during
	// preflight, before anything changes.
	Delete     []string `json:"delete,omitempty"`
	DeleteKind string   `json:"deleteKind,omitempty"`
	// NoWait, WaitTimeout: after an admission change, whether and how long
	// to wait for kube-apiserver to run with the new flags.
	NoWait      bool     `json:"noWait,omitempty"`
	WaitTimeout Duration `json:"waitTimeout,omitempty"`
	// NoKubeletRestart: a step that changes kube-apiserver's static pod
	// leaves the kubelets to their next poll instead of restarting them.
	NoKubeletRestart bool `json:"noKubeletRestart,omitempty"`
	// Plugins: restore without a record removes just these.
	Plugins []string `json:"plugins,omitempty"`
	// BackupDir, Snapshot (etcd delete), ForceCluster (etcd restore): the
	// standalone etcd changes' options.
	BackupDir    string      `json:"backupDir,omitempty"`
	Snapshot     bool        `json:"snapshot,omitempty"`
	ForceCluster bool        `json:"forceCluster,omitempty"`
	DryRun       bool        `json:"dryRun,omitempty"` // chosen by the run's Effects
	Etcd         EtcdOptions `json:"etcd"`
	ToolVersion  string      `json:"toolVersion"`
	Command      string      `json:"command"` // recover, resume, revert: for the lock and the journal
	// CommandLine is the command as typed, without --dry-run: what a dry
	// run says to run for real.
	CommandLine string `json:"commandLine,omitempty"`
	// NodesGone are control planes the operator says are gone for good
	// (recover --nodes-gone): checked not to answer, left out of -n, and
	// their etcd members lost with them.
	NodesGone []string `json:"nodesGone,omitempty"`
	// SecretsBundle is the path of this cluster's Talos secrets bundle
	// (recover --secrets-bundle): where an encryption key may be found when
	// no control plane's machine config holds it. The path only: the key
	// material is read when needed, never kept.
	SecretsBundle string `json:"secretsBundle,omitempty"`
	// RemoveUnreadable is the operator's consent to the last resort of an
	// encryption drift (recover --remove-unreadable): the values no key
	// breakglass finds decrypts are backed up and removed from etcd.
	RemoveUnreadable bool `json:"removeUnreadable,omitempty"`
}

// StepResult is the outcome of one step.
type StepResult struct {
	Name    string   `json:"name"`
	Action  string   `json:"action"`
	Outcome string   `json:"outcome"`
	Message string   `json:"message,omitempty"`
	Elapsed Duration `json:"elapsed"`
	// Result is what the step did, typed by its action (for example
	// *AdmissionResult): the command that ran one step renders it.
	Result Result `json:"-"`
}

// RecoverResult is the whole run.
type RecoverResult struct {
	Incident string `json:"incident"`
	// Journal is the journal file this run wrote; "" when it wrote none (a
	// dry run of an existing incident).
	Journal string       `json:"journal"`
	DryRun  bool         `json:"dryRun"`
	Steps   []StepResult `json:"steps"`
	Outcome string       `json:"outcome"` // completed, nothing-to-do, stopped, partial, failed, aborted
	// Decision is the plan the diagnosis fixed (plugins and why).
	Decision *Decision `json:"decision,omitempty"`
	// Undone lists what the operator asked for and the run could not do,
	// each with the command that finishes it.
	Undone []string `json:"undone,omitempty"`
	// LeftBehind names the incident's nodes the operator said are gone
	// (--nodes-gone), and what of them the state directory still holds.
	LeftBehind []string `json:"leftBehind,omitempty"`
	Elapsed    Duration `json:"elapsed"`
	Next       []string `json:"next,omitempty"` // the commands to run next
}

// Target is how a printed command reaches an incident's cluster: the
// talosconfig context and the nodes it ran on, so that every hint can be
// typed as is.
type Target struct {
	Context string
	Nodes   []string
}

// Cmd is "breakglass SUB" for the incident's context (resume and revert
// find the nodes in the incident).
func (t Target) Cmd(sub string) string { return "breakglass " + sub + t.flags(false) }

// NodesCmd is "breakglass SUB" for the incident's nodes and context.
func (t Target) NodesCmd(sub string) string { return "breakglass " + sub + t.flags(true) }

func (t Target) flags(nodes bool) string {
	var b strings.Builder
	if nodes && len(t.Nodes) > 0 {
		b.WriteString(" -n " + ShellWord(strings.Join(t.Nodes, ",")))
	}
	if t.Context != "" {
		b.WriteString(" --context " + ShellWord(t.Context))
	}
	return b.String()
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_.,:@%+=/-]+$`)

// ShellWord quotes s for a shell when it needs it.
func ShellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// standalone tells whether these are a standalone change's options.
func (o RecoverOptions) standalone() bool {
	return standalone(IncidentMeta{Runbook: o.Runbook, Options: []byte("{}")})
}

// LostMember is an etcd member the diagnosis found lost (the parameters of
// etcd.member.remove and etcd.reset carry them).
type LostMember = runbooks.LostMember
