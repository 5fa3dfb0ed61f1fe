package recovery

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// An incident is one run of breakglass against a cluster, from the first
// step to the last, resumable across runs. Its journal is an append-only
// JSON-lines file, fsynced per record, written before and after each step.

// IncidentMeta is the first record of a journal: who, where, what was asked.
type IncidentMeta struct {
	ID          string          `json:"id"`
	Started     time.Time       `json:"started"`
	By          string          `json:"by"` // user@host
	Cluster     string          `json:"cluster,omitempty"`
	Nodes       []string        `json:"nodes"`
	Runbook     string          `json:"runbook"`
	Options     json.RawMessage `json:"options,omitempty"` // what resume needs to continue the same way
	ToolVersion string          `json:"toolVersion"`
	DryRun      bool            `json:"dryRun,omitempty"`
}

// Entry is one journal record.
type Entry struct {
	Time    time.Time       `json:"time"`
	Kind    string          `json:"kind"` // incident, begin, end, note
	Step    string          `json:"step,omitempty"`
	Action  string          `json:"action,omitempty"`
	Outcome string          `json:"outcome,omitempty"` // ok, skipped, failed, aborted (end records)
	Message string          `json:"message,omitempty"`
	Error   string          `json:"error,omitempty"`
	Elapsed Duration        `json:"elapsed,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"` // the step's typed result: backup paths, config hashes, nodes
	Meta    *IncidentMeta   `json:"meta,omitempty"` // kind incident only
}

// Step outcomes.
const (
	OutcomeOK      = "ok"
	OutcomeSkipped = "skipped"
	OutcomeFailed  = "failed"
	OutcomeAborted = "aborted"
)

// Journal appends to one incident's journal.
type Journal struct {
	ID   string
	Dir  string
	mu   sync.Mutex
	f    *os.File
	meta IncidentMeta
}

func (s State) incidentsDir() string { return filepath.Join(s.Dir, "incidents") }

// NewIncident creates an incident directory and its journal, and writes the
// incident record first.
func (s State) NewIncident(meta IncidentMeta, now time.Time) (*Journal, error) {
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	meta.ID = now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(rnd[:])
	meta.Started = now.UTC()
	if meta.By == "" {
		meta.By = whoami()
	}
	dir := filepath.Join(s.incidentsDir(), meta.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	j, err := openJournal(dir, meta)
	if err != nil {
		return nil, err
	}
	m := meta
	return j, j.Append(Entry{Time: now.UTC(), Kind: "incident", Meta: &m})
}

// ReadIncident reads an incident's journal without opening it for writing.
// An empty id means the newest incident.
func (s State) ReadIncident(id string) (string, []Entry, error) {
	if id == "" {
		list, err := s.Incidents()
		if err != nil {
			return "", nil, err
		}
		if len(list) == 0 {
			return "", nil, invalidInput("start one with: breakglass recover", "no incident in %s", s.incidentsDir())
		}
		id = list[len(list)-1].ID
	}
	dir := filepath.Join(s.incidentsDir(), filepath.Base(id))
	entries, err := ReadJournal(filepath.Join(dir, "journal.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, invalidInput("list them with: breakglass journal list", "no incident %q", id)
	}
	if err != nil {
		return "", nil, err
	}
	if len(entries) == 0 || entries[0].Meta == nil {
		return "", nil, fmt.Errorf("journal of incident %s has no incident record", id)
	}
	return dir, entries, nil
}

// OpenIncident reopens an incident's journal to append to it (resume,
// revert). An empty id means the newest incident.
func (s State) OpenIncident(id string) (*Journal, []Entry, error) {
	dir, entries, err := s.ReadIncident(id)
	if err != nil {
		return nil, nil, err
	}
	j, err := openJournal(dir, *entries[0].Meta)
	return j, entries, err
}

func openJournal(dir string, meta IncidentMeta) (*Journal, error) {
	f, err := os.OpenFile(filepath.Join(dir, "journal.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &Journal{ID: meta.ID, Dir: dir, f: f, meta: meta}, nil
}

// Meta is the incident record.
func (j *Journal) Meta() IncidentMeta { return j.meta }

// Append writes one record and fsyncs it: after a crash, the journal holds
// every step that started.
func (j *Journal) Append(e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return j.f.Sync()
}

// Close closes the journal file.
func (j *Journal) Close() error { return j.f.Close() }

// ReadJournal reads a journal. A last line cut short by a crash is ignored:
// the record before it is the last one that was written whole.
func ReadJournal(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			continue // a torn last record
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// IncidentSummary is one line of `journal list`.
type IncidentSummary struct {
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
	By      string    `json:"by"`
	Cluster string    `json:"cluster,omitempty"`
	Runbook string    `json:"runbook"`
	DryRun  bool      `json:"dryRun,omitempty"`
	// Standalone: a single change (admission disable or restore), not a
	// guided recovery; there is nothing to resume.
	Standalone bool   `json:"standalone,omitempty"`
	LastStep   string `json:"lastStep,omitempty"`
	State      string `json:"state"` // completed, failed, interrupted, aborted
	Path       string `json:"path"`
}

// Incidents lists the incidents, oldest first.
func (s State) Incidents() ([]IncidentSummary, error) {
	dirs, err := os.ReadDir(s.incidentsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []IncidentSummary
	for _, d := range dirs {
		path := filepath.Join(s.incidentsDir(), d.Name(), "journal.jsonl")
		entries, err := ReadJournal(path)
		if err != nil || len(entries) == 0 || entries[0].Meta == nil {
			continue
		}
		m := entries[0].Meta
		sum := IncidentSummary{ID: m.ID, Started: m.Started, By: m.By, Cluster: m.Cluster, Runbook: m.Runbook, DryRun: m.DryRun, Standalone: standalone(*m), Path: path}
		sum.LastStep, sum.State = incidentState(entries)
		out = append(out, sum)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, nil
}

// incidentState reads how far an incident got from its records.
func incidentState(entries []Entry) (lastStep, state string) {
	state = "interrupted"
	for _, e := range entries {
		switch e.Kind {
		case "begin":
			lastStep, state = e.Step, "interrupted"
		case "end":
			lastStep = e.Step
			switch e.Outcome {
			case OutcomeFailed:
				state = "failed"
			case OutcomeAborted:
				state = "aborted"
			default:
				state = "interrupted"
			}
		case "finish":
			state = e.Outcome
		}
	}
	return lastStep, state
}

// CompletedSteps are the steps whose end record says ok or skipped: what a
// resume does not run again.
func CompletedSteps(entries []Entry) map[string]bool {
	done := map[string]bool{}
	for _, e := range entries {
		if e.Kind == "end" && (e.Outcome == OutcomeOK || e.Outcome == OutcomeSkipped) {
			done[e.Step] = true
		}
	}
	return done
}

// finished tells whether an incident in this state has nothing left to
// resume: it completed, or its diagnosis stopped it before any change.
func finished(state string) bool {
	return state == "completed" || state == "nothing-to-do" || state == "stopped"
}

// resumable is the newest incident that started a step and did not
// complete: what `resume` without an ID continues. A run refused before its
// first step (the lock was held, say) is not one.
func (s State) resumable() (string, error) {
	list, err := s.Incidents()
	if err != nil {
		return "", err
	}
	for i := len(list) - 1; i >= 0; i-- {
		if !finished(list[i].State) && list[i].LastStep != "" && !list[i].DryRun && !list[i].Standalone {
			return list[i].ID, nil
		}
	}
	return "", invalidInput("list them with: breakglass journal list", "no interrupted incident to resume in %s", s.incidentsDir())
}

// JournalData is what the journal keeps of an executed plan: per node, the
// action, the config hashes and the outcome (never the config itself).
func (p *AdmissionPlan) JournalData() any {
	data := map[string]any{}
	for _, n := range p.Nodes {
		data[n.Node] = map[string]any{"action": n.Action, "outcome": n.Outcome, "configHashBefore": n.ConfigHashBefore, "configHashAfter": n.ConfigHashAfter, "disabledAfter": n.DisabledAfter}
	}
	return data
}
