package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TalosctlEnv names the talosctl binary the tests drive the lab with; without it they
// take the one lab/scripts/build-talosctl.sh builds into the user's cache.
const TalosctlEnv = "BREAKGLASS_TALOSCTL"

// needTalosctl returns a real talosctl v1.13.8, skipping (with the reason) when none
// is built, except under CI=true, where a missing one fails the run.
func needTalosctl(t *testing.T) string {
	t.Helper()

	path := os.Getenv(TalosctlEnv)
	if path == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}

			base = filepath.Join(home, ".cache")
		}

		path = filepath.Join(base, "breakglass", "talosctl", "talosctl")
	}

	out, err := exec.Command(path, "version", "--client", "--short").CombinedOutput()
	if err == nil && strings.Contains(string(out), "v1.13.8") {
		return path
	}

	reason := fmt.Sprintf("no talosctl v1.13.8 at %s (%v: %s); build it: lab/scripts/build-talosctl.sh (or set %s)", path, err, bytes.TrimSpace(out), TalosctlEnv)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and the talosctl tests cannot run: %s", reason)
	}

	t.Skip(reason)

	return ""
}

// talosctl runs the real talosctl against one node through its own endpoint, in dir,
// as an engineer types it, and returns what it printed.
type talosctlRunner struct {
	t        *testing.T
	bin, dir string
	l        *Lab
}

func (r talosctlRunner) on(ip string, args ...string) (string, error) {
	r.t.Helper()

	out, took, err := r.run(ip, args...)
	r.t.Logf("$ talosctl -e %s -n %s %s  (%s, %v)\n%s", r.l.talosEndpoint(ip), ip, strings.Join(args, " "), took, err, lastLines(out, 12))

	return out, err
}

// run runs talosctl and says how long it took.
func (r talosctlRunner) run(ip string, args ...string) (string, time.Duration, error) {
	r.t.Helper()

	ctx, cancel := context.WithTimeout(r.t.Context(), 10*time.Minute)
	defer cancel()

	full := append([]string{"--talosconfig", r.l.Talosconfig, "-e", r.l.talosEndpoint(ip), "-n", ip}, args...)
	cmd := exec.CommandContext(ctx, r.bin, full...)
	cmd.Dir = r.dir

	start := time.Now()
	out, err := cmd.CombinedOutput()

	return string(out), time.Since(start).Round(time.Millisecond), err
}

func (r talosctlRunner) must(ip string, args ...string) string {
	r.t.Helper()

	out, err := r.on(ip, args...)
	if err != nil {
		r.t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	return out
}

// waitFor runs the talosctl command every second until match holds for its output.
func (r talosctlRunner) waitFor(ip string, timeout time.Duration, what string, match func(string) bool, args ...string) {
	r.t.Helper()

	deadline := time.Now().Add(timeout)
	start := time.Now()

	for polls := 1; ; polls++ {
		out, _, err := r.run(ip, args...)
		if err == nil && match(out) {
			r.t.Logf("$ talosctl -e %s -n %s %s  (%s: %d polls)\n%s", r.l.talosEndpoint(ip), ip, strings.Join(args, " "), what, polls, lastLines(out, 12))
			r.t.Logf("%s after %s", what, time.Since(start).Round(time.Second))

			return
		}

		if time.Now().After(deadline) {
			r.t.Fatalf("node %s: %s not seen after %s; last answer: %v\n%s", ip, what, timeout, err, out)
		}

		time.Sleep(time.Second)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")

	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitingForBootstrap is what `talosctl service etcd` shows of an etcd that waits to
// join or to be bootstrapped.
func waitingForBootstrap(out string) bool {
	return regexp.MustCompile(`STATE\s+Preparing`).MatchString(out) && strings.Contains(out, "[Preparing]: Running pre state")
}

// memberIDRE reads `talosctl etcd members`: NODE ID HOSTNAME ... LEARNER.
var memberIDRE = regexp.MustCompile(`(?m)^\S+\s+([0-9a-f]{16})\s+(\S+)\s+\S+\s+\S+\s+(true|false)\s*$`)

// threeVoters tells `talosctl etcd members` lists three members, none a learner.
func threeVoters(out string) bool {
	m := memberIDRE.FindAllStringSubmatch(out, -1)
	if len(m) != 3 {
		return false
	}

	for _, row := range m {
		if row[3] != "false" {
			return false
		}
	}

	return true
}

// etcdData is every key and value in etcd at the revision (0: the latest), read from
// one member (serializable reads: a member without a quorum answers them), and the
// revision read.
func etcdData(t *testing.T, l *Lab, ip string, rev int64) (map[string][]byte, int64) {
	t.Helper()

	tlsConf, err := l.etcdTLS()
	if err != nil {
		t.Fatal(err)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{l.Etcd.EndpointFor(ip)}, TLS: tlsConf, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("read etcd on %s: %v", ip, err)
	}

	data := map[string][]byte{}
	for _, kv := range resp.Kvs {
		data[string(kv.Key)] = kv.Value
	}

	return data, resp.Header.Revision
}

// Talos's disaster-recovery guide for a lost quorum, typed with a real talosctl
// v1.13.8 on the etcd-quorum-lost scenario (two of three members' data destroyed):
// a copy of the survivor's data (etcd snapshot, or the database file with cp and a
// bootstrap that skips the hash check), every control plane reset (EPHEMERAL wiped,
// rebooted), etcd waiting for a bootstrap on each, one bootstrapped from the copy,
// the others joining. After: three voting members, every key of the copy's revision
// byte-identical, kube-apiserver ready on every node.
func TestTalosctlQuorumLost(t *testing.T) {
	t.Parallel()
	bin := needTalosctl(t)

	for _, tc := range []struct {
		name      string
		copyData  func(r talosctlRunner, ip string) string // returns the file to bootstrap from
		bootstrap []string
	}{
		{"snapshot", func(r talosctlRunner, ip string) string {
			out := r.must(ip, "etcd", "snapshot", "db.snapshot")
			if !strings.Contains(out, "snapshot info: hash") {
				t.Errorf("etcd snapshot printed %q", out)
			}

			return "db.snapshot"
		}, nil},
		{"db-copy", func(r talosctlRunner, ip string) string {
			r.must(ip, "cp", "/var/lib/etcd/member/snap/db", ".")

			return "db"
		}, []string{"--recover-skip-hash-check"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			l := startLab(t, EtcdScenarioNodes, DefaultKubelet())
			r := talosctlRunner{t: t, bin: bin, dir: t.TempDir(), l: l}

			if _, err := RunScenario(ctx, l, ScenarioEtcdQuorumLost, NewTimeline(testWriter{t})); err != nil {
				t.Fatal(err)
			}

			survivor := l.Nodes()[0]
			before, rev := etcdData(t, l, survivor, 0)

			start := time.Now()
			file := tc.copyData(r, survivor)

			for _, ip := range l.Nodes() {
				r.must(ip, "reset", "--graceful=false", "--reboot", "--system-labels-to-wipe=EPHEMERAL")
			}

			resetDone := time.Since(start)

			for _, ip := range l.Nodes() {
				r.waitFor(ip, 3*time.Minute, "etcd waiting for bootstrap", waitingForBootstrap, "service", "etcd")
			}

			waiting := time.Since(start)

			r.must(survivor, append([]string{"bootstrap", "--recover-from=./" + file}, tc.bootstrap...)...)
			r.waitFor(survivor, 5*time.Minute, "three voting members", threeVoters, "etcd", "members")

			for _, ip := range l.Nodes() {
				if err := l.WaitEtcd(ctx, ip, 3*time.Minute, "healthy", EtcdHealthy); err != nil {
					t.Fatal(err)
				}
			}

			if err := l.WaitReady(ctx, 5*time.Minute); err != nil {
				t.Fatal(err)
			}

			t.Logf("copy and %d resets %s, etcd waiting for bootstrap on all after %s, three voters and kube-apiserver ready after %s",
				len(l.Nodes()), resetDone.Round(time.Second), waiting.Round(time.Second), time.Since(start).Round(time.Second))

			// the state at the copy's revision, as the restored etcd keeps it (kube-apiserver
			// has written since: its leases, events)
			after, _ := etcdData(t, l, survivor, rev)
			if len(after) != len(before) {
				t.Errorf("%d keys at revision %d after the recovery, %d before", len(after), rev, len(before))
			}

			for k, v := range before {
				if got, ok := after[k]; !ok || !bytes.Equal(got, v) {
					t.Errorf("key %s at revision %d: lost or changed (%d bytes, was %d)", k, rev, len(got), len(v))
				}
			}

			if _, ok := before["/registry/configmaps/"+EtcdDataNamespace+"/cm-4"]; !ok {
				t.Errorf("the scenario's ConfigMaps were not in the copy (%d keys)", len(before))
			}
		})
	}
}

// Talos's way back for one lost member while the quorum holds, typed with a real
// talosctl v1.13.8 on the etcd-member-lost scenario: the member removed from a healthy
// node, the lost node reset (EPHEMERAL wiped, rebooted); it joins as a new member, is
// promoted once caught up, and its kube-apiserver runs again.
func TestTalosctlMemberLost(t *testing.T) {
	t.Parallel()
	bin := needTalosctl(t)
	ctx := t.Context()
	l := startLab(t, EtcdScenarioNodes, DefaultKubelet())
	r := talosctlRunner{t: t, bin: bin, dir: t.TempDir(), l: l}

	if _, err := RunScenario(ctx, l, ScenarioEtcdMemberLost, NewTimeline(testWriter{t})); err != nil {
		t.Fatal(err)
	}

	healthy, lost := l.Nodes()[0], l.Nodes()[2]
	before, _ := etcdData(t, l, healthy, 0)

	out := r.must(lost, "service", "etcd")
	if !strings.Contains(out, "going to restart forever") || !strings.Contains(out, "couldn't find local name") {
		t.Errorf("the lost member's service:\n%s", out)
	}

	var id string

	for _, row := range memberIDRE.FindAllStringSubmatch(r.must(healthy, "etcd", "members"), -1) {
		if row[2] == l.Cluster.Node(lost).Name {
			id = row[1]
		}
	}

	if id == "" {
		t.Fatal("the lost member is not listed")
	}

	start := time.Now()

	r.must(healthy, "etcd", "remove-member", id)

	if _, err := r.on(healthy, "etcd", "remove-member", id); err == nil {
		t.Error("a member removed twice")
	}

	r.must(lost, "reset", "--graceful=false", "--reboot", "--system-labels-to-wipe=EPHEMERAL")
	resetDone := time.Since(start)

	r.waitFor(healthy, 5*time.Minute, "three voting members", threeVoters, "etcd", "members")

	if err := l.WaitEtcd(ctx, lost, 3*time.Minute, "healthy", EtcdHealthy); err != nil {
		t.Fatal(err)
	}

	if strings.Contains(r.must(healthy, "etcd", "members"), id) {
		t.Errorf("the removed member's ID %s is back", id)
	}

	if err := l.WaitReady(ctx, 5*time.Minute); err != nil {
		t.Fatal(err)
	}

	t.Logf("remove-member and reset %s, three voters and kube-apiserver ready after %s", resetDone.Round(time.Second), time.Since(start).Round(time.Second))

	after, _ := etcdData(t, l, lost, 0)

	for k, v := range before {
		if strings.HasPrefix(k, "/registry/configmaps/"+EtcdDataNamespace+"/") && !bytes.Equal(after[k], v) {
			t.Errorf("key %s not on the rejoined member as it was", k)
		}
	}

	if len(before) == 0 {
		t.Error("no data before the recovery")
	}
}
