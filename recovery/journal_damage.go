package recovery

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Shown is the damage as `journal show` reports it after printing the
// records it could read: where they stop, and how to look at the rest of
// the file (not the command that just ran).
func (e *JournalDamageError) Shown(records int) error {
	return &shownDamageError{damage: e, records: records}
}

type shownDamageError struct {
	damage  *JournalDamageError
	records int
}

func (e *shownDamageError) Error() string {
	if e.records == 0 {
		return e.damage.Error() + "; no record before it could be read"
	}
	return fmt.Sprintf("%v; the %d record(s) above are those before it", e.damage, e.records)
}

// Unwrap is bad input, not the damage itself: its hint is the command
// that was just run.
func (e *shownDamageError) Unwrap() error { return failure.BadInput }

func (e *shownDamageError) Hints() []string {
	look := "look at the file itself: less " + e.damage.Path
	if e.damage.Line > 0 {
		look = fmt.Sprintf("the rest of the file, as written: tail -n +%d %s", e.damage.Line, e.damage.Path)
	}
	return []string{look, "the admission flags do not need the journal: breakglass admission status, then breakglass admission restore"}
}

// damagedIncidentError is resume or revert refused on a damaged journal:
// what they cannot do, and what still works without the journal.
type damagedIncidentError struct {
	id     string
	dir    string
	damage *JournalDamageError
}

func (e *damagedIncidentError) Error() string {
	return fmt.Sprintf("incident %s cannot be resumed or reverted from its journal: %v\n"+
		"without every record, breakglass cannot tell which steps completed, nor which objects the incident removed from etcd", e.id, e.damage)
}

func (e *damagedIncidentError) Unwrap() error { return e.damage }

func (e *damagedIncidentError) Hints() []string {
	return []string{
		"see what it recorded: breakglass journal show " + e.id,
		"the admission flags do not need the journal: breakglass admission status, then breakglass admission restore (it uses the per-node records in the state directory)",
		"objects the incident removed from etcd have their backups beside the journal, in " + e.dir + ": restore one with breakglass etcd restore FILE",
		"to start over: breakglass recover (a new incident)",
	}
}

// CheckIncident tells, before anything is dialled, whether resume (or
// revert) can work on the incident id ("" : the one it would pick): a
// damaged journal is refused with what can still be done. Other problems
// (no such incident) are left to the command itself.
func (s State) CheckIncident(id string, resume bool) error {
	if id == "" && resume {
		var err error
		if id, err = s.resumable(); err != nil {
			return nil
		}
	}
	dir, _, err := s.ReadIncident(id)
	var damage *JournalDamageError
	if errors.As(err, &damage) {
		return &damagedIncidentError{id: filepath.Base(dir), dir: dir, damage: damage}
	}
	return nil
}
