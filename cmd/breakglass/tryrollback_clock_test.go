package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// Issue 21, case 11: breakglass's own try-mode disable is told from
// someone's pending change by what the node says (it runs the config
// breakglass applied, its disk holds the one from before), not by this
// machine's clock against the recorded rollback time. On main a restore
// moments before the node's rollback, or from a machine whose clock is
// ahead of the node's, found the rollback "past", took the difference for
// someone's TRY change and refused (exit 6).
func TestRestoreOwnTryChangeWhateverTheLocalClock(t *testing.T) {
	c, talosconfig := oneNode(t)
	node := c.Nodes[0]
	state := t.TempDir()
	before := node.RunningConfig()
	args := func(a ...string) []string {
		return append([]string{"--talosconfig", talosconfig, "--state-dir", state, "-n", node.IP}, a...)
	}
	if code, out, errOut := runArgs(t, args("admission", "disable", "--revert-after", "2h", "--no-wait", "--yes")...); code != 0 {
		t.Fatalf("disable: exit %d\n%s%s", code, out, errOut)
	}
	if pending, _ := node.RollbackPending(); !pending {
		t.Fatal("no try-mode rollback pending on the node after the disable")
	}
	// The local clock is ahead of the node's: the recorded rollback is past here.
	recs, _ := filepath.Glob(filepath.Join(state, "clusters", "*", "admission", node.IP+".json"))
	if len(recs) != 1 {
		t.Fatalf("admission records: %v", recs)
	}
	var rec map[string]any
	raw, err := os.ReadFile(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	rec["rollbackAt"] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	raw, _ = json.Marshal(rec)
	if err := os.WriteFile(recs[0], raw, 0o600); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runArgs(t, args("admission", "restore", "--no-wait", "--yes")...)
	if code != 0 {
		t.Fatalf("restore of breakglass's own pending try change: exit %d, want 0\n%s%s", code, out, errOut)
	}
	if !bytes.Equal(node.RunningConfig(), before) {
		t.Error("the running config is not what it was before the disable")
	}
}

// Issue 21, weak inputs: the plan before a --revert-after disable says it
// is applied in try mode and when the nodes put the plugins back. On main
// it said neither: only the outcome, after the change, named the time.
func TestDisablePlanSaysTryModeAndWhen(t *testing.T) {
	c, talosconfig := oneNode(t)
	code, out, errOut := runArgs(t, "--talosconfig", talosconfig, "-n", c.Nodes[0].IP, "--dry-run", "admission", "disable", "--revert-after", "30m")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^  try mode \(--revert-after 30m\): each node puts the plugins back by itself 30m after it is changed \(about \d\d:\d\d .*\), unless restored first$`).MatchString(out + errOut) {
		t.Errorf("the plan does not say try mode and when:\n%s%s", out, errOut)
	}
}

// oneNode is an emulated control-plane node and an os:admin talosconfig for it.
func oneNode(t *testing.T) (*talostest.Cluster, string) {
	t.Helper()
	return emulatedCluster(t, t.Context(), talostest.ClusterOptions{ControlPlanes: 1})
}

// emulatedCluster starts emulated Talos nodes (in a directory of the test's
// when opts names none), closed when the test ends, and returns them with an
// os:admin talosconfig for them.
func emulatedCluster(t *testing.T, ctx context.Context, opts talostest.ClusterOptions) (*talostest.Cluster, string) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c, err := talostest.NewCluster(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	admin, err := c.Talosconfig(role.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return c, admin
}
