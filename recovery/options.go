package recovery

// What a run is asked (RecoverOptions), what it returns (RecoverResult),
// and how the commands it prints reach the incident's cluster (Target).

import (
	"regexp"
	"slices"
	"strings"
	"time"

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

// The runbook names standalone changes are journaled under.
const (
	standaloneDisable     = "admission disable"
	standaloneRestore     = "admission restore"
	standaloneDelete      = "etcd delete"
	standaloneEtcdRestore = "etcd restore"
	standaloneLockBreak   = "lock break"
)

// standalone tells whether an incident is a standalone change: named so,
// or journaled before standalone changes recorded their options.
func standalone(meta IncidentMeta) bool {
	return len(meta.Options) == 0 || slices.Contains([]string{standaloneDisable, standaloneRestore, standaloneDelete, standaloneEtcdRestore, standaloneLockBreak}, meta.Runbook)
}

// standaloneNext is what resume says to do instead for a standalone change:
// run the same command again (each is idempotent), or undo it.
func standaloneNext(meta IncidentMeta, id string) string {
	t := Target{Context: meta.Context, Nodes: meta.Nodes}
	switch meta.Runbook {
	case standaloneDisable:
		return "run it again (it is idempotent): " + t.NodesCmd("admission disable") + "; or undo it: " + t.Cmd("revert "+id)
	case standaloneRestore:
		return "run it again (it is idempotent): " + t.NodesCmd("admission restore")
	case standaloneDelete:
		return "run it again (it is idempotent): " + t.NodesCmd("etcd delete NAME...") + "; or put the objects back: " + t.Cmd("revert "+id+" --objects")
	case standaloneEtcdRestore:
		return "run it again (it is idempotent): " + t.NodesCmd("etcd restore FILE")
	}
	return "see what it did: breakglass journal show " + id
}

// standalone tells whether these are a standalone change's options.
func (o RecoverOptions) standalone() bool {
	return standalone(IncidentMeta{Runbook: o.Runbook, Options: []byte("{}")})
}

// union is a then the items of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// Duration is a duration written the short way in JSON ("1.5s", "5m"):
// the runbooks' type, so every duration breakglass writes reads the same.
type Duration = runbooks.Duration

// elapsedSince is the time since start, to the millisecond.
func elapsedSince(start time.Time) Duration {
	return Duration(time.Since(start).Round(time.Millisecond))
}
