package upgradecheck

// rollback-point: an etcd snapshot of this cluster, taken now or named.

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

var rollbackPointCheck = &checkDef{
	ID:    CheckRollbackPoint,
	Title: "an etcd snapshot of this cluster",
	Help: "an etcd snapshot of this cluster (its content read as etcd's database, its kube-system UID the cluster's) " +
		"taken now (--snapshot) or the newest named (--last-snapshot), younger than --max-snapshot-age; none is a warning",
	NoGo:  "`--snapshot` failed, or no `--last-snapshot` named is a snapshot of this cluster (read as etcd's database, its kube-system UID and revision the cluster's)",
	Warn:  "none, older than `--max-snapshot-age` (1 day), or a newer file named that is not one",
	Fix:   "take one now: breakglass upgrade-check --to V --snapshot FILE",
	Needs: []need{needTalosAPI},
	Judge: judgeRollback,
}

func judgeRollback(f *facts, o *Options) Check {
	var c Check
	s := f.snapshot
	if s != nil {
		c.Evidence = append(c.Evidence, s.Passed...)
		if len(s.Aside) > 0 {
			c.Evidence = append(c.Evidence, fmt.Sprintf("not etcd snapshots, left aside: %s", firstFew(quoted(s.Aside), 5)))
		}
		if s.Copy != nil {
			c.Evidence = append([]string{fmt.Sprintf("%s: %s, sha256 %s, revision %d, the kube-system namespace %s: this cluster's", termsafe.String(s.Path),
				etcd.FormatBytes(s.Copy.Size), s.Copy.SHA256, s.Copy.Revision, s.Copy.ClusterUID)}, c.Evidence...)
		}
	}
	switch {
	case s == nil:
		c.Verdict = Warn
		c.Summary = "no rollback point: no etcd snapshot taken now or named"
		c.Fix = []string{"take one with the check: breakglass " + contextFlag(f) + "upgrade-check --to " + f.to.String() + " --snapshot FILE (or name the last one with --last-snapshot FILE)"}
	case s.Taken && s.Copy == nil:
		c.Verdict, c.Summary = NoGo, "the snapshot could not be taken: "+errLine(s.Err)
		c.Fix = hintsOf(s.Err)
	case s.Taken && s.Err != nil:
		c.Verdict, c.Summary = NoGo, fmt.Sprintf("the snapshot taken now, %s, is no rollback point: %s", termsafe.String(s.Path), errLine(s.Err))
		c.Fix = hintsOf(s.Err)
	case s.Taken:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("a verified snapshot of this cluster taken now: %s", termsafe.String(s.Path))
		c.Evidence = append(c.Evidence, "from "+termsafe.String(s.Source))
	case s.Err != nil && s.Path == "":
		c.Verdict, c.Summary = NoGo, "no snapshot named could be used: "+errLine(s.Err)
		c.Fix = []string{"take a new one: --snapshot FILE"}
	case s.Err != nil:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("no snapshot named is a rollback point of this cluster: the newest, %s: %s", termsafe.String(s.Path), errLine(s.Err))
		c.Fix = append(hintsOf(s.Err), "take a new one: --snapshot FILE")
	case len(s.Passed) > 0:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("the newest snapshot named is no rollback point (%d passed over); the newest that is, %s, is %s old", len(s.Passed), termsafe.String(s.Path), roundAge(s.Age))
		c.Fix = []string{"take a new one: --snapshot FILE, and find out what the newer files are"}
	case s.Age > o.MaxSnapshotAge:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("the newest snapshot named, %s, is %s old (more than %s): what changed since would be lost", termsafe.String(s.Path), roundAge(s.Age), o.MaxSnapshotAge)
		c.Fix = []string{"take a new one: --snapshot FILE"}
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("the newest snapshot named, %s, is a verified snapshot of this cluster, %s old", termsafe.String(s.Path), roundAge(s.Age))
	}
	return c
}

func quoted(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = termsafe.String(filepath.Base(p))
	}
	return out
}

// roundAge is an age to the second, or the minute past an hour.
func roundAge(d time.Duration) string {
	if d >= time.Hour {
		return d.Round(time.Minute).String()
	}
	return d.Round(time.Second).String()
}
