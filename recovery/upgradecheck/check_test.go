package upgradecheck

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/audit"
)

// incomplete says what a check lacks: a check without them cannot be
// explained (--help, the README), fixed, or kept from judging what it did
// not read.
func (d *checkDef) incomplete() []string {
	var out []string
	for _, x := range []struct {
		what    string
		missing bool
	}{{"an ID", d.ID == ""}, {"a title", d.Title == ""}, {"help", d.Help == ""}, {"when it is a no-go", d.NoGo == ""},
		{"a fix for its no-go", d.Fix == ""}, {"its needs", d.Needs == nil}, {"a judge", d.Judge == nil}} {
		if x.missing {
			out = append(out, x.what)
		}
	}
	return out
}

// Every check says what it is, reads, judges and fixes; the promise test
// catches a check that lacks any of it.
func TestChecksAreComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range checks {
		if lacks := d.incomplete(); len(lacks) > 0 {
			t.Errorf("check %q lacks %s", d.ID, strings.Join(lacks, ", "))
		}
		if seen[d.ID] {
			t.Errorf("check %q twice", d.ID)
		}
		seen[d.ID] = true
		if Title(d.ID) != d.Title {
			t.Errorf("Title(%q) = %q", d.ID, Title(d.ID))
		}
	}
	if checks[0].ID != CheckAccess || len(checks[0].Needs) != 0 {
		t.Error("access runs first and needs nothing: its verdict is what could be reached")
	}
	// The rows that must fail: each field taken away from a good check.
	for _, strip := range []struct {
		lacks string
		edit  func(*checkDef)
	}{
		{"a title", func(d *checkDef) { d.Title = "" }},
		{"help", func(d *checkDef) { d.Help = "" }},
		{"a fix for its no-go", func(d *checkDef) { d.Fix = "" }},
		{"its needs", func(d *checkDef) { d.Needs = nil }},
	} {
		d := *membersCheck
		strip.edit(&d)
		if !slices.Contains(d.incomplete(), strip.lacks) {
			t.Errorf("a check without %s passes: %v", strip.lacks, d.incomplete())
		}
	}
}

// The loop marks a check not checked, naming the first thing it needs
// that was not read; a no-go its judge gave no fix gets the check's.
func TestNotCheckedFromNeeds(t *testing.T) {
	noTalos := judge(&facts{talosErr: errors.New("no such context")}, &Options{})
	for _, c := range noTalos[1:] {
		if c.ID == CheckTalosAccess { // it reads the talosconfig itself, not the Talos API
			if !c.NotChecked || c.Verdict != NoGo || c.Summary != "not checked: the talosconfig was not read" {
				t.Errorf("%s without its talosconfig read: %+v", c.ID, c)
			}
			continue
		}
		if !c.NotChecked || c.Verdict != NoGo || c.Summary != "not checked: the cluster's Talos API was not reached" {
			t.Errorf("%s without the Talos API: %+v", c.ID, c)
		}
	}
	if len(noTalos) != len(checks)-1 {
		t.Errorf("%d checks judged, want every one but replay (not asked)", len(noTalos))
	}
	f := onControlPlanes(3, members(3, 1, 2))
	f.quorumLost, f.from, f.to = true, 33, 34
	f.gathered, f.args = &audit.Gathered{}, []audit.ArgFinding{} // the flags are in the machine configs
	for _, n := range f.nodes {
		n.Talos, n.Config = "v1.13.8", []byte("version: v1alpha1")
	}
	for _, c := range judge(f, &Options{}) {
		if c.ID == CheckTalosAccess {
			continue // judged above: it reads the talosconfig, not etcd
		}
		wantNot := slices.Contains([]string{CheckAdmission, CheckEtcdAlarms, CheckEtcdSpace, CheckStoredVersions, CheckEncryption}, c.ID)
		if wantNot != c.NotChecked || wantNot && !strings.Contains(c.Summary, "etcd has lost its quorum") {
			t.Errorf("%s with quorum lost: %s (%s)", c.ID, c.Verdict, c.Summary)
		}
		if c.Verdict == NoGo && !c.NotChecked && len(c.Fix) == 0 {
			t.Errorf("%s: a no-go without a fix", c.ID)
		}
	}
}

// The README's table of the checks is the table's.
func TestREADMEChecksAreTheTable(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "\n"+ChecksMarkdown()) {
		t.Errorf("README.md's table of the checks is not the table's; it is:\n%s", ChecksMarkdown())
	}
}
