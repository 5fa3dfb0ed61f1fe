package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/closest"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/labflags"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/lab"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
)

// labCommands are the lab's commands, as `breakglass lab` has always had
// them (cmd/breakglass/lab.go mirrors their names and flags to hand them
// over; a test checks the two agree).
func labCommands(s streams) []*cli.Command {
	nodes := &cli.IntFlag{Name: "nodes", Value: 1, Usage: "emulated control-plane nodes (1 to 3 fit 127.0.0.11-13)"}
	return []*cli.Command{
		{
			Name:  "up",
			Usage: "start a lab in the foreground (Ctrl-C stops it) and print what to try",
			Description: "Starts N emulated Talos control-plane nodes on 127.0.0.11.. (--first-ip) with the real ports (Talos API\n" +
				"50000, kube-apiserver 6443, etcd 2379), each with its etcd member and a real kube-apiserver\n" +
				"as its static pod. With --scenario, plays it until the incident is there; with --before-upgrade,\n" +
				"until just before the scenario's upgrade (for breakglass upgrade-check).\n" +
				"Writes DIR/talosconfig (os:admin) and DIR/kubeconfig; recreates the lab's own files in DIR.",
			Flags: []cli.Flag{
				nodes,
				labflags.UpScenario(),
				labflags.UpBeforeUpgrade(),
				&cli.StringFlag{Name: "dir", DefaultText: "$TMPDIR/breakglass-lab", Usage: "where the lab writes its talosconfig, kubeconfig, state and data"},
				&cli.StringFlag{Name: "first-ip", Value: lab.FirstIP, Usage: "the first node's loopback address, the others follow it (a second lab on the real ports needs its own, e.g. 127.0.1.11)"},
			},
			Action: func(c *cli.Context) error {
				if err := checkNodes(c.Int("nodes")); err != nil {
					return err
				}
				if err := checkScenario(c.String("scenario")); err != nil {
					return err
				}
				if _, err := lab.NodeIPs(c.String("first-ip"), c.Int("nodes")); err != nil {
					return err
				}
				return lab.Up(c.Context, lab.UpOptions{Nodes: c.Int("nodes"), Scenario: c.String("scenario"), BeforeUpgrade: c.Bool("before-upgrade"), Dir: labDir(c), Out: s.Out,
					Lab: lab.Options{FirstIP: c.String("first-ip")}})
			},
		},
		{
			Name:  "rehearse",
			Usage: "reproduce the incident, recover with breakglass's own code paths, verify, print a timeline",
			Description: "Plays the " + lab.ScenarioKyvernoServiceCIDR + " scenario on a fresh lab with free ports, then runs\n" +
				"admission disable (" + strings.Join(lab.RecoveryPlugins, ",") + "), waits until kube-apiserver is ready,\n" +
				"admission restore, waits again, and verifies: ready with webhooks on, flag gone from the running pod,\n" +
				"machine configs byte-identical to before, webhook backend answering reviews again.\n" +
				"With --scenario " + lab.ScenarioFlagsMultiCIDR + " or " + lab.ScenarioFlagsCloudProvider + ": the upgrade carries extraArgs " + lab.NewVersion + " refuses;\n" +
				"the guided recovery (breakglass recover --yes, no expert flag) takes them out, and the checks are:\n" +
				"kube-apiserver ready, the configs changed in that flag only.\n" +
				"With --scenario " + lab.ScenarioEtcdNoSpace + ": etcd reaches its quota and the upgraded kube-apiserver cannot start;\n" +
				"the guided recovery picks runbook etcd-nospace (snapshot, compact, defragment, disarm), and the checks are:\n" +
				"kube-apiserver ready, writes taken, NOSPACE gone, the snapshot verified, no live key lost.\n" +
				"With --scenario " + lab.ScenarioEtcdMemberLost + " or " + lab.ScenarioEtcdQuorumLost + " (3 nodes): one member's data destroyed, or two;\n" +
				"the guided recovery picks runbook etcd-member-lost or etcd-quorum-lost, and the checks are: three healthy\n" +
				"members, kube-apiserver ready on every node (after a restore, each started after it), every key back byte for byte.\n" +
				"Exits 0 only if every check holds.\n\n" + failure.Help(),
			Flags: []cli.Flag{nodes, labflags.RehearseScenario()},
			Action: func(c *cli.Context) error {
				if err := checkNodes(c.Int("nodes")); err != nil {
					return err
				}
				return withJSONResult(c, s, func(out io.Writer) (any, error) {
					r, err := lab.Rehearse(c.Context, lab.RehearseOptions{Scenario: c.String("scenario"), Nodes: c.Int("nodes"), Out: out, ToolVersion: version})
					if r == nil {
						return nil, err
					}
					return r, err
				})
			},
		},
		{
			Name:  "bench",
			Usage: "rehearse on 1 and 3 nodes, the kubelets left to their poll and restarted by breakglass, and compare both paths with kube-apiserver's own restart-to-ready",
			Flags: []cli.Flag{&cli.IntSliceFlag{Name: "nodes", Value: cli.NewIntSlice(1, 3), Usage: "node counts to rehearse on"},
				&cli.IntFlag{Name: "phases", Value: 3, Usage: "poll phases to rehearse each path at (the kubelets' poll seeds 1..N)"}},
			Action: func(c *cli.Context) error {
				for _, n := range c.IntSlice("nodes") {
					if err := checkNodes(n); err != nil {
						return err
					}
				}
				return withJSONResult(c, s, func(out io.Writer) (any, error) {
					var seeds []uint64
					for i := 1; i <= max(c.Int("phases"), 1); i++ {
						seeds = append(seeds, uint64(i))
					}
					reps, err := lab.Bench(c.Context, c.IntSlice("nodes"), seeds, lab.RehearseOptions{ToolVersion: version}, out)
					if reps == nil {
						return nil, err
					}
					return map[string]any{"rehearsals": reps}, err
				})
			},
		},
		replayCommand(s),
	}
}

// withJSONResult runs what reports as it goes, then has a result: the
// running account is written to stdout, or with -o json to stderr, the
// result (when there is one) being then the one document on stdout.
func withJSONResult(c *cli.Context, s streams, run func(out io.Writer) (any, error)) error {
	js, err := jsonOutput(c)
	if err != nil {
		return err
	}
	out := s.Out
	if js {
		out = s.Err
	}
	result, err := run(out)
	if js && result != nil {
		if werr := writeJSON(s.Out, result); werr != nil {
			return werr
		}
	}
	return err
}

// replayCommand is `replay`: the upgrade tried on this machine first.
func replayCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "replay",
		Usage: "try an upgrade before doing it: the cluster's admission objects, every webhook backend down, kube-apiserver --from upgraded to --to on real binaries",
		Description: "On a scratch lab node and etcd: kube-apiserver --from starts and is ready; the admission objects\n" +
			"are installed through it (namespaces, params and their CRDs first, webhook configurations last, so\n" +
			"none is refused by what came before), every webhook's clientConfig rewritten to a closed loopback\n" +
			"port (nothing the objects name is ever dialled); then the node is upgraded to --to the Talos way and\n" +
			"kube-apiserver --to is watched until ready, exited, or --timeout. Reports the outcome, the failing\n" +
			"readyz checks, why it exited, each webhook or policy that refused a start-up write (counted from its\n" +
			"log), and audit's prediction for the same objects and versions, saying plainly when they disagree.\n" +
			"The cluster's own kube-apiserver flags come with --apiserver-arg or in a machine config given with -f\n" +
			"(cluster.apiServer.extraArgs): set on --from the Talos way and kept for --to, as in the real upgrade.\n" +
			"A flag, gate or runtime-config entry --to refuses is reported \"never starts\" with the binary's own line.\n" +
			"Exit 0 when --to starts with every backend down, 24 when it deadlocks, 28 when a binary is missing;\n" +
			"with --fix, the fixed run decides.\n\n" + failure.Help(),
		Flags: labflags.Replay(),
		Action: func(c *cli.Context) error {
			js, err := jsonOutput(c)
			if err != nil {
				return err
			}
			sources, err := replaySources(c, s)
			if err != nil {
				return err
			}
			log := s.Err
			opts := lab.ReplayOptions{From: c.String("from"), To: c.String("to"), Sources: sources, Fix: c.Bool("fix"),
				FixStyle: audit.Exclusion(c.String("fix-style")), Timeout: c.Duration("timeout"),
				KubeBinDir: c.String("kube-apiserver-dir"), Dir: c.String("dir"), Log: log}
			if a, ok := c.Generic("apiserver-arg").(*labflags.ArgList); ok {
				opts.APIServerArgs = *a
			}
			rep, err := lab.Replay(c.Context, opts)
			if err != nil {
				return err
			}
			if js {
				err = writeJSON(s.Out, rep)
			} else {
				err = lab.WriteReplay(s.Out, rep)
			}
			if err != nil {
				return err
			}
			if rep.Err() != nil {
				return failure.Reported{Category: failure.Category(failure.Code(rep.Err()))}
			}
			return nil
		},
	}
}

// replaySources reads -f files (- is standard input), --kubeconfig and
// --from-etcd as breakglass audit does (audit.ReadSources), with the
// certificates given for etcd: the lab mints none (that needs the Talos
// API, which breakglass has and the lab does not).
func replaySources(c *cli.Context, s streams) ([]lab.ReplaySource, error) {
	eo := recovery.EtcdOptions{Endpoints: c.StringSlice("etcd-endpoints"), CACert: c.String("etcd-cacert"),
		Cert: c.String("etcd-cert"), Key: c.String("etcd-key"), Prefix: c.String("etcd-prefix")}
	in := audit.Inputs{Files: c.StringSlice("file"), Kubeconfig: c.String("kubeconfig"), FromEtcd: c.Bool("from-etcd")}
	got, err := audit.ReadSources(c.Context, in, recovery.AuditReaders(s.In, eo, nil))
	if err != nil {
		return nil, err
	}
	for _, o := range got.Unreadable {
		fmt.Fprintf(s.Err, "WARNING: %s %s is not replayed: its etcd value is %s; pass its manifest with -f\n", o.Kind, termsafe.String(o.Name), o.Stored)
	}
	out := make([]lab.ReplaySource, 0, len(got.Sources))
	for _, src := range got.Sources {
		out = append(out, lab.ReplaySource{Name: src.Name, Data: src.Data})
	}
	return out, nil
}

// checkNodes refuses a node count the lab's addresses do not hold: its
// nodes are 127.0.0.11 to 127.0.0.13.
func checkNodes(n int) error {
	if n < 1 || n > 3 {
		return failure.Input("use --nodes 1 or --nodes 3", "--nodes %d is out of range: from 1 to 3 (the lab's nodes are 127.0.0.11-13)", n)
	}
	return nil
}

// checkScenario refuses a scenario the lab does not know, naming those it does.
func checkScenario(name string) error {
	if name == "" || slices.Contains(lab.Scenarios(), name) {
		return nil
	}
	hint := "--scenario " + strings.Join(lab.Scenarios(), "|")
	if m := closest.Name(name, lab.Scenarios()); m != "" {
		hint = "did you mean --scenario " + m + "?"
	}
	return failure.Input(hint, "unknown scenario %q (known: %s)", termsafe.String(name), strings.Join(lab.Scenarios(), ", "))
}

// labDir is --dir, or a folder under the temporary directory; resolved here
// so that help and the generated docs do not depend on the machine.
func labDir(c *cli.Context) string {
	if d := c.String("dir"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "breakglass-lab")
}
