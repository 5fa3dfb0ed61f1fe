package recovery

// A run's state, and what a step may read of it: the actions registered,
// the results of the steps before it (this run's, or those an earlier run
// of the incident journaled), etcd on first use. Steps never write it: the
// loop (engine.go) does.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// run is the state of one run of the engine.
type run struct {
	tc      *talos.Client
	st      State
	fx      Effects
	ui      UI
	opts    RecoverOptions
	journal *Journal
	target  Target // how printed commands reach the incident's cluster
	ec      *etcd.Client
	lock    lockState
	claimed bool            // this process wrote the incident's lock.pid
	done    map[string]bool // steps completed in an earlier run (resume)
	entries []Entry         // the journal before this run (resume, revert)
	results []StepResult    // this run's steps so far
	applies []Entry         // this run's apply records
	notes   []Entry         // this run's notes of where it left nodes (resetBack)
	// planned are the actions whose change this dry run planned without
	// applying: a later step cannot find what they would have recorded.
	planned map[runbooks.Action]bool
	undone  []string // requested steps that failed: what is left, with the command
	gone    []string // recorded nodes the operator said are gone (resume, revert)
}

func newRun(tc *talos.Client, st State, fx Effects, ui UI, opts RecoverOptions, j *Journal, entries []Entry) *run {
	return &run{tc: tc, st: st, fx: fx, ui: ui, opts: opts, journal: j, entries: entries, done: CompletedSteps(entries),
		planned: map[runbooks.Action]bool{}, target: Target{Context: j.Meta().Context, Nodes: tc.Nodes()}, gone: opts.NodesGone}
}

// earlier is the newest result of an action's step that ended well: this
// run's, or the one an earlier run of the incident journaled (resume).
func earlier[T Result](r *run, a runbooks.Action) (T, bool) {
	for _, s := range slices.Backward(r.results) {
		if t, ok := s.Result.(T); ok && s.Action == string(a) && s.Outcome == OutcomeOK {
			return t, true
		}
	}
	var zero T
	for _, e := range slices.Backward(r.entries) {
		if e.Kind != "end" || e.Action != string(a) || e.Outcome != OutcomeOK || len(e.Data) == 0 {
			continue
		}
		t := reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T)
		if json.Unmarshal(e.Data, t) == nil {
			return t, true
		}
	}
	return zero, false
}

// appliedChanges are the incident's apply records so far, oldest first:
// earlier runs' and this one's.
func (r *run) appliedChanges() []Entry {
	return append(journaledChanges(r.entries), r.applies...)
}

// journaledChanges are a journal's apply records, oldest first, less those
// an unapplied record says never took effect.
func journaledChanges(entries []Entry) []Entry {
	var out []Entry
	applyRecords := len(entries) > 0 && entries[0].Meta != nil && entries[0].Meta.JournalVersion >= 2
	for _, e := range entries {
		switch {
		// A journal from before apply records: a changing step begun.
		case e.Kind == "apply" || !applyRecords && e.Kind == "begin" && changesCluster(e.Action):
			out = append(out, e)
		case e.Kind == "unapplied" && len(out) > 0 && out[len(out)-1].Step == e.Step:
			out = out[:len(out)-1] // stopped before any of it was applied
		}
	}
	return out
}

// changed tells whether this incident applied a change, in this run or an
// earlier one.
func (r *run) changed() bool { return len(r.appliedChanges()) > 0 }

// willRun tells whether this run will execute a step with that action
// (it is in the runbook and did not complete in an earlier run).
func (r *run) willRun(a runbooks.Action) bool {
	return slices.ContainsFunc(r.opts.Steps, func(s Step) bool { return s.Params.Action() == a && !r.done[s.Name] })
}

// etcdClient connects on first use. Failing to reach etcd fails only the steps
// that need it, and is not kept: the next use tries again (etcd that timed
// out at preflight may answer by the time a step needs it).
func (r *run) etcdClient(ctx context.Context) (*etcd.Client, error) {
	if r.ec != nil {
		return r.ec, nil
	}
	o := r.opts.Etcd
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	ec, err := ConnectEtcd(ctx, r.tc, o)
	if err != nil {
		return nil, err
	}
	r.ec = ec
	return ec, nil
}

func (r *run) progress(node, msg string) { r.ui.Progress(node, msg) }

// warn says what the operator must know and not lose: it stays on the
// screen, marked, when the step's live lines are erased.
func (r *run) warn(msg string) { r.ui.Show(Text("WARNING: " + msg + "\n")) }

// executor plans one action.
type executor struct {
	plan    func(context.Context, *run, Step) (*Plan, error)
	changes bool // changes the cluster: the lock is taken, resume and revert care
	params  reflect.Type
}

var executors = map[runbooks.Action]executor{}

// register adds the executor of P's action; whether it changes the cluster
// is what the runbooks' action table says of it (the engine's own actions
// do).
func register[P Params](fn func(*run, context.Context, Step, P) (*Plan, error)) {
	var zero P
	a := zero.Action()
	info, known := runbooks.LookupAction(a)
	executors[a] = executor{
		plan: func(ctx context.Context, r *run, s Step) (*Plan, error) {
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

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// clusterLock is the cluster lock as the loop checks it before each change
// (an *etcd.Lock is one).
type clusterLock interface {
	// Lost is nil while the lock is known to be held, or says why not.
	Lost(ctx context.Context) error
	Release(ctx context.Context) error
}

// lockState is this run's hold on the cluster lock.
type lockState struct {
	held clusterLock
	// deferred: etcd was full when the lock was to be taken (taking it is
	// a write): the loop reads it before each change, and takes it as soon
	// as etcd takes writes again.
	deferred bool
	said     string // the last reason given why it is still not taken
}
