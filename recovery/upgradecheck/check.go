package upgradecheck

// The gate's checks are one table, as the incident types are: each check
// is a value (its ID, title, help, when it is a no-go or a warning, the fix
// of its no-go, what it needs read, its judge) in a file of its own,
// check_ID.go, listed here in the order they run. The loop marks a check
// "not checked" when something it needs was not read, so that no judge
// says go for what it did not read; the command's help and the README's
// table are written from the table (ChecksHelp, ChecksMarkdown), and a test
// holds every check to its title, help, fix and needs.

import (
	"fmt"
	"slices"
	"strings"
)

// The checks, by ID (stable: JSON, JUnit test case names).
const (
	CheckAccess         = "access"
	CheckUpgradePath    = "upgrade-path"
	CheckTalosSupport   = "talos-support"
	CheckAdmission      = "admission"
	CheckAPIServerFlags = "apiserver-flags"
	CheckEtcdMembers    = "etcd-members"
	CheckEtcdAlarms     = "etcd-alarms"
	CheckEtcdSpace      = "etcd-space"
	CheckStoredVersions = "stored-versions"
	CheckRollbackPoint  = "rollback-point"
	CheckReplay         = "replay"
	CheckEncryption     = "encryption"
	CheckTalosAccess    = "talos-access"
)

// checks are the gate's checks in the order they run and are listed in
// (before the verdicts sort them): what everything else needs first.
var checks = []*checkDef{accessCheck, talosAccessCheck, upgradePathCheck, talosSupportCheck, admissionCheck, flagsCheck,
	membersCheck, alarmsCheck, spaceCheck, storedVersionsCheck, encryptionCheck, rollbackPointCheck, replayCheck}

// checkDef is one check of the gate.
type checkDef struct {
	ID string
	// Title says what it is about, in a few words.
	Title string
	// Help says what it reads and judges (--help).
	Help string
	// NoGo and Warn say when it is one (the README's table); Warn "": never.
	NoGo, Warn string
	// Fix is what to do about its no-go, when its judge names nothing
	// more precise.
	Fix string
	// Needs are what must have been read for it to judge, in order: the
	// first missing one makes it "not checked". Never nil (empty: it
	// judges whatever was read, as access does).
	Needs []need
	// Asked tells whether this run asked for it (nil: always).
	Asked func(o *Options) bool
	// Judge gives its verdict from the facts alone.
	Judge func(f *facts, o *Options) Check
}

// need is something a check reads: missing says why it was not read ("":
// it was).
type need struct {
	what    string
	missing func(f *facts) string
}

var (
	needTalosAPI = need{"the Talos API", func(f *facts) string {
		if f.talosErr != nil || len(answered(f.nodes)) == 0 {
			return "the cluster's Talos API was not reached"
		}
		return ""
	}}
	needControlPlane = need{"a control plane", func(f *facts) string {
		if len(controlPlanes(f.nodes)) == 0 {
			return "no control plane was found"
		}
		return ""
	}}
	needConfigs = need{"every control plane's machine config", func(f *facts) string {
		if unread := configsUnread(f); len(unread) > 0 {
			return "the machine configs of " + strings.Join(unread, ", ") + " could not be read (see access)"
		}
		return ""
	}}
	needQuorum = need{"etcd's quorum", func(f *facts) string {
		if f.quorumLost {
			return f.etcdUnread()
		}
		return ""
	}}
	needEtcdKeys      = need{"etcd's keys", (*facts).etcdUnread}
	needAuditablePath = need{"an upgrade path breakglass audits", func(f *facts) string {
		if f.from == 0 || f.to == 0 || f.from > f.to {
			return "the upgrade path is not one breakglass can audit (see upgrade-path)"
		}
		return ""
	}}
)

// always is the Needs of a check that judges whatever was read.
var always = []need{}

// judge gives each check asked for its verdict, in the table's order.
func judge(f *facts, o *Options) []Check {
	var out []Check
	for _, d := range checks {
		if d.Asked == nil || d.Asked(o) {
			out = append(out, d.judge(f, o))
		}
	}
	settleByReplay(out)
	return out
}

// judge is the check's verdict: not checked when something it needs was
// not read; a no-go its judge gave no fix gets the check's.
func (d *checkDef) judge(f *facts, o *Options) Check {
	for _, n := range d.Needs {
		if why := n.missing(f); why != "" {
			return Check{ID: d.ID, Title: d.Title, Verdict: NoGo, NotChecked: true, Summary: "not checked: " + why}
		}
	}
	c := d.Judge(f, o)
	c.ID, c.Title = d.ID, d.Title
	if c.Verdict == NoGo && !c.NotChecked && len(c.Fix) == 0 {
		c.Fix = []string{d.Fix}
	}
	return c
}

// checkOf is the check of that ID (nil: none).
func checkOf(id string) *checkDef {
	i := slices.IndexFunc(checks, func(d *checkDef) bool { return d.ID == id })
	if i < 0 {
		return nil
	}
	return checks[i]
}

// Title is what a check is about ("" for an unknown ID).
func Title(id string) string {
	if d := checkOf(id); d != nil {
		return d.Title
	}
	return ""
}

// ChecksHelp lists the checks for the command's help: each ID and what it
// reads and judges, wrapped to width columns.
func ChecksHelp(width int) string {
	const indent = 19
	var b strings.Builder
	for _, d := range checks {
		line := fmt.Sprintf("  %-*s", indent-2, d.ID)
		for _, word := range strings.Fields(d.Help) {
			if len(line)+1+len(word) > width && len(strings.TrimSpace(line)) > len(d.ID) {
				b.WriteString(strings.TrimRight(line, " ") + "\n")
				line = strings.Repeat(" ", indent)
			} else if len(line) > indent {
				line += " "
			}
			line += word
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// ChecksMarkdown is the README's table of the checks: when each is a no-go
// or a warning, and what it cannot judge without.
func ChecksMarkdown() string {
	var b strings.Builder
	b.WriteString("| check | no-go when | warn when | not checked without |\n| --- | --- | --- | --- |\n")
	for _, d := range checks {
		var needs []string
		for _, n := range d.Needs {
			needs = append(needs, n.what)
		}
		if len(needs) == 0 {
			needs = []string{"nothing: it says what was reached"}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.ID, d.NoGo, d.Warn, strings.Join(needs, ", "))
	}
	return b.String()
}

// factsOnly is a judge that reads the facts alone.
func factsOnly(judge func(f *facts) Check) func(*facts, *Options) Check {
	return func(f *facts, _ *Options) Check { return judge(f) }
}
