package main

import (
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/labflags"
	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
)

func init() { commandRegistry = append(commandRegistry, labCommand) }

// labCommand is `breakglass lab`: the lab runs real components (an etcd
// server, kube-apiserver processes, emulated Talos nodes) and lives in its
// own binary, breakglass-lab, so that this one links none of them. The
// subcommands here are its names and flags only, for help, the generated
// docs and reading the command line; each hands over to breakglass-lab
// (labexec.go). cmd/breakglass-lab's tests check they agree with it.
func labCommand(s streams) *cli.Command {
	nodes := &cli.IntFlag{Name: "nodes", Value: 1, Usage: "emulated control-plane nodes (1 to 3 fit 127.0.0.11-13)"}
	return &cli.Command{
		Name:  "lab",
		Usage: "reproduce the incident locally with real etcd and kube-apiserver on emulated Talos nodes (runs breakglass-lab)",
		Description: "The lab runs real components on this machine and lives in its own binary, " + labBinary + ",\n" +
			"found next to breakglass or on PATH: `breakglass lab COMMAND ARGS` runs `" + labBinary + " COMMAND ARGS`\n" +
			"(and passes -o on); `breakglass lab COMMAND --help` shows the command's own help.\n" +
			"`make build` builds both binaries into bin/; the lab also needs its kube-apiserver binaries\n" +
			"(make kube-apiserver). See lab/README.md and docs/breakglass-lab.md.\n\n" + failure.Help(),
		Subcommands: []*cli.Command{
			{
				Name:            "up",
				Usage:           "start a lab in the foreground (Ctrl-C stops it) and print what to try",
				SkipFlagParsing: true,
				Flags: []cli.Flag{
					nodes,
					labflags.UpScenario(),
					labflags.UpBeforeUpgrade(),
					&cli.StringFlag{Name: "dir", DefaultText: "$TMPDIR/breakglass-lab", Usage: "where the lab writes its talosconfig, kubeconfig, state and data"},
					&cli.StringFlag{Name: "first-ip", Value: "127.0.0.11", Usage: "the first node's loopback address, the others follow it (a second lab on the real ports needs its own, e.g. 127.0.1.11)"},
				},
				Action: handOverLab(s, "up"),
			},
			{
				Name:            "rehearse",
				Usage:           "reproduce the incident, recover with breakglass's own code paths, verify, print a timeline",
				SkipFlagParsing: true,
				Flags:           []cli.Flag{nodes, labflags.RehearseScenario()},
				Action:          handOverLab(s, "rehearse"),
			},
			{
				Name:            "bench",
				Usage:           "rehearse on 1 and 3 nodes, the kubelets left to their poll and restarted by breakglass, and compare both paths with kube-apiserver's own restart-to-ready",
				SkipFlagParsing: true,
				Flags: []cli.Flag{&cli.IntSliceFlag{Name: "nodes", Value: cli.NewIntSlice(1, 3), Usage: "node counts to rehearse on"},
					&cli.IntFlag{Name: "phases", Value: 3, Usage: "poll phases to rehearse each path at (the kubelets' poll seeds 1..N)"}},
				Action: handOverLab(s, "bench"),
			},
			{
				Name:            "replay",
				Usage:           "try an upgrade before doing it: the cluster's admission objects, every webhook backend down, kube-apiserver --from upgraded to --to on real binaries",
				SkipFlagParsing: true,
				Flags:           labflags.Replay(),
				Action:          handOverLab(s, "replay"),
			},
			{
				Name:            "version",
				Usage:           "print the breakglass-lab version, commit, build date and Go version",
				SkipFlagParsing: true,
				Action:          handOverLab(s, "version"),
			},
		},
	}
}
