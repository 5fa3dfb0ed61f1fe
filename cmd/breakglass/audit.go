package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
)

func init() {
	commandRegistry = append(commandRegistry, auditCommand)
	declare("audit", commandSpec{args: takes(0, 0, "audit takes no arguments", "name the files to audit with -f: breakglass audit -f ARG")})
}

func auditCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "find webhooks and admission policies that can block kube-apiserver's own start-up writes, and generate the fix",
		Description: "Takes the writes kube-apiserver --to makes at its first start after --from (the default ServiceCIDR,\n" +
			"IPAddresses, RBAC bootstrap roles, APF objects, APIServices, ...), as recorded from the real binaries for\n" +
			"that upgrade (every minor after the one before it, and 1.32 -> 1.34; any other pair is modelled), as the\n" +
			"admission requests it really sends (user system:apiserver), and applies Kubernetes' matching rules to\n" +
			"every validating and mutating webhook:\n" +
			"rules, scope, matchPolicy, namespace and object selectors, matchConditions (CEL). Risk per webhook:\n" +
			"deadlock (failurePolicy Fail and a fatal write matches), slow-start (Ignore with a long timeout),\n" +
			"none, or unknown (a condition that cannot be evaluated offline is never called safe).\n" +
			"ValidatingAdmissionPolicy and MutatingAdmissionPolicy are audited per binding the same way: matchConstraints,\n" +
			"the binding's matchResources, params (pass them with -f: a missing one with parameterNotFoundAction Deny\n" +
			"rejects), matchConditions, validations with validationActions (only Deny rejects; a runtime error does under\n" +
			"failurePolicy Fail), and mutations (a JSONPatch that cannot apply rejects). A policy without a binding does nothing.\n" +
			"Read-only. --fix prints the configurations with matchConditions added that keep the API server's\n" +
			"own writes away (request.userInfo.username != 'system:apiserver'), after auditing the fix itself.\n" +
			"The cluster's own kube-apiserver flags too: cluster.apiServer.extraArgs of Talos machine configs given\n" +
			"with -f, or read from the -n nodes through the Talos API (os:admin; with nothing else to audit, the\n" +
			"talosconfig context's nodes). Each flag, feature gate and\n" +
			"runtime-config entry kube-apiserver --to refuses at start (a gate locked or gone, a flag removed, an API\n" +
			"version it no longer registers) is a deadlock: it exits at once, and the kubelet restarts it with back-off.\n" +
			"Its reason is in kube-apiserver's own words, as the lab's binaries answered (one per minor), with the fix;\n" +
			"one that only warns is said too (risk warning, exit 0).\n" +
			"Exit 0 when every webhook is none; 24 deadlock, 25 unknown, 26 slow-start.\n\n" + exitCodeHelp(),
		Flags: append(etcdConnFlags(),
			&cli.StringSliceFlag{Name: "file", Aliases: []string{"f"}, Usage: "webhook configurations, admission policies, their bindings and params (YAML or JSON, many documents, Lists), or Talos machine configs (their cluster.apiServer.extraArgs); - for standard input"},
			&cli.BoolFlag{Name: "from-etcd", Usage: "read the webhook configurations and admission policies straight from etcd (works while the API server is down)"},
			&cli.StringFlag{Name: "kubeconfig", Usage: "read the webhook configurations and admission policies from a running API server with this kubeconfig"},
			&cli.StringFlag{Name: "from", Usage: "the Kubernetes version the cluster runs before the start (1.32 to 1.37)", DefaultText: "a live cluster's running version; 1.32 for files"},
			&cli.StringFlag{Name: "to", Usage: "the Kubernetes version whose start-up is audited (1.32 to 1.37; the same as --from audits a restart)", DefaultText: "the minor after --from; 1.34 for files"},
			&cli.StringFlag{Name: "k8s-version", Usage: "the former name of --to"},
			&cli.DurationFlag{Name: "slow-timeout", Value: 5 * time.Second, Usage: "a fail-open webhook matching start-up writes with at least this timeout is slow-start"},
			&cli.BoolFlag{Name: "fix", Usage: "print the fixed configurations (stdout) instead of the report; the fix's own audit goes to stderr"},
			&cli.StringFlag{Name: "fix-style", Value: string(audit.ExcludeAPIServer), Usage: "apiserver (exclude the user system:apiserver, recommended) or kinds (the incident's ServiceCIDR/IPAddress exclusions: partial)"},
			&cli.StringFlag{Name: "fix-format", Value: string(audit.FormatManifest), Usage: "manifest, json-patch or strategic-patch"},
		),
		Action: withGlobals(func(c *cli.Context, g globalOptions) error {
			// -n names etcd's hosts only when etcd is reached with its own
			// certificates; otherwise the control planes, whose machine
			// configs are read (with nothing else, the context's nodes).
			direct := c.Bool("from-etcd") && etcdOptions(c).HasClientCert()
			in := audit.Inputs{Files: c.StringSlice("file"), Kubeconfig: c.String("kubeconfig"), FromEtcd: c.Bool("from-etcd"),
				Nodes: len(g.Nodes) > 0 && !direct, ContextNodes: len(g.Nodes) == 0 && fileExists(g.Talosconfig)}
			t := g.talosOptions()
			got, err := audit.Gather(c.Context, in, recovery.AuditReaders(s.In, etcdOptions(c), &t))
			if err != nil {
				return err
			}
			opts := audit.Options{FromVersion: c.String("from"), ToVersion: c.String("to"), KubernetesVersion: c.String("k8s-version"),
				SlowTimeout: c.Duration("slow-timeout"), Unreadable: got.Unreadable, ExtraArgs: got.ExtraArgs}
			if note, err := opts.WithRunning(got.Running); err != nil {
				return err
			} else if note != "" {
				fmt.Fprintln(s.Err, note)
			}
			if c.Bool("fix") {
				if !audit.HasAdmissionObjects(got.Configurations) {
					return failure.Input("the flags' fixes are in the report: breakglass audit without --fix", "--fix changes webhooks and policies, and none was given")
				}
				return runAuditFix(c, s, got.Configurations, opts)
			}
			report, err := audit.AuditContext(c.Context, got.Configurations, opts)
			if err != nil {
				return err
			}
			if g.json() {
				err = audit.WriteJSON(s.Out, report)
			} else {
				err = audit.WriteTable(s.Out, report)
			}
			if err != nil {
				return err
			}
			return auditExit(report.Err(), s.Err)
		}),
	}
}

// fileExists tells whether path names something that exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func runAuditFix(c *cli.Context, s streams, cfgs []audit.Configuration, opts audit.Options) error {
	plan, err := audit.PlanFixContext(c.Context, cfgs, audit.FixStyle{
		Exclusion: audit.Exclusion(c.String("fix-style")),
		Format:    audit.Format(c.String("fix-format")),
		Audit:     opts,
	})
	if err != nil {
		return err
	}
	out, err := plan.Render()
	if err != nil {
		return err
	}
	if err := audit.WriteFixSummary(s.Err, plan); err != nil {
		return err
	}
	if _, err := s.Out.Write(out); err != nil {
		return err
	}
	return auditExit(plan.After.Err(), s.Err)
}

// auditExit turns the worst risk into the documented exit code; the report
// has already been printed.
func auditExit(riskErr error, w io.Writer) error {
	if riskErr == nil {
		return nil
	}
	for _, h := range failure.Hints(riskErr) {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
	return failure.Reported{Category: failure.Category(failure.Code(riskErr))}
}
