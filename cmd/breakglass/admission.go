package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() {
	for _, sub := range []string{"disable", "restore"} {
		declare("admission "+sub, commandSpec{args: takes(0, 0, "admission "+sub+" takes no arguments", "name the nodes with -n NODE[,NODE...]"),
			state: stateWrite, journaled: true, talos: talosAlways})
	}
	declare("admission status", commandSpec{args: takes(0, 0, "admission status takes no arguments", "name the nodes with -n NODE[,NODE...]"),
		state: stateRead, talos: talosAlways})
}

func admissionCommand(s streams) *cli.Command {
	plugins := &cli.StringSliceFlag{Name: "plugins", Usage: "admission plugins (comma-separated or repeated)"}
	noWait := &cli.BoolFlag{Name: "no-wait", Usage: "do not wait for kube-apiserver to restart with the new flags"}
	waitTimeout := &cli.DurationFlag{Name: "wait-timeout", Value: runbooks.DefaultWait, Usage: "how long to wait for kube-apiserver to restart"}
	return &cli.Command{
		Name:  "admission",
		Usage: "turn kube-apiserver admission plugins off and back on through the Talos API",
		Subcommands: []*cli.Command{
			{
				Name:  "disable",
				Usage: "disable admission plugins on the control-plane nodes (no reboot)",
				Description: "Adds the plugins to cluster.apiServer.extraArgs[\"disable-admission-plugins\"] of each node's machine\n" +
					"config, merged with what is there, and applies it without a reboot. A plugin also listed in\n" +
					"enable-admission-plugins is taken out of that list (kube-apiserver refuses the overlap).\n" +
					"The original values are recorded in the state directory for an exact restore.\n" +
					"Idempotent: plugins already disabled are left alone (exit 0).\n" +
					"While the plugins are off, webhooks are not called: policies are bypassed.\n\n" + exitCodeHelp(),
				Flags: append([]cli.Flag{
					&cli.StringSliceFlag{Name: "plugins", Value: cli.NewStringSlice(recovery.DefaultPlugins...), Usage: "admission plugins to disable (comma-separated or repeated)"},
					&cli.DurationFlag{Name: "revert-after", Usage: "apply in Talos try mode: the nodes revert by themselves after this long (e.g. 30m)"},
					noWait, waitTimeout, noKubeletRestartFlag(), allowPendingFlag(),
				}, etcdConnFlags()...),
				Action: func(c *cli.Context) error {
					return runAdmissionChange(c, s, "disable")
				},
			},
			{
				Name:  "restore",
				Usage: "put back exactly the values recorded when breakglass disabled the plugins",
				Description: "Per node, restores the recorded original values of disable-admission-plugins and\n" +
					"enable-admission-plugins. If nothing else changed since, the config is byte-identical to\n" +
					"what it was before disable; other changes made meanwhile are kept. Without a record\n" +
					"(disable ran elsewhere), --plugins removes just the named plugins.\n" +
					"Idempotent: nodes with nothing to restore are left alone.\n\n" + exitCodeHelp(),
				Flags: append([]cli.Flag{plugins, noWait, waitTimeout, noKubeletRestartFlag(), allowPendingFlag()}, etcdConnFlags()...),
				Action: func(c *cli.Context) error {
					return runAdmissionChange(c, s, "restore")
				},
			},
			{
				Name:  "status",
				Usage: "show which admission plugins are disabled, configured and running",
				Description: "Reads each node's rendered kube-apiserver static pod (any role) and, with os:admin, its\n" +
					"machine config and breakglass's record. Exits 20 when plugins are disabled on any node.\n\n" + exitCodeHelp(),
				Action: func(c *cli.Context) error {
					return runAdmissionStatus(c, s)
				},
			},
		},
	}
}

func noKubeletRestartFlag() cli.Flag {
	return &cli.BoolFlag{Name: "no-kubelet-restart", Usage: "do not restart the kubelets once the nodes have rendered the new kube-apiserver pod: wait for their next poll of the static pods instead (up to 20 s more per change)"}
}

func allowPendingFlag() cli.Flag {
	return &cli.BoolFlag{Name: "allow-pending-change", Usage: "apply even where someone's TRY or STAGED change is pending on a node (a TRY change then becomes permanent, a STAGED one is overwritten)"}
}

func runAdmissionChange(c *cli.Context, s streams, op string) error {
	return withTalos(c, func(g globalOptions, tc *talos.Client) error {
		return admissionChange(c, s, g, tc, op)
	})
}

func admissionChange(c *cli.Context, s streams, g globalOptions, tc *talos.Client, op string) error {
	change := recovery.AdmissionChange{
		Plugins:            flaglist.Split(c.StringSlice("plugins")...),
		RevertAfter:        c.Duration("revert-after"),
		NoWait:             c.Bool("no-wait"),
		NoKubeletRestart:   c.Bool("no-kubelet-restart"),
		WaitTimeout:        c.Duration("wait-timeout"),
		AllowPendingChange: c.Bool("allow-pending-change"),
		Etcd:               etcdOptions(c),
		ToolVersion:        version,
		CommandLine:        typedCommand(c, tc),
	}
	run := recovery.DisableAdmission
	if op == "restore" {
		run = recovery.RestoreAdmission
	}
	res, err := run(c.Context, tc, recovery.State{Dir: g.StateDir}, effects(g, tc), newChangeUI(s, g), change)
	if res == nil {
		return err
	}
	fmt.Fprintf(s.Err, "journal: breakglass journal show %s\n", res.Incident)
	err = withIncident(err, res)
	outcome, ran := recovery.ResultOf[*recovery.AdmissionResult](res)
	var p *recovery.AdmissionPlan
	if ran {
		p = outcome.Plan
	}
	switch {
	case p == nil:
	case g.json():
		if werr := writeJSON(s.Out, p); werr != nil {
			return either(err, werr)
		}
	case g.DryRun:
		if err == nil {
			fmt.Fprintln(s.Out, "Dry run: nothing was applied.")
		}
	case executed(p):
		renderAdmissionOutcome(s.Out, p)
	}
	return err
}

// executed tells whether the plan was sent to a node (not declined, not
// refused before).
func executed(p *recovery.AdmissionPlan) bool {
	for _, n := range p.Nodes {
		if n.Action != "none" && n.Outcome != "planned" {
			return true
		}
	}
	return false
}

func runAdmissionStatus(c *cli.Context, s streams) error {
	return withTalos(c, func(g globalOptions, tc *talos.Client) error {
		return admissionStatus(c, s, g, tc)
	})
}

func admissionStatus(c *cli.Context, s streams, g globalOptions, tc *talos.Client) error {
	nodes, err := recovery.AdmissionStatus(c.Context, tc, recovery.State{Dir: g.StateDir}, time.Now())
	if nodes == nil {
		return err
	}
	disabled := false
	for _, n := range nodes {
		disabled = disabled || n.Disabled()
	}
	if g.json() {
		if werr := writeJSON(s.Out, map[string]any{"nodes": nodes, "disabled": disabled}); werr != nil {
			return either(err, werr)
		}
	} else {
		renderAdmissionStatus(s.Out, nodes, tc.CanApply())
	}
	if err != nil {
		return err
	}
	if disabled {
		return failure.Reported{Category: failure.Disabled}
	}
	return nil
}

// progressPrinter prints one timestamped line per step; nodes run in
// parallel, so lines are written whole, one at a time.
func progressPrinter(w io.Writer) func(node, msg string) {
	var mu sync.Mutex
	return func(node, msg string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s  %s: %s\n", time.Now().Format("15:04:05.000"), node, msg)
	}
}
