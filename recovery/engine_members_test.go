package recovery_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// reachMembers gives the test and breakglass a client certificate of the
// cluster's etcd CA for the nodes' members.
func (e *engineEnv) reachMembers(bundle *secrets.Bundle) {
	e.t.Helper()
	ca, err := etcdtest.LoadCA(bundle.Certs.Etcd.Crt, bundle.Certs.Etcd.Key)
	if err != nil {
		e.t.Fatal(err)
	}
	crt, key, err := ca.IssueClient("engine-test", time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	dir := e.t.TempDir()
	acc := recovery.EtcdOptions{CACert: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "client.crt"), Key: filepath.Join(dir, "client.key")}
	for path, data := range map[string][]byte{acc.CACert: bundle.Certs.Etcd.Crt, acc.Cert: crt, acc.Key: key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, n := range e.cluster.ControlPlanes() {
		acc.Endpoints = append(acc.Endpoints, n.EtcdEndpoint())
	}
	e.etcdAccess = acc
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		e.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle.Certs.Etcd.Crt)
	e.kv, err = clientv3.New(clientv3.Config{Endpoints: acc.Endpoints, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { e.kv.Close() })
}

// loseMembers destroys the etcd data of the last n control planes, as a
// lost disk does, and waits until their etcd no longer runs (and with it
// their kube-apiserver).
func (e *engineEnv) loseMembers(n int) {
	e.t.Helper()
	cps := e.cluster.ControlPlanes()
	for _, node := range cps[len(cps)-n:] {
		if err := node.DestroyEtcdData(); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, node := range cps[len(cps)-n:] {
		ctx, cancel := context.WithTimeout(e.t.Context(), time.Minute)
		_, err := node.WaitPod(ctx, func(p talostest.PodState) bool { return !p.Present && !p.Terminating })
		cancel()
		if err != nil {
			e.t.Fatalf("node %s: kube-apiserver still runs without its etcd: %v", node.IP, err)
		}
	}
}

// membersHealthy tells whether every control plane's member is healthy,
// listed and a voter, as the nodes and etcd say it, within a minute (the
// test's client reconnects to members that rebooted); what is not is logged.
func (e *engineEnv) membersHealthy() bool {
	var why string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if why = e.membersNotHealthy(); why == "" {
			return true
		}
	}
	e.t.Log(why)
	return false
}

func (e *engineEnv) membersNotHealthy() string {
	for _, n := range e.cluster.ControlPlanes() {
		if st := n.EtcdState(); !st.Healthy || st.State != talostest.ServiceRunning {
			return fmt.Sprintf("node %s: etcd %+v", n.IP, st)
		}
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	resp, err := e.kv.MemberList(ctx)
	if err != nil || len(resp.Members) != len(e.cluster.ControlPlanes()) {
		return fmt.Sprintf("member list: %v, %v", resp, err)
	}
	for _, m := range resp.Members {
		if m.IsLearner {
			return fmt.Sprintf("member %x is a learner", m.ID)
		}
	}
	return ""
}

// A lost member: the plain recover diagnoses it (exit 31 when refused),
// removes it, resets its node, and waits until it has joined again; the
// keys stay as they were.
func TestEngineMemberLost(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	if _, err := env.kv.Put(t.Context(), "/registry/configmaps/default/before", "kept"); err != nil {
		t.Fatal(err)
	}
	before := env.liveKeys()
	env.loseMembers(1)
	members := env.memberIDs()
	dry, err := recoverRun(t, env, recoverRequest{DryRun: true})
	wantOutcome(t, dry, err, "completed", false)
	if got := env.memberIDs(); !slicesEqual(got, members) || env.cluster.ControlPlanes()[2].EtcdState().State == talostest.ServicePreparing {
		t.Fatalf("the dry run changed the members (%q, were %q) or reset a node", got, members)
	}
	var asked []string
	out, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		confirm:     func(q string) error { asked = append(asked, q); return nil },
		confirmText: func(q, word string) error { asked = append(asked, q+" ["+word+"]"); return nil },
	}})
	wantOutcome(t, out, err, "completed", false)
	if d := out.step("diagnose"); !strings.Contains(d.Message, "verdict etcd-member-lost") {
		t.Errorf("diagnose: %+v", d)
	}
	if len(asked) != 2 || !strings.Contains(asked[1], "["+env.cluster.ControlPlanes()[2].IP+"]") {
		t.Errorf("asked %q: want the removal, then the reset typed as the node's address", asked)
	}
	if !env.membersHealthy() {
		t.Error("the members are not all healthy after the run")
	}
	after := env.liveKeys()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("key %s: %q, was %q", k, after[k], v)
		}
	}
}

// A lost quorum: the plain recover copies the survivor's data, resets
// every control plane (a typed confirmation each), bootstraps etcd from the
// copy, waits for the others to join, and every key written before the
// copy is back, byte for byte, with its revision.
func TestEngineQuorumLost(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	if _, err := env.kv.Put(t.Context(), "/registry/configmaps/default/before", "kept"); err != nil {
		t.Fatal(err)
	}
	before := env.etcdState()
	env.loseMembers(2)
	dry, err := recoverRun(t, env, recoverRequest{DryRun: true})
	wantOutcome(t, dry, err, "completed", false)
	for _, n := range env.cluster.ControlPlanes() {
		if n.EtcdState().State == talostest.ServicePreparing {
			t.Fatalf("the dry run reset node %s", n.IP)
		}
	}
	var typed, shown []string
	out, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		confirmText: func(q, word string) error { typed = append(typed, word); return nil },
		show:        func(text string) { shown = append(shown, text) },
	}})
	wantOutcome(t, out, err, "completed", false)
	if d := out.step("diagnose"); !strings.Contains(d.Message, "verdict etcd-quorum-lost") {
		t.Errorf("diagnose: %+v", d)
	}
	// The admission listing waits for no quorum: the members' answer ends it.
	if !slices.ContainsFunc(shown, func(v string) bool { return strings.Contains(v, "etcd: not read: etcd has no quorum to answer a read") }) {
		t.Errorf("the diagnosis's view: %q", shown)
	}
	if len(typed) != 3 {
		t.Errorf("typed %q: want each control plane's address, one reset each", typed)
	}
	if !env.membersHealthy() {
		t.Error("the members are not all healthy after the run")
	}
	after := env.etcdState()
	for k, v := range before.Keys {
		if after.Keys[k] != v {
			t.Errorf("key %s: %q, was %q", k, after.Keys[k], v)
		}
	}
	// The revision bumped past any a client saw, and compacted: a watch from
	// before the loss is told, not left waiting.
	if after.Revision < before.Revision+etcd.RevisionBump {
		t.Errorf("etcd at revision %d after the restore, %d before: not bumped by %d", after.Revision, before.Revision, etcd.RevisionBump)
	}
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if w := <-env.kv.Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(before.Revision+1)); w.CompactRevision == 0 {
		t.Errorf("a watch from revision %d (seen before the loss): %+v, err %v; want compacted", before.Revision+1, w, w.Err())
	}
}

// A control plane that goes away before the reset, which this incident did
// not reset: the plan says so within its grace (not the reset's 10-minute
// timeout), names the node, and resets none; once it is back, resume
// recovers.
func TestEngineQuorumLostNodeGoneBeforeReset(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	gone := env.cluster.ControlPlanes()[2]
	out, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		begin: func(step string) {
			if step == "reset-nodes" {
				gone.Stop()
			}
		},
	}})
	wantOutcome(t, out, err, "failed", true)
	if msg := err.Error() + " " + out.step("reset-nodes").Message; !strings.Contains(msg, gone.IP) || !strings.Contains(msg, "answer on the Talos API") {
		t.Errorf("the reset's plan: %v (%+v); want the node that does not answer named", err, out.step("reset-nodes"))
	}
	var hinted interface{ Hints() []string }
	if !errors.As(err, &hinted) || !strings.Contains(strings.Join(hinted.Hints(), " "), "has not reset it") {
		t.Errorf("no hint that the node was not reset by this incident: %v", err)
	}
	for _, n := range env.cluster.ControlPlanes()[:2] {
		if n.EtcdState().State == talostest.ServicePreparing {
			t.Fatalf("node %s was reset", n.IP)
		}
	}
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	res, err := resumeRun(t, env, out.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	if !env.membersHealthy() {
		t.Error("the members are not all healthy after the resume")
	}
}

// Interrupted once etcd was bootstrapped from the copy (Ctrl-C as wait-etcd
// begins): the etcd the resume reaches is the new cluster the bootstrap
// made, and the incident follows it there rather than refusing it as
// another cluster's etcd.
func TestEngineQuorumLostInterruptedAfterBootstrap(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	out, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{
		begin: func(step string) {
			if step == "wait-etcd" {
				cancel(errors.New("interrupted by the test (Ctrl-C)"))
			}
		},
	}})
	wantOutcome(t, out, err, "aborted", true)
	wantStep(t, out, "bootstrap", "ok")
	res, err := resumeRun(t, env, out.Incident, engineHooks{})
	wantOutcome(t, res, err, "completed", false)
	if !env.membersHealthy() {
		t.Error("the members are not all healthy after the resume")
	}
}

// memberIDs are the members etcd lists, as the surviving members say.
func (e *engineEnv) memberIDs() []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	resp, err := e.kv.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, m := range resp.Members {
		out = append(out, fmt.Sprintf("%x", m.ID))
	}
	slices.Sort(out)
	return out
}

// Without quorum no cluster lock keeps a second operator out. One waits at
// the reset's typed confirmation while another (its own state directory:
// another laptop) recovers etcd; the first then confirms. Its reset must not
// wipe the recovered cluster: the members are read again after the
// confirmation (each node's boot and member, where the plan saw them), and
// the reset is refused, nothing done.
func TestEngineQuorumLostRecoveredByAnotherBeforeConfirmation(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	otherDone := false
	out, err := recoverRun(t, env, recoverRequest{Hooks: engineHooks{
		confirmText: func(question, word string) error {
			if !otherDone {
				res, err := recoverRun(t, env, recoverRequest{StateDir: t.TempDir()})
				wantOutcome(t, res, err, "completed", false)
				otherDone = true
			}
			return nil
		},
	}})
	wantOutcome(t, out, err, "failed", true)
	if !errors.Is(err, recovery.ErrConflict) || !strings.Contains(err.Error(), "nothing was done") {
		t.Errorf("the stale reset: %v; want a conflict saying what moved and that nothing was done", err)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if st := n.EtcdState().State; st == talostest.ServicePreparing {
			t.Errorf("node %s was reset after the other operator's recovery", n.IP)
		}
	}
	if !env.membersHealthy() {
		t.Error("the members recovered by the other operator are not all healthy")
	}
}

// A run stopped between journaling the reset it is about to ask for and
// asking (Ctrl-C there cancels the request): the resumed run does not take
// the node for one rebooting from that reset. It waits a minute for the
// node to go down, sees it still in the same boot, and asks again.
func TestEngineMemberLostResetNeverSentIsAskedAgain(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(1)
	lost := env.cluster.ControlPlanes()[2]
	bootBefore := lost.BootID()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	out, err := recoverRun(t, env, recoverRequest{Ctx: ctx, Hooks: engineHooks{
		progress: func(_, msg string) {
			if strings.Contains(msg, "resetting EPHEMERAL") {
				cancel(errors.New("interrupted by the test (Ctrl-C)"))
			}
		},
	}})
	wantOutcome(t, out, err, "aborted", true)
	if lost.BootID() != bootBefore {
		t.Fatal("the interrupted run's reset reached the node: this test needs one that did not")
	}
	var said []string
	res, err := resumeRun(t, env, out.Incident, engineHooks{progress: func(_, msg string) { said = append(said, msg) }})
	wantOutcome(t, res, err, "completed", false)
	if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, "may never have got the request") }) {
		t.Errorf("the resume did not say it waited for a reset that never reached the node: %q", said)
	}
	if lost.BootID() == bootBefore {
		t.Error("the resume did not reset the node")
	}
	if !env.membersHealthy() {
		t.Error("the members are not all healthy after the resume")
	}
}

// -n naming one control plane of three: the members no node named answers
// for are asked on their own hosts. Healthy there, etcd is neither short of
// its quorum nor short of a member; with two members lost, it is.
func TestGatherMembersOfSomeNodes(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	one := env.tc.WithNodes([]string{env.cluster.ControlPlanes()[0].IP})
	ev := diagnose.GatherMembers(t.Context(), one, nil, diagnose.MemberReads{})
	lost, unanswered := ev.Lost()
	if ev.QuorumLost() || len(lost)+len(unanswered) > 0 {
		t.Fatalf("a healthy etcd read through one node: quorum lost %v, lost %v, unanswered %v", ev.QuorumLost(), lost, unanswered)
	}
	env.loseMembers(2)
	deadline := time.Now().Add(time.Minute) // until the survivor's leader is gone
	for ev = diagnose.GatherMembers(t.Context(), one, nil, diagnose.MemberReads{}); !ev.QuorumLost() && time.Now().Before(deadline); time.Sleep(time.Second) {
		ev = diagnose.GatherMembers(t.Context(), one, nil, diagnose.MemberReads{})
	}
	if !ev.QuorumLost() {
		t.Errorf("two of three members lost, read through the survivor: quorum not lost: %+v", ev)
	}
}

// Without quorum machined cannot list the members; etcd's own serializable
// list still names them, so a run whose -n names one control plane of a
// lost quorum is refused before any change, naming the other two.
func TestEngineQuorumLostOneNodeNamedIsRefused(t *testing.T) {
	env := newEngineEnv(t, envOptions{controlPlanes: 3, members: true})
	env.loseMembers(2)
	out, err := recoverRun(t, env, recoverRequest{Nodes: []string{env.cluster.ControlPlanes()[0].IP}})
	wantOutcome(t, out, err, "stopped", true)
	if err == nil || !strings.Contains(err.Error(), "-n leaves out") || !strings.Contains(err.Error(), "cp-2") || !strings.Contains(err.Error(), "cp-3") {
		t.Errorf("a lost quorum recovered through one node of three: %v; want a refusal naming cp-2 and cp-3", err)
	}
	for _, n := range env.cluster.ControlPlanes() {
		if st := n.EtcdState().State; st == talostest.ServicePreparing {
			t.Errorf("node %s was reset", n.IP)
		}
	}
}
