package recovery

import "github.com/breakglass-dev/breakglass/runbooks"

// The engine's own actions, behind revert, etcd restore and lock break:
// never in a runbook.
const (
	ActionEtcdRestore      runbooks.Action = "etcd.restore"
	ActionLockBreak        runbooks.Action = "lock.break"
	ActionExtraArgsRestore runbooks.Action = "extraargs.restore"
)

// Undo is what can be done about a change once it is applied: undone
// exactly by another action, or not at all, saying what is lost and what
// stands instead.
type Undo struct {
	// What the change did, in a few words ("compact etcd to revision 1234").
	What string `json:"what"`
	// By is the action revert runs to undo it exactly; "": it cannot be.
	By runbooks.Action `json:"by,omitempty"`
	// Asked is the revert flag without which By is not run (--objects).
	Asked string `json:"asked,omitempty"`
	// Lost is what cannot be brought back, and Instead what stands in its
	// place (the verified snapshot taken before it).
	Lost    string `json:"lost,omitempty"`
	Instead string `json:"instead,omitempty"`
	// Why: the change loses nothing worth undoing (a defragmentation).
	Why string `json:"why,omitempty"`
}

// undoneBy is a change that action a undoes exactly.
func undoneBy(a runbooks.Action, what string) *Undo { return &Undo{What: what, By: a} }

// irreversible is a change that nothing undoes: what it loses, and what
// stands instead.
func irreversible(what, lost, instead string) *Undo {
	return &Undo{What: what, Lost: lost, Instead: instead}
}

// nothingToUndo is a change that loses nothing worth undoing, and why.
func nothingToUndo(what, why string) *Undo { return &Undo{What: what, Why: why} }

// Reversible tells whether revert can undo the change.
func (u Undo) Reversible() bool { return u.By != "" }

// String says it for the operator: what it did and what revert can do.
func (u Undo) String() string {
	switch {
	case u.By != "" && u.Asked != "":
		return u.What + ": revert " + u.Asked + " undoes it"
	case u.By != "":
		return u.What + ": revert undoes it"
	case u.Lost != "":
		s := u.What + " cannot be undone: " + u.Lost + " is gone"
		if u.Instead != "" {
			s += "; " + u.Instead + " stands instead"
		}
		return s
	}
	return u.What + ": nothing to undo (" + u.Why + ")"
}
