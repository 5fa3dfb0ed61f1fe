package upgradecheck

import (
	"cmp"
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// Verdict is a check's, a cluster's or a fleet's answer.
type Verdict string

// The verdicts, from best to worst.
const (
	Go   Verdict = "go"
	Warn Verdict = "warn"
	NoGo Verdict = "no-go"
)

func (v Verdict) rank() int {
	switch v {
	case NoGo:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// worse is the worse of two verdicts.
func worse(a, b Verdict) Verdict {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// Check is one check's verdict, with its evidence and its fix.
type Check struct {
	ID      string  `json:"id"`
	Title   string  `json:"title"`
	Verdict Verdict `json:"verdict"`
	// Summary is the verdict's reason in one line.
	Summary string `json:"summary"`
	// Evidence is what was read that decided it, a line each.
	Evidence []string `json:"evidence,omitempty"`
	// Fix is what to do, a step or command each, when not go.
	Fix []string `json:"fix,omitempty"`
	// NotChecked: the check could not run (the cluster was not reached,
	// the role does not allow it): a no-go, since nothing was checked.
	NotChecked bool `json:"notChecked,omitempty"`

	// undecided: the audit could not decide it offline (a replay may).
	undecided bool
}

// safe escapes, in every line of the check, what could drive a terminal:
// its lines quote what the cluster and its files say (names, versions,
// messages, paths), on every stream the gate writes to. What is escaped
// already stays as it is.
func (c *Check) safe() {
	c.Summary = termsafe.Text(c.Summary)
	for i := range c.Evidence {
		c.Evidence[i] = termsafe.Text(c.Evidence[i])
	}
	for i := range c.Fix {
		c.Fix[i] = termsafe.Text(c.Fix[i])
	}
}

// Report is one cluster's gate.
type Report struct {
	// Cluster is the talosconfig context checked.
	Cluster string `json:"cluster"`
	// Nodes are the nodes the Talos API was asked about.
	Nodes []string `json:"nodes"`
	// From and To are the upgrade's minors ("1.33", "1.34"); From is ""
	// when it could not be told.
	From         string `json:"from"`
	To           string `json:"to"`
	FromEvidence string `json:"fromEvidence,omitempty"`
	// Verdict is the worst check's (a warn counts as a no-go with Strict).
	Verdict Verdict `json:"verdict"`
	Strict  bool    `json:"strict,omitempty"`
	// Checks are every check, the no-gos first, then the warnings.
	Checks  []Check       `json:"checks"`
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"elapsedNanoseconds"`
}

// Count is how many checks have the verdict.
func (r *Report) Count(v Verdict) int {
	n := 0
	for _, c := range r.Checks {
		if c.Verdict == v {
			n++
		}
	}
	return n
}

// Check returns the check of that ID.
func (r *Report) Check(id string) (Check, bool) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c, true
		}
	}
	return Check{}, false
}

// finish makes every line safe for a terminal, sorts the checks, no-gos
// first (each group in run order), and sets the verdict.
func (r *Report) finish(strict bool) {
	r.FromEvidence = termsafe.Text(r.FromEvidence)
	for i := range r.Checks {
		r.Checks[i].safe()
	}
	index := func(id string) int { return slices.IndexFunc(checks, func(d *checkDef) bool { return d.ID == id }) }
	slices.SortStableFunc(r.Checks, func(a, b Check) int {
		return cmp.Or(cmp.Compare(b.Verdict.rank(), a.Verdict.rank()), cmp.Compare(index(a.ID), index(b.ID)))
	})
	r.Strict = strict
	r.Verdict = Go
	for _, c := range r.Checks {
		r.Verdict = worse(r.Verdict, c.Verdict)
	}
	if strict && r.Verdict == Warn {
		r.Verdict = NoGo
	}
}

// Fleet is the gate of several clusters, checked side by side.
type Fleet struct {
	Clusters []*Report     `json:"clusters"`
	Verdict  Verdict       `json:"verdict"`
	Strict   bool          `json:"strict,omitempty"`
	To       string        `json:"to"`
	Elapsed  time.Duration `json:"elapsedNanoseconds"`
}

// ErrNoGo: at least one check of one cluster says no-go (with --strict:
// or warn). The report has been rendered; the exit code says it.
var ErrNoGo = failure.New(failure.UpgradeNoGo, "the upgrade gate says no-go")

// Err is ErrNoGo when the fleet's verdict is no-go, else nil.
func (f *Fleet) Err() error {
	if f.Verdict == NoGo {
		return ErrNoGo
	}
	return nil
}
