package upgradecheck

// Incident notes: each test is a way the gate once said go for what it had
// not read (issue 35), reproduced on emulated Talos nodes whose control
// planes each run a real etcd member, and what it must say instead.

import (
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// edit applies a change to a node's machine config, as talosctl
// apply-config --mode no-reboot does.
func (tc *testCluster) edit(t *testing.T, n *talostest.Node, change func(cfg string) string) {
	t.Helper()
	cl, err := talos.Connect(t.Context(), talos.Options{Talosconfig: tc.talosconfig, Nodes: []string{n.IP}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := string(n.RunningConfig())
	changed := change(cfg)
	if changed == cfg {
		t.Fatalf("node %s: the edit changed nothing", n.IP)
	}
	if _, err := cl.Apply(t.Context(), n.IP, talos.ApplyRequest{Config: []byte(changed), Mode: talos.NoReboot}); err != nil {
		t.Fatal(err)
	}
}

// contextOf is a talosconfig whose context names one node, through that
// node's endpoint only: the usual on-call context after
// `talosctl config endpoint X; talosctl config node X`.
func (tc *testCluster) contextOf(t *testing.T, n *talostest.Node) string {
	t.Helper()
	cfg, err := tc.cluster.TalosconfigWith(role.MakeSet(role.Admin), []string{n.Addr}, []string{n.IP})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := cfg.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func lockedGate(cfg string) string {
	return strings.Replace(cfg, "\n    apiServer:\n", "\n    apiServer:\n        extraArgs:\n            feature-gates: MultiCIDRServiceAllocator=false\n", 1)
}

// --from 1.35 --to 1.36 on control planes whose images all say v1.34.4
// was a go: the gate trusted the flag over what it read.
func TestFromAgainstTheImages(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{kubernetes: "1.34.4"})
	o := tc.options("1.36")
	o.From = "1.35"
	c := mustCheck(t, Run(t.Context(), o), CheckUpgradePath)
	if c.Verdict != NoGo || !strings.Contains(c.Summary, "--from 1.35") || !strings.Contains(c.Summary, "v1.34.4") {
		t.Errorf("%s: %s", c.Verdict, c.Summary)
	}
}

// --last-snapshot of 1 KiB of random bytes followed by their own sha256
// "verified": go; so did another cluster's verified snapshot. And a
// checksum file beside the snapshot was "the newest snapshot", a no-go.
func TestRollbackPointIsThisClustersSnapshot(t *testing.T) {
	t.Parallel()
	tc, other := newTestCluster(t, clusterSpec{}), newTestCluster(t, clusterSpec{})
	dir := t.TempDir()
	take := func(c *testCluster, path string) {
		t.Helper()
		o := c.options("1.34")
		o.Snapshot = path
		if rb := mustCheck(t, Run(t.Context(), o), CheckRollbackPoint); rb.Verdict != Go {
			t.Fatalf("snapshot %s: %s (%s)", path, rb.Verdict, rb.Summary)
		}
	}
	mine, theirs := filepath.Join(dir, "mine.snapshot"), filepath.Join(t.TempDir(), "theirs.snapshot")
	take(tc, mine)
	take(other, theirs)
	junk := make([]byte, 1024)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(junk)
	forged := filepath.Join(t.TempDir(), "forged.snapshot")
	if err := os.WriteFile(forged, append(junk, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	last := func(paths ...string) Check {
		t.Helper()
		o := tc.options("1.34")
		o.LastSnapshots = paths
		return mustCheck(t, Run(t.Context(), o), CheckRollbackPoint)
	}
	if c := last(forged); c.Verdict != NoGo {
		t.Errorf("random bytes under their own sha256: %s (%s)", c.Verdict, c.Summary)
	}
	if c := last(theirs); c.Verdict != NoGo || !strings.Contains(c.Summary, "another cluster") {
		t.Errorf("another cluster's snapshot: %s (%s)", c.Verdict, c.Summary)
	}
	// A checksum file, newer than the snapshot, beside it.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(mine+".sha256", []byte("0123abcd  mine.snapshot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := last(dir); c.Verdict != Go || !strings.Contains(c.Summary, "mine.snapshot") {
		t.Errorf("a checksum file beside the snapshot: %s (%s)", c.Verdict, c.Summary)
	}
}
