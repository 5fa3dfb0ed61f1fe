package etcd_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// A copy is told to be of this cluster by its content, not by its trailer:
// a real snapshot of this cluster passes; another cluster's real snapshot,
// random bytes under their own sha256 trailer, a snapshot of a cluster that
// has moved past nothing (revision beyond) and a file damaged after it was
// taken do not.
func TestCopyIdentity(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	snapshotOf := func(cl *cluster, uid, name string) (string, etcd.Identity) {
		t.Helper()
		cl.put(t, "/registry/namespaces/kube-system", etcdtest.Namespace("kube-system", uid))
		cl.seedIncident(t)
		path := filepath.Join(dir, name)
		if _, err := cl.c.Snapshot(ctx, path, etcd.RealWriter(nil)); err != nil {
			t.Fatal(err)
		}
		id, err := cl.c.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id.ClusterUID != uid {
			t.Fatalf("live identity %+v, want uid %s", id, uid)
		}
		return path, id
	}
	ours, ourID := snapshotOf(newCluster(t), "0b8d6f2e-1111-4c7a-9d51-6a1e2f3c4d5e", "ours.snapshot")
	theirs, _ := snapshotOf(newCluster(t), "7f3a9c10-2222-4b1e-8e77-0c9d8b7a6f5e", "theirs.snapshot")

	facts, err := etcd.ReadCopy(ours, true, "/registry")
	if err != nil {
		t.Fatalf("our own snapshot: %v", err)
	}
	if facts.ClusterUID != ourID.ClusterUID || facts.Revision == 0 || facts.Revision > ourID.Revision || facts.Keys < 10 {
		t.Errorf("facts %+v, live %+v", facts, ourID)
	}
	if err := facts.CheckOf(ourID); err != nil {
		t.Errorf("our own snapshot refused: %v", err)
	}
	if err := facts.Same(); err != nil {
		t.Errorf("an untouched copy changed: %v", err)
	}

	// Another cluster's snapshot: whole, valid, and not ours.
	other, err := etcd.ReadCopy(theirs, true, "/registry")
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "another cluster's snapshot", other.CheckOf(ourID))

	// Our snapshot, but a cluster that is behind it: it came from elsewhere.
	refused(t, "a copy beyond the cluster's revision", facts.CheckOf(etcd.Identity{ClusterUID: ourID.ClusterUID, Revision: facts.Revision - 1}))
	// A cluster whose kube-system could not be read vouches for nothing.
	refused(t, "an unknown cluster", facts.CheckOf(etcd.Identity{}))

	// Random bytes followed by their own sha256: the trailer checks, the content is no etcd.
	junk := make([]byte, 8*512)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(junk)
	fake := filepath.Join(dir, "fake.snapshot")
	if err := os.WriteFile(fake, append(junk, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.VerifySnapshotFile(fake); err != nil {
		t.Fatalf("the fake must pass the trailer check to test anything: %v", err)
	}
	if _, err := etcd.ReadCopy(fake, true, "/registry"); !errors.Is(err, failure.Verification) {
		t.Errorf("random bytes with a sha256 trailer read as a copy: %v", err)
	}
	// A checksum file is not a snapshot.
	sumFile := filepath.Join(dir, "ours.snapshot.sha256")
	if err := os.WriteFile(sumFile, []byte(facts.SHA256+"  ours.snapshot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.ReadCopy(sumFile, true, "/registry"); err == nil {
		t.Error("a checksum file read as a snapshot")
	}
	// Which files of a directory of snapshots begin as one.
	for path, want := range map[string]bool{ours: true, theirs: true, fake: false, sumFile: false, filepath.Join(dir, "absent"): false} {
		if got := etcd.StartsAsDatabase(path); got != want {
			t.Errorf("StartsAsDatabase(%s) = %v", filepath.Base(path), got)
		}
	}

	// The copy replaced after it was taken (by another cluster's, same name).
	data, err := os.ReadFile(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ours, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var changed *etcd.CopyChangedError
	if err := facts.Same(); !errors.As(err, &changed) {
		t.Errorf("a replaced copy: %v", err)
	}
	// Cut short.
	if err := os.WriteFile(ours, data[:len(data)-1000], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := facts.Same(); !errors.As(err, &changed) {
		t.Errorf("a copy cut short: %v", err)
	}
	if !etcd.StartsAsDatabase(ours) {
		t.Error("a snapshot cut short no longer begins as a database")
	}
}

// A member's database file (no trailer) is read the same way.
func TestCopyIdentityDBFile(t *testing.T) {
	cl := newCluster(t)
	uid := "3c2b1a09-3333-4d8e-a1f2-9b8c7d6e5f40"
	cl.put(t, "/registry/namespaces/kube-system", etcdtest.Namespace("kube-system", uid))
	snap := filepath.Join(t.TempDir(), "s")
	if _, err := cl.c.Snapshot(context.Background(), snap, etcd.RealWriter(nil)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(db, data[:len(data)-32], 0o600); err != nil {
		t.Fatal(err)
	}
	facts, err := etcd.ReadCopy(db, false, "/registry")
	if err != nil {
		t.Fatal(err)
	}
	if facts.ClusterUID != uid {
		t.Errorf("uid %q, want %q", facts.ClusterUID, uid)
	}
	// The kube-system namespace deleted since: the copy holds no owner.
	if _, err := cl.c.KV().Delete(context.Background(), "/registry/namespaces/kube-system"); err != nil {
		t.Fatal(err)
	}
	id, err := cl.c.Identity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if id.ClusterUID != "" {
		t.Errorf("identity after delete %+v", id)
	}
}

func refused(t *testing.T, what string, err error) {
	t.Helper()
	var foreign *etcd.ForeignCopyError
	if !errors.As(err, &foreign) || !errors.Is(err, failure.Refused) {
		t.Errorf("%s: %v, want a ForeignCopyError (refused)", what, err)
	}
}
