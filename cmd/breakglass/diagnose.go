package main

import (
	"context"
	"time"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
)

func init() {
	commandRegistry = append(commandRegistry, diagnoseCommand)
	declare("diagnose", commandSpec{args: takes(0, 0, "diagnose takes no arguments", "name the nodes with -n NODE[,NODE...]"), talos: talosAlways})
}

// diagnoseExit ends diagnose with its verdict's exit code (healthy is 0).
func diagnoseExit(v diagnose.Verdict) error {
	if v.Category() == failure.OK {
		return nil
	}
	return failure.Reported{Category: v.Category()}
}

func diagnoseCommand(s streams) *cli.Command {
	flags := []cli.Flag{
		&cli.IntFlag{Name: "tail", Value: 200, Usage: "kube-apiserver log lines to read per node"},
		&cli.BoolFlag{Name: "no-etcd", Usage: "do not read etcd (the webhook is then named, its configuration is not)"},
		&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "give up reading after this long (an etcd member down is watched up to a minute before it counts as lost)"},
	}
	return &cli.Command{
		Name:  "diagnose",
		Usage: "tell why kube-apiserver does not come up, and what to run next (reads only)",
		Description: "Reads, on every target node, the kube-apiserver static pod (status, restarts, admission\n" +
			"flags) and its last log lines through the Talos API, /readyz?verbose through the admin\n" +
			"kubeconfig from Talos when kube-apiserver answers, and the admission objects in etcd. Matches\n" +
			"known signatures (a webhook failing closed or denying, the default ServiceCIDR not created,\n" +
			"a post-start hook failing, admission plugins overlapped, a flag, feature gate or runtime-config\n" +
			"entry the binary refuses at start, etcd unreachable or refusing\n" +
			"certificates, ...) and prints the verdict, the object to blame with the evidence lines, and\n" +
			"the exact next command. Changes nothing; safe to re-run. Logs and pod status need any Talos\n" +
			"role; readyz and a minted etcd certificate need os:admin (without it they are reported as\n" +
			"not read, and the diagnosis goes on).\n\n" +
			"Verdicts and exit codes:\n" +
			"   0  healthy             kube-apiserver is ready on every node\n" +
			"  21  admission-deadlock  a webhook or policy refuses kube-apiserver's own start-up writes\n" +
			"  29  flags-refused       kube-apiserver refuses its own flags (a feature gate locked or gone, a flag\n" +
			"                          removed, a runtime-config version it no longer serves) and exits at once\n" +
			"  30  etcd-nospace        etcd is full (NOSPACE alarm) and refuses every write\n" +
			"  31  etcd-member-lost    an etcd member is down, corrupt or removed; quorum holds\n" +
			"  32  etcd-quorum-lost    too few healthy etcd members: no write goes through\n" +
			"  22  other-failure       not ready, for a known reason that is not admission\n" +
			"  23  unknown             some node could not be read, or no known signature explains it\n\n" +
			exitCodeHelp(),
		Flags: append(flags, etcdConnFlags()...),
		Action: withGlobals(func(c *cli.Context, g globalOptions) error {
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			tc, err := connectTalos(ctx, g)
			if err != nil {
				return err
			}
			defer tc.Close()

			opts := diagnose.Options{Tail: c.Int("tail"), Health: recovery.ReadyzForDiagnose(tc), Progress: progressPrinter(s.Err)}
			var ec *etcd.Client
			if c.Bool("no-etcd") {
				if c.IsSet("etcd-endpoints") {
					return failure.Input("drop one of them", "--no-etcd and --etcd-endpoints contradict each other")
				}
			} else {
				ec, err = recovery.ConnectEtcd(ctx, tc, etcdOptions(c))
				if err != nil {
					// Not fatal: the logs still name the webhook.
					opts.EtcdError = err
				} else {
					defer ec.Close()
				}
			}
			report, err := diagnose.Run(ctx, tc, ec, opts)
			if err != nil {
				return err
			}
			if g.json() {
				err = writeJSON(s.Out, report)
			} else {
				err = diagnose.WriteText(s.Out, report)
			}
			if err != nil {
				return err
			}
			return diagnoseExit(report.Verdict)
		}),
	}
}
