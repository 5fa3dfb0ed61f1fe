package recovery

// The engine: every change breakglass makes is a run of steps. It alone
// plans, shows, confirms, takes the lock, journals before and after, acts
// and verifies; each action is a typed executor registered once below.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// Step is one step of a run: its name, how to treat it, and its action's
// typed parameters (the runbook's *XxxParams, or one of the engine's own).
type Step struct {
	Name        string
	Description string
	Confirm     bool
	Optional    bool
	// Requested: the operator asked for this step by name (recover --delete):
	// never optional, and when it fails the run still puts the plugins back,
	// then ends as a partial failure naming what is left to do.
	Requested bool
	Params    Params
}

// Params are an action's parameters; their type names the action.
type Params interface{ Action() runbooks.Action }

// Action is the step's action name.
func (s Step) Action() string { return string(s.Params.Action()) }

// EtcdRestoreParams: etcd.restore puts back, create-only, the objects of
// backup files: those named (etcd restore FILE), or those the incident
// removed from etcd, found in its journal (revert --objects).
type EtcdRestoreParams struct {
	Backups []string `json:"backups,omitempty"`
}

// ActionEtcdRestore is the engine's own action behind revert --objects.
const ActionEtcdRestore runbooks.Action = "etcd.restore"

func (*EtcdRestoreParams) Action() runbooks.Action { return ActionEtcdRestore }

// Result is what a step did: one line for the operator and the journal; its
// exported fields are journaled with the step's end record.
type Result interface{ Message() string }

// said is a result that is only its message.
type said string

func (s said) Message() string { return string(s) }

// executor runs one action.
type executor struct {
	run     func(context.Context, *run, Step) (Result, error)
	changes bool // changes the cluster: the lock is taken, resume and revert care
	params  reflect.Type
}

var executors = map[runbooks.Action]executor{}

// register adds the executor of P's action; whether it changes the cluster
// is what the runbooks' action table says of it (the engine's own
// etcd.restore does).
func register[P Params](fn func(*run, context.Context, Step, P) (Result, error)) {
	var zero P
	a := zero.Action()
	info, known := runbooks.LookupAction(a)
	executors[a] = executor{
		run: func(ctx context.Context, r *run, s Step) (Result, error) {
			p, ok := s.Params.(P)
			if !ok {
				return nil, fmt.Errorf("internal: step %s has parameters %T, not %T", s.Name, s.Params, zero)
			}
			return fn(r, ctx, s, p)
		},
		changes: !known || info.ChangesCluster,
		params:  reflect.TypeOf(zero).Elem(),
	}
}

func init() {
	register((*run).preflight)
	register((*run).diagnose)
	register((*run).disable)
	register((*run).waitRecovering)
	register((*run).snapshot)
	register((*run).deleteObjects)
	register((*run).waitWebhooks)
	register((*run).restore)
	register((*run).verify)
	register((*run).restoreObjects)
}

// changesCluster tells whether an action changes the cluster.
func changesCluster(action string) bool {
	return executors[runbooks.Action(action)].changes
}

// stepJSON is how a step is journaled (with the run's options, for resume).
type stepJSON struct {
	Name        string          `json:"name"`
	Action      runbooks.Action `json:"action"`
	Description string          `json:"description,omitempty"`
	Confirm     bool            `json:"confirm,omitempty"`
	Optional    bool            `json:"optional,omitempty"`
	Requested   bool            `json:"requested,omitempty"`
	With        json.RawMessage `json:"with,omitempty"`
}

func (s Step) MarshalJSON() ([]byte, error) {
	with, err := json.Marshal(s.Params)
	if err != nil {
		return nil, err
	}
	return json.Marshal(stepJSON{Name: s.Name, Action: s.Params.Action(), Description: s.Description,
		Confirm: s.Confirm, Optional: s.Optional, Requested: s.Requested, With: with})
}

func (s *Step) UnmarshalJSON(b []byte) error {
	var j stepJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	ex, ok := executors[j.Action]
	if !ok {
		return fmt.Errorf("step %s: unknown action %q", j.Name, j.Action)
	}
	p := reflect.New(ex.params).Interface().(Params)
	if len(j.With) > 0 {
		if err := json.Unmarshal(j.With, p); err != nil {
			return fmt.Errorf("step %s: %w", j.Name, err)
		}
	}
	*s = Step{Name: j.Name, Description: j.Description, Confirm: j.Confirm, Optional: j.Optional, Requested: j.Requested, Params: p}
	return nil
}

// journalData is a result's record for the journal: its JournalData when
// it has one, else its exported fields; nothing for a bare message.
func journalData(res Result) json.RawMessage {
	var v any = res
	switch r := res.(type) {
	case nil, said:
		return nil
	case interface{ JournalData() any }:
		v = r.JournalData()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// Applier sends a machine config to a node (a *talos.Client is one).
type Applier interface {
	Apply(ctx context.Context, node string, req talos.ApplyRequest) (talos.ApplyResult, error)
}

// Effects are what a run may change, chosen once by the command that
// starts it. The zero value changes nothing: a dry run, in which the nodes
// validate every config (TRY dry runs, their diff shown), etcd evaluates
// every guard, and no config, etcd key, file, record or lock is written;
// only the journal is, marked dry run.
type Effects struct {
	// Nodes applies machine configs; nil: the nodes only validate them.
	Nodes Applier
	// Etcd writes etcd keys and backup and snapshot files; nil: nothing is
	// written (etcd.DryRunWriter).
	Etcd func(*etcd.Client) etcd.Writer
	// Lock takes the cluster lock before the first change.
	Lock bool
}

// Live is the effects of a real run through tc.
// A nil tc is a run that reaches etcd only.
func Live(tc *talos.Client) Effects {
	fx := Effects{Etcd: etcd.RealWriter, Lock: true}
	if tc != nil {
		fx.Nodes = tc
	}
	return fx
}

// DryRun tells whether these effects change nothing.
func (fx Effects) DryRun() bool { return fx.Nodes == nil && fx.Etcd == nil }

// EtcdWriter is the writer for ec (a nil ec: one that only writes files).
func (fx Effects) EtcdWriter(ec *etcd.Client) etcd.Writer {
	if fx.Etcd == nil {
		return etcd.DryRunWriter(ec)
	}
	return fx.Etcd(ec)
}
