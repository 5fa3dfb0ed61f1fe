package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/lab"
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
			Description: "Starts N emulated Talos control-plane nodes on 127.0.0.11.. with the real ports (Talos API\n" +
				"50000, kube-apiserver 6443, etcd 2379), each with its etcd member and a real kube-apiserver\n" +
				"as its static pod. With --scenario, plays it until the incident is there.\n" +
				"Writes DIR/talosconfig (os:admin) and DIR/kubeconfig; recreates the lab's own files in DIR.",
			Flags: []cli.Flag{
				nodes,
				&cli.StringFlag{Name: "scenario", Usage: "scenario to play: " + strings.Join(lab.Scenarios(), ", ")},
				&cli.StringFlag{Name: "dir", DefaultText: "$TMPDIR/breakglass-lab", Usage: "where the lab writes its talosconfig, kubeconfig, state and data"},
			},
			Action: func(c *cli.Context) error {
				if err := checkNodes(c.Int("nodes")); err != nil {
					return err
				}
				return lab.Up(c.Context, lab.UpOptions{Nodes: c.Int("nodes"), Scenario: c.String("scenario"), Dir: labDir(c), Out: s.Out})
			},
		},
		{
			Name:  "rehearse",
			Usage: "reproduce the incident, recover with breakglass's own code paths, verify, print a timeline",
			Description: "Plays the " + lab.ScenarioKyvernoServiceCIDR + " scenario on a fresh lab with free ports, then runs\n" +
				"admission disable (" + strings.Join(lab.RecoveryPlugins, ",") + "), waits until kube-apiserver is ready,\n" +
				"admission restore, waits again, and verifies: ready with webhooks on, flag gone from the running pod,\n" +
				"machine configs byte-identical to before, webhook backend answering reviews again.\n" +
				"Exits 0 only if every check holds.\n\n" + failure.Help(),
			Flags: []cli.Flag{nodes},
			Action: func(c *cli.Context) error {
				if err := checkNodes(c.Int("nodes")); err != nil {
					return err
				}
				js, err := jsonOutput(c)
				if err != nil {
					return err
				}
				// With -o json the running account goes to stderr and
				// the rehearsal's result is the one document on stdout.
				out := s.Out
				if js {
					out = s.Err
				}
				r, err := lab.Rehearse(c.Context, lab.RehearseOptions{Nodes: c.Int("nodes"), Out: out, ToolVersion: version})
				if js && r != nil {
					if werr := writeJSON(s.Out, r); werr != nil {
						return werr
					}
				}
				return err
			},
		},
		{
			Name:  "bench",
			Usage: "rehearse on 1 and 3 nodes and compare breakglass's time with kube-apiserver's own restart-to-ready",
			Flags: []cli.Flag{&cli.IntSliceFlag{Name: "nodes", Value: cli.NewIntSlice(1, 3), Usage: "node counts to rehearse on"}},
			Action: func(c *cli.Context) error {
				for _, n := range c.IntSlice("nodes") {
					if err := checkNodes(n); err != nil {
						return err
					}
				}
				js, err := jsonOutput(c)
				if err != nil {
					return err
				}
				out := s.Out
				if js {
					out = s.Err
				}
				reps, err := lab.Bench(c.Context, c.IntSlice("nodes"), lab.RehearseOptions{ToolVersion: version}, out)
				if js && reps != nil {
					if werr := writeJSON(s.Out, map[string]any{"rehearsals": reps}); werr != nil {
						return werr
					}
				}
				return err
			},
		},
	}
}

func checkNodes(n int) error {
	if n < 1 || n > 9 {
		return failure.Input("use --nodes 1 or --nodes 3", "--nodes must be between 1 and 9")
	}
	return nil
}

// labDir is --dir, or a folder under the temporary directory; resolved here
// so that help and the generated docs do not depend on the machine.
func labDir(c *cli.Context) string {
	if d := c.String("dir"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "breakglass-lab")
}
