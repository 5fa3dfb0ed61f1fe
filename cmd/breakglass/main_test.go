package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest/etcdscript"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// The CLI is tested through scripts (testdata/script/*.txtar): each runs the
// real binary against emulated Talos nodes started by the "cluster" command.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"breakglass": func() {
			os.Exit(run(context.Background(), os.Args, streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
		},
		// bgx is breakglass that always exits 0 and ends stderr with "exit=N",
		// so scripts can assert the documented exit code.
		// BGX_STDOUT and BGX_STDERR give it a broken output instead:
		// full (/dev/full), closed (a closed file), broken-pipe (a pipe
		// whose reader has gone); "exit=N" still goes to the real stderr.
		"bgx": func() {
			s := streams{In: os.Stdin, Out: brokenOutput(os.Getenv("BGX_STDOUT"), os.Stdout), Err: brokenOutput(os.Getenv("BGX_STDERR"), os.Stderr)}
			code := run(context.Background(), append([]string{"breakglass"}, os.Args[1:]...), s)
			fmt.Fprintf(os.Stderr, "exit=%d\n", code)
			os.Exit(0)
		},
	})
}

// brokenOutput is the output bgx is told to break (or f itself).
func brokenOutput(how string, f *os.File) *os.File {
	var err error
	switch how {
	case "":
		return f
	case "full":
		f, err = os.OpenFile("/dev/full", os.O_WRONLY, 0)
	case "closed":
		f, err = os.CreateTemp("", "closed")
		if err == nil {
			_ = os.Remove(f.Name())
			err = f.Close()
		}
	case "broken-pipe":
		var r *os.File
		r, f, err = os.Pipe()
		if err == nil {
			err = r.Close()
		}
	default:
		err = fmt.Errorf("unknown broken output %q", how)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(99)
	}
	return f
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:   "testdata/script",
		Setup: scriptSetup,
		Cmds:  scriptCommands(),
	})
}

// scriptSetup gives each script its own state directory and home, and a
// place for the cluster its "cluster" command starts.
func scriptSetup(env *testscript.Env) error {
	env.Setenv("BREAKGLASS_STATE_DIR", filepath.Join(env.WorkDir, "state"))
	env.Setenv("HOME", env.WorkDir)
	env.Values[clusterKey] = &clusterHolder{}
	return nil
}

func scriptCommands() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	cmds := map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"cluster":  cmdCluster,
		"savecfg":  cmdSaveConfig,
		"stopnode": cmdStopNode,
		"podflag":  cmdPodFlag,
		"rollback": cmdRollback,
		"extraarg": cmdExtraArg,
	}
	for name, fn := range etcdscript.ScriptCommands() {
		cmds[name] = fn
	}
	return cmds
}

const clusterKey = "cluster"

// cluster [-cp N] [-workers N] [-talos NODE=VERSION] [-future NODE]
// starts emulated nodes and sets TALOSCONFIG (os:admin), TALOSCONFIG_OPERATOR,
// TALOSCONFIG_READER, NODE1.., WORKER1.. and NODES (comma-joined control planes).
func cmdCluster(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	cp := fs.Int("cp", 1, "control-plane nodes")
	workers := fs.Int("workers", 0, "worker nodes")
	var talosVersions, future multiFlag
	fs.Var(&talosVersions, "talos", "NODE=VERSION (1-based node index)")
	fs.Var(&future, "future", "NODE whose config holds a document kind this machinery does not know")
	ts.Check(fs.Parse(args))
	// The kubelet's and Talos's real times, 200 times faster (status 75ms,
	// grace 150ms, back-off 50ms), but a manifest poll over a second: a pod's
	// startTime has whole seconds, and a pod that replaces another must start
	// in a later second, as on a node (polls 20s apart).
	kubelet := talostest.KubeletOptions{TimeScale: 0.005, PollInterval: 1200 * time.Millisecond}
	opts := talostest.ClusterOptions{ControlPlanes: *cp, Workers: *workers, Dir: ts.MkAbs("talos"),
		Nodes: make([]talostest.NodeOptions, *cp+*workers), Kubelet: kubelet}
	for _, tv := range talosVersions {
		idx, v, _ := strings.Cut(tv, "=")
		i, err := strconv.Atoi(idx)
		ts.Check(err)
		opts.Nodes[i-1].TalosVersion = v
	}
	for _, f := range future {
		i, err := strconv.Atoi(f)
		ts.Check(err)
		opts.Nodes[i-1].ExtraDocuments = "apiVersion: v1alpha1\nkind: FutureConfig\nsetting: from-a-newer-talos\n"
		opts.Nodes[i-1].KnownKinds = []string{"FutureConfig"}
	}
	ts.Check(os.MkdirAll(opts.Dir, 0o700))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := talostest.NewCluster(ctx, opts)
	ts.Check(err)
	ts.Defer(c.Close)
	for _, r := range []role.Role{role.Admin, role.Operator, role.Reader} {
		path, err := c.Talosconfig(r)
		ts.Check(err)
		switch r {
		case role.Admin:
			ts.Setenv("TALOSCONFIG", path)
		case role.Operator:
			ts.Setenv("TALOSCONFIG_OPERATOR", path)
		case role.Reader:
			ts.Setenv("TALOSCONFIG_READER", path)
		}
	}
	var cps []string
	wi := 0
	for i, n := range c.Nodes {
		if i < *cp {
			ts.Setenv(fmt.Sprintf("NODE%d", i+1), n.IP)
			cps = append(cps, n.IP)
		} else {
			wi++
			ts.Setenv(fmt.Sprintf("WORKER%d", wi), n.IP)
		}
	}
	ts.Setenv("NODES", strings.Join(cps, ","))
	ts.Value(clusterKey).(*clusterHolder).c = c
}

type clusterHolder struct{ c *talostest.Cluster }

func nodeOf(ts *testscript.TestScript, ip string) *talostest.Node {
	h := ts.Value(clusterKey).(*clusterHolder)
	if h.c == nil {
		ts.Fatalf("no cluster: start one with the cluster command")
	}
	for _, n := range h.c.Nodes {
		if n.IP == ip {
			return n
		}
	}
	ts.Fatalf("no node %s", ip)
	return nil
}

// savecfg NODE FILE writes the node's running machine config to FILE.
func cmdSaveConfig(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: savecfg NODE FILE")
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), nodeOf(ts, args[0]).RunningConfig(), 0o600))
}

// stopnode NODE makes the node's Talos API unreachable.
func cmdStopNode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: stopnode NODE")
	}
	nodeOf(ts, args[0]).Stop()
}

// podflag NODE FLAG prints the flag of the running kube-apiserver container
// ("<unset>" when absent).
func cmdPodFlag(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: podflag NODE FLAG")
	}
	st := nodeOf(ts, args[0]).Pod()
	v, ok := st.Config.Flag(args[1])
	if !ok {
		v = "<unset>"
	}
	fmt.Fprintf(ts.Stdout(), "%s=%s running=%v\n", args[1], v, st.Running)
}

// rollback [-expire] NODE prints whether a try-mode rollback is pending;
// -expire first makes the pending one happen now.
func cmdRollback(ts *testscript.TestScript, neg bool, args []string) {
	expire := len(args) == 2 && args[0] == "-expire"
	if expire {
		args = args[1:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: rollback [-expire] NODE")
	}
	if expire && !nodeOf(ts, args[0]).ExpireRollback() {
		ts.Fatalf("no rollback pending on %s", args[0])
	}
	pending, _ := nodeOf(ts, args[0]).RollbackPending()
	fmt.Fprintf(ts.Stdout(), "pending=%v\n", pending)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// extraarg NODE KEY VALUE sets cluster.apiServer.extraArgs[KEY] on the node
// (as an operator would have before the incident), applied without reboot
// through the real Talos client.
func cmdExtraArg(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: extraarg NODE KEY VALUE")
	}
	n := nodeOf(ts, args[0])
	cfg := string(n.RunningConfig())
	marker := "\n    apiServer:\n"
	if !strings.Contains(cfg, marker) {
		ts.Fatalf("no apiServer section in the generated config")
	}
	cfg = strings.Replace(cfg, marker, marker+"        extraArgs:\n            "+args[1]+": "+args[2]+"\n", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := talos.Connect(ctx, talos.Options{Talosconfig: ts.Getenv("TALOSCONFIG"), Nodes: []string{n.IP}})
	ts.Check(err)
	defer tc.Close()
	_, err = tc.Apply(ctx, n.IP, talos.ApplyRequest{Config: []byte(cfg), Mode: talos.NoReboot})
	ts.Check(err)
}
