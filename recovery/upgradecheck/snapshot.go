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
