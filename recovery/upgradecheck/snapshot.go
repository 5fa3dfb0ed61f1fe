package upgradecheck

// The rollback point: an etcd snapshot of this cluster, taken now or named.
// A snapshot's size and sha256 trailer say it was not damaged in transit,
// not what it holds: each is read as etcd's database (etcd.ReadCopy) and
// told to be this cluster's by its content (the kube-system namespace's
// UID, its revision no higher than the cluster's), against the cluster's
// identity read just after it. In a directory, a file that does not begin
// as an etcd database (a checksum file, notes) is left aside, never taken
// for the newest snapshot.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery"
)

// snapshotFacts: a rollback point.
type snapshotFacts struct {
	Taken  bool // taken now (--snapshot)
	Path   string
	Copy   *etcd.CopyFacts // what the snapshot holds, read as etcd's database
	Source string
	Age    time.Duration
	// Err: no snapshot is a rollback point (not taken, not an etcd
	// database, not this cluster's); the newest named's reason.
	Err error
	// Candidates are the snapshot files named; Passed those newer than the
	// rollback point that are not one, each with why; Aside the files of
	// the directories named that are no snapshot.
	Candidates int
	Passed     []string
	Aside      []string
}

// errEtcdNotRead: without etcd's kube-system UID nothing tells a snapshot is this cluster's.
var errEtcdNotRead = errors.New("etcd was not reached, so nothing tells that it is a snapshot of this cluster")

// rollbackPoint takes a verified snapshot now, or finds the newest one
// named of this cluster.
func rollbackPoint(ctx context.Context, o *Options, f *facts, ec *etcd.Client) *snapshotFacts {
	prefix := o.Etcd.Prefix
	if ec != nil {
		prefix = ec.Prefix()
	}
	ofCluster := func(path string) (*etcd.CopyFacts, error) {
		c, err := etcd.ReadCopy(path, true, prefix)
		if err != nil {
			return nil, err
		}
		if ec == nil {
			return c, errEtcdNotRead
		}
		id, err := ec.Identity(ctx) // after the copy: its revision is no higher
		if err != nil {
			return c, fmt.Errorf("the cluster's kube-system namespace could not be read: %w", err)
		}
		return c, c.CheckOf(id)
	}
	if o.Snapshot != "" {
		s := &snapshotFacts{Taken: true, Path: o.Snapshot}
		if f.quorumLost {
			s.Err = errors.New("not taken: etcd has lost its quorum (see etcd-members)")
			return s
		}
		var cps []string
		for _, n := range controlPlanes(f.nodes) {
			cps = append(cps, n.Addr)
		}
		if f.talosErr != nil || len(cps) == 0 {
			s.Err = errors.New("no control plane was reached")
			return s
		}
		t := o.Talos
		t.Nodes = cps
		if _, s.Source, s.Err = recovery.SaveSnapshot(ctx, o.Etcd, t, recovery.Live(nil), o.Snapshot); s.Err == nil {
			s.Copy, s.Err = ofCluster(o.Snapshot)
		}
		return s
	}
	s := &snapshotFacts{}
	type candidate struct {
		path string
		at   time.Time
	}
	var cands []candidate
	for _, p := range o.LastSnapshots {
		st, err := os.Stat(p)
		if err != nil {
			s.Err = err
			continue
		}
		if !st.IsDir() {
			cands = append(cands, candidate{p, st.ModTime()}) // named: judged whatever it is
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			s.Err = err
			continue
		}
		for _, e := range entries {
			path := filepath.Join(p, e.Name())
			info, err := e.Info()
			switch {
			case err != nil || !info.Mode().IsRegular():
			case etcd.StartsAsDatabase(path):
				cands = append(cands, candidate{path, info.ModTime()})
			default:
				s.Aside = append(s.Aside, path)
			}
		}
	}
	s.Candidates = len(cands)
	if len(cands) == 0 {
		if s.Err == nil {
			s.Err = fmt.Errorf("no etcd snapshot in %v", o.LastSnapshots)
		}
		return s
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].at.After(cands[j].at) })
	var newestErr error
	for _, c := range cands {
		facts, err := ofCluster(c.path)
		if err == nil {
			s.Path, s.Copy, s.Age, s.Err = c.path, facts, o.now().Sub(c.at), nil
			return s
		}
		if newestErr == nil {
			s.Path, newestErr = c.path, err
		}
		s.Passed = append(s.Passed, termsafe.String(c.path)+": "+err.Error())
	}
	s.Err = newestErr
	return s
}

func judgeRollback(f *facts, o *Options) Check {
	c := Check{ID: CheckRollbackPoint, Title: Title(CheckRollbackPoint)}
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
