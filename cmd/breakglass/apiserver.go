package main

import (
	"fmt"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
)

func init() {
	commandRegistry = append(commandRegistry, apiserverCommand)
	declare("apiserver wait", commandSpec{args: takes(0, 0, "apiserver wait takes no arguments", "name the nodes with -n NODE[,NODE...]"), talos: talosAlways})
}

func apiserverCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "apiserver",
		Usage: "look at kube-apiserver on the control-plane nodes (readyz and static pod status)",
		Subcommands: []*cli.Command{{
			Name:  "wait",
			Usage: "wait until kube-apiserver is ready on every target node, showing what still fails",
			Description: "Polls /readyz?verbose on each node (HTTPS, verified with the cluster CA, as the admin from the\n" +
				"Talos API's kubeconfig) every 100ms, together with the static pod status (restarts,\n" +
				"CrashLoopBackOff). Prints a line whenever what fails changes. Read-only; safe to re-run.\n\n" + exitCodeHelp(),
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "timeout", Value: runbooks.DefaultWait, Usage: "give up after this long (exit 7)"},
			},
			Action: func(c *cli.Context) error {
				return withTalos(c, func(g globalOptions, tc *talos.Client) error {
					start := time.Now()
					progress := progressPrinter(s.Err)
					health, err := recovery.WaitReady(c.Context, tc, recovery.HealthOptions{
						Timeout:  c.Duration("timeout"),
						Progress: func(h recovery.NodeHealth) { progress(h.Node, h.Summary()) },
					})
					if health == nil {
						return err
					}
					if g.json() {
						if werr := writeJSON(s.Out, map[string]any{"nodes": health, "elapsed": recovery.Duration(time.Since(start).Round(time.Millisecond))}); werr != nil {
							return either(err, werr)
						}
					} else {
						for _, h := range health {
							fmt.Fprintf(s.Out, "node %s: %s\n", h.Node, h.Summary())
						}
					}
					return err
				})
			},
		}},
	}
}
