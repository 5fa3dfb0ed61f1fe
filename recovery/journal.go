package recovery

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
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
	Context     string          `json:"context,omitempty"` // the talosconfig context it ran through
	Runbook     string          `json:"runbook"`
	Options     json.RawMessage `json:"options,omitempty"` // what resume needs to continue the same way
	ToolVersion string          `json:"toolVersion"`
	DryRun      bool            `json:"dryRun,omitempty"`
	// JournalVersion 2: a change applied is journaled as an apply record
	// (after its confirmation); earlier journals have none.
	JournalVersion int `json:"journalVersion,omitempty"`
}

// Entry is one journal record.
type Entry struct {
	Time    time.Time       `json:"time"`
	Kind    string          `json:"kind"` // incident, begin, apply, unapplied, end, note, finish
	Step    string          `json:"step,omitempty"`
	Action  string          `json:"action,omitempty"`
	Outcome string          `json:"outcome,omitempty"` // ok, skipped, failed, aborted (end records)
	Message string          `json:"message,omitempty"`
	Error   string          `json:"error,omitempty"`
	Elapsed Duration        `json:"elapsed,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"` // the step's typed result: backup paths, config hashes, nodes
	Undo    *Undo           `json:"undo,omitempty"` // apply records: what can be done about the change afterwards
	// Facts (apply records) are what the change acted on, read again just
	// before it and found still so.
	Facts []string      `json:"facts,omitempty"`
	Meta  *IncidentMeta `json:"meta,omitempty"` // kind incident only
}

// Step outcomes.
const (
	OutcomeOK      = "ok"
	OutcomeSkipped = "skipped"
	OutcomeFailed  = "failed"
	OutcomeAborted = "aborted"
)

// Journal appends to one incident's journal. A journal without a file (a
// dry run of an existing incident) writes nothing.
type Journal struct {
	ID   string
	Dir  string
	mu   sync.Mutex
	f    *os.File
	meta IncidentMeta
}

func (s State) incidentsDir() string { return filepath.Join(s.Dir, "incidents") }

// NewIncident creates an incident directory and its journal, and writes the
// incident record first. When it cannot (a full disk, a read-only file
// system) it leaves nothing behind, no incident that never started to be
// read as damaged, and says so with a *StateDirError.
func (s State) NewIncident(meta IncidentMeta, now time.Time) (*Journal, error) {
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	meta.ID = now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(rnd[:])
	meta.Started = now.UTC()
	meta.JournalVersion = 2
	if meta.By == "" {
		meta.By = whoami()
	}
	dir := filepath.Join(s.incidentsDir(), meta.ID)
	undo, err := mkdirNew(dir)
	if err != nil {
		return nil, &StateDirError{Dir: s.Dir, Err: err}
	}
	j, err := openJournal(dir, meta)
	if err != nil {
		undo()
		return nil, &StateDirError{Dir: s.Dir, Err: err}
	}
	m := meta
	if err := j.Append(Entry{Time: now.UTC(), Kind: "incident", Meta: &m}); err != nil {
		j.Close()
		_ = os.Remove(j.Path())
		undo()
		return nil, &StateDirError{Dir: s.Dir, Err: err}
	}
	return j, nil
}

// ReadIncident reads an incident's journal without opening it for writing.
// An empty id means the newest incident. A damaged journal returns the
// records it could read with a *JournalDamageError.
func (s State) ReadIncident(id string) (string, []Entry, error) {
	if id == "" {
		list, err := s.Incidents()
		if err != nil {
			return "", nil, err
		}
		if len(list) == 0 {
			return "", nil, failure.Input("start one with: breakglass recover", "no incident in %s", s.incidentsDir())
		}
		id = list[len(list)-1].ID
	}
	dir := filepath.Join(s.incidentsDir(), filepath.Base(id))
	entries, err := ReadJournal(filepath.Join(dir, "journal.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(dir); derr == nil {
			return dir, nil, &JournalDamageError{Path: filepath.Join(dir, "journal.jsonl"), Reason: "the incident has no journal file"}
		}
		return "", nil, failure.Input("list them with: breakglass journal list", "no incident %q", id)
	}
	return dir, entries, err
}

func openJournal(dir string, meta IncidentMeta) (*Journal, error) {
	path := filepath.Join(dir, "journal.jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	torn, err := setAsideTorn(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	j := &Journal{ID: meta.ID, Dir: dir, f: f, meta: meta}
	if torn != "" {
		// Kept as a record, so the journal stays readable line by line and
		// nothing of it is lost.
		if err := j.Append(Entry{Kind: "note", Message: "a record cut short by a crash was set aside: " + strconv.Quote(torn)}); err != nil {
			j.Close()
			return nil, fmt.Errorf("journal %s: %w", path, err)
		}
	}
	return j, nil
}

// setAsideTorn cuts a last record left without its newline by a crash off
// the journal, so the next record is not glued to it, and returns it.
func setAsideTorn(f *os.File) (string, error) {
	info, err := f.Stat()
	if err != nil || info.Size() == 0 {
		return "", err
	}
	size := info.Size()
	tail := make([]byte, min(size, 1<<20))
	for off := size; off > 0; {
		n := min(off, int64(len(tail)))
		off -= n
		if _, err := f.ReadAt(tail[:n], off); err != nil {
			return "", err
		}
		i := bytes.LastIndexByte(tail[:n], '\n')
		if i < 0 && off > 0 {
			continue
		}
		cut := off + int64(i) + 1 // after the last newline (0 when there is none)
		if cut == size {
			return "", nil
		}
		torn := make([]byte, size-cut)
		if _, err := f.ReadAt(torn, cut); err != nil {
			return "", err
		}
		return string(torn), f.Truncate(cut)
	}
	return "", nil
}

// Meta is the incident record.
func (j *Journal) Meta() IncidentMeta { return j.meta }

// Path is the journal file, "" when it writes none.
func (j *Journal) Path() string {
	if j.f == nil {
		return ""
	}
	return filepath.Join(j.Dir, "journal.jsonl")
}

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
	if j.f == nil {
		return nil
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return j.f.Sync()
}

// Close closes the journal file.
func (j *Journal) Close() error {
	if j.f == nil {
		return nil
	}
	return j.f.Close()
}

// ReadJournal reads a journal. A last record cut short by a crash (no
// newline, not JSON) is ignored: the record before it is the last one that
// was written whole. Any other unreadable record, a journal without its
// incident record first, or an empty one, is a *JournalDamageError,
// returned with the records read before it. Lines have no length limit.
func ReadJournal(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	rd := bufio.NewReader(f)
	for n := 1; ; n++ {
		raw, rerr := rd.ReadBytes('\n')
		if rerr != nil && rerr != io.EOF {
			return out, fmt.Errorf("read journal %s: %w", path, rerr)
		}
		last := rerr == io.EOF
		if line := bytes.TrimSpace(raw); len(line) > 0 {
			var e Entry
			if err := json.Unmarshal(line, &e); err != nil {
				if last && raw[len(raw)-1] != '\n' {
					break // a torn last record
				}
				return out, &JournalDamageError{Path: path, Line: n, Reason: "not a journal record (" + shortErr(err) + ")"}
			}
			if len(out) == 0 && (e.Kind != "incident" || e.Meta == nil) {
				return nil, &JournalDamageError{Path: path, Line: n, Reason: "the first record is not the incident record"}
			}
			out = append(out, e)
		}
		if last {
			break
		}
	}
	if len(out) == 0 {
		return nil, &JournalDamageError{Path: path, Reason: "it holds no record (an empty or truncated file)"}
	}
	return out, nil
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
	State      string `json:"state"` // completed, failed, interrupted, aborted, damaged
	Path       string `json:"path"`
	// Damage says why a damaged journal cannot be read whole (state damaged).
	Damage string `json:"damage,omitempty"`
	// Changed: a change was applied, or may have been (an apply record no
	// unapplied record withdraws); an incident without one changed nothing.
	Changed bool `json:"changed,omitempty"`
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
		if !d.IsDir() {
			continue
		}
		path := filepath.Join(s.incidentsDir(), d.Name(), "journal.jsonl")
		entries, err := ReadJournal(path)
		if err != nil {
			// Listed, never skipped: an incident nobody sees cannot be
			// resumed nor explained.
			sum := IncidentSummary{ID: d.Name(), State: "damaged", Path: path, Damage: err.Error()}
			if errors.Is(err, os.ErrNotExist) {
				sum.Damage = "journal " + path + " is missing"
			}
			if len(entries) > 0 {
				m := entries[0].Meta
				sum.Started, sum.By, sum.Cluster, sum.Runbook, sum.DryRun, sum.Standalone = m.Started, m.By, m.Cluster, m.Runbook, m.DryRun, standalone(*m)
				sum.LastStep, _ = incidentState(entries)
			}
			out = append(out, sum)
			continue
		}
		m := entries[0].Meta
		sum := IncidentSummary{ID: m.ID, Started: m.Started, By: m.By, Cluster: m.Cluster, Runbook: followedRunbook(*m, entries), DryRun: m.DryRun, Standalone: standalone(*m), Path: path}
		sum.LastStep, sum.State = incidentState(entries)
		sum.Changed = len(journaledChanges(entries)) > 0
		out = append(out, sum)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, nil
}

// followedRunbook is the runbook an incident followed: the one its
// diagnosis switched it to, or the one it started with.
func followedRunbook(meta IncidentMeta, entries []Entry) string {
	rb := meta.Runbook
	for _, e := range entries {
		if e.Kind != "end" || e.Action != "diagnose" || e.Outcome != OutcomeOK {
			continue
		}
		var d struct {
			Decided *struct {
				Runbook string            `json:"runbook"`
				Steps   []json.RawMessage `json:"steps"`
			} `json:"decision"`
		}
		if json.Unmarshal(e.Data, &d) == nil && d.Decided != nil && len(d.Decided.Steps) > 0 && d.Decided.Runbook != "" {
			rb = d.Decided.Runbook
		}
	}
	return rb
}

// incidentIDOf is the incident a journal path belongs to.
func incidentIDOf(path string) string { return filepath.Base(filepath.Dir(path)) }

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

// closedOutcome is how a closed incident ends (journal close): the last
// of the states that leave nothing to resume.
const closedOutcome = "closed"

// finished tells whether an incident in this state has nothing left to
// resume: it completed, or its diagnosis stopped it before any change.
func finished(state string) bool {
	return state == "completed" || state == "nothing-to-do" || state == "stopped" || state == "reverted" || state == closedOutcome
}

// resumable is the newest incident that started a step and did not
// complete: what `resume` without an ID continues. A run refused before its
// first step (the lock was held, say) is not one. Where that newest one
// changed nothing and an older unfinished one did (a run killed half way,
// then a second declined at its prompt), which to continue is the
// operator's call: both are named, and nothing is resumed.
func (s State) resumable() (string, error) {
	list, err := s.Incidents()
	if err != nil {
		return "", err
	}
	newest := -1
	for i := len(list) - 1; i >= 0; i-- {
		inc := list[i]
		if inc.DryRun || inc.Standalone {
			continue
		}
		damaged := inc.State == "damaged"
		if !damaged && (finished(inc.State) || inc.LastStep == "") {
			continue
		}
		if newest < 0 {
			if damaged || inc.Changed {
				// A damaged one may be the run to continue: say so rather
				// than resume an older one behind it.
				return inc.ID, nil
			}
			newest = i
			continue
		}
		if !damaged && inc.Changed {
			return "", failure.Input(fmt.Sprintf("name the one to continue: breakglass resume %s (it changed the cluster: %s, state %s), or breakglass resume %s (it changed nothing: %s)",
				inc.ID, orDefault(inc.Runbook, "?"), inc.State, list[newest].ID, list[newest].State),
				"resume without an ID: the newest unfinished incident, %s, changed nothing, and an older one, %s, changed the cluster and did not finish", list[newest].ID, inc.ID)
		}
	}
	if newest >= 0 {
		return list[newest].ID, nil
	}
	return "", failure.Input("list them with: breakglass journal list", "no interrupted incident to resume in %s", s.incidentsDir())
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

// JournalDamageError is a journal that cannot be read whole: a record in
// the middle that is not JSON, no incident record, an empty or unreadable
// file. A last record cut short by a crash is not damage (see ReadJournal).
type JournalDamageError struct {
	Path   string
	Line   int    // the first unreadable line, 1-based; 0: the file as a whole
	Reason string // what is wrong, in plain words
}

func (e *JournalDamageError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("journal %s is damaged at line %d: %s", e.Path, e.Line, e.Reason)
	}
	return fmt.Sprintf("journal %s is damaged: %s", e.Path, e.Reason)
}

// A damaged journal is bad input to breakglass: nothing was changed.
func (e *JournalDamageError) Unwrap() error { return failure.BadInput }

func (e *JournalDamageError) Hints() []string {
	return []string{"its readable records: breakglass journal show " + incidentIDOf(e.Path)}
}
