package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/cli"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() {
	commandRegistry = append(commandRegistry, auditCommand)
	declare("audit", commandSpec{args: takes(0, 0, "audit takes no arguments", "name the files to audit with -f: breakglass audit -f ARG")})
}

func auditCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "find webhooks and admission policies that can block kube-apiserver's own start-up writes, and generate the fix",
		Description: "Models the writes kube-apiserver makes at start (the default ServiceCIDR, IPAddresses, RBAC\n" +
			"bootstrap roles, APF objects, APIServices, ...) as the admission requests it really sends (user\n" +
			"system:apiserver), and applies Kubernetes' matching rules to every validating and mutating webhook:\n" +
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
			"with -f, or read from the -n nodes through the Talos API (os:admin). Each flag, feature gate and\n" +
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
		Action: func(c *cli.Context) error {
			g, err := readGlobals(c)
			if err != nil {
				return err
			}
			in, err := auditInputs(c, s, g)
			if err != nil {
				return err
			}
			opts := audit.Options{FromVersion: c.String("from"), ToVersion: c.String("to"), KubernetesVersion: c.String("k8s-version"),
				SlowTimeout: c.Duration("slow-timeout"), Unreadable: in.unreadable, ExtraArgs: in.extraArgs}
			if err := defaultAuditVersions(&opts, in.running, s.Err); err != nil {
				return err
			}
			cfgs := in.cfgs
			if c.Bool("fix") {
				if !audit.HasAdmissionObjects(cfgs) {
					return failure.Input("the flags' fixes are in the report: breakglass audit without --fix", "--fix changes webhooks and policies, and none was given")
				}
				return runAuditFix(c, s, cfgs, opts)
			}
			report, err := audit.AuditContext(c.Context, cfgs, opts)
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
		},
	}
}

// auditInput is what the audit reads: the objects, those it cannot read,
// and the version a live cluster runs (with where that was learned).
type auditInput struct {
	cfgs       []audit.Configuration
	unreadable []audit.Unreadable
	extraArgs  []audit.ExtraArgs // cluster.apiServer.extraArgs of the machine configs read
	running    runningVersion
}

type runningVersion struct{ version, evidence string }

// defaultAuditVersions fills the upgrade in when the flags leave it out:
// a live cluster's running minor to the next one (a restart of the newest
// modelled), and says so; files keep the incident's 1.32 -> 1.34.
func defaultAuditVersions(opts *audit.Options, running runningVersion, w io.Writer) error {
	if opts.FromVersion != "" || running.evidence == "" {
		return nil
	}
	if running.version == "" {
		fmt.Fprintf(w, "audit: cannot tell the version the cluster runs (%s); auditing the upgrade 1.32 -> 1.34: pass --from and --to to choose\n", running.evidence)
		return nil
	}
	from, err := audit.NormalizeVersion(running.version)
	if err != nil {
		return failure.Hinted(err, "pass the upgrade to audit: --from 1.NN --to 1.NN")
	}
	opts.FromVersion = from
	if opts.ToVersion == "" && opts.KubernetesVersion == "" {
		if opts.ToVersion, err = audit.NextVersion(from); err != nil {
			opts.ToVersion = from // the newest modelled: its restart
		}
	}
	to := opts.ToVersion
	if to == "" {
		to = opts.KubernetesVersion
	}
	fmt.Fprintf(w, "audit: the cluster runs %s (%s); auditing the start of %s on it: pass --from and --to to choose\n", running.version, running.evidence, to)
	return nil
}

// auditInputs reads the configurations from files, standard input and etcd.
func auditInputs(c *cli.Context, s streams, g globalOptions) (auditInput, error) {
	var in auditInput
	cfgs, err := auditObjects(c, s, g, &in)
	in.cfgs = cfgs
	return in, err
}

func auditObjects(c *cli.Context, s streams, g globalOptions, in *auditInput) ([]audit.Configuration, error) {
	var cfgs []audit.Configuration
	for _, f := range c.StringSlice("file") {
		data, err := command.ReadInput(c.Context, f, s.In, "pass manifests with -f FILE, or - for standard input")
		if err != nil {
			return nil, err
		}
		parsed, err := audit.ParseNamed(f, data)
		if err != nil {
			return nil, err
		}
		cfgs = append(cfgs, parsed...)
		// A Talos machine config: its kube-apiserver flags are audited too.
		switch ea, err := audit.MachineConfigArgs(f, data); {
		case err == nil:
			in.extraArgs = append(in.extraArgs, ea)
		case !errors.Is(err, audit.ErrNotMachineConfig):
			return nil, err
		}
	}
	if len(g.Nodes) > 0 && !(c.Bool("from-etcd") && etcdOptions(c).HasClientCert()) {
		// -n: the control planes' machine configs, through the Talos API
		// (with --from-etcd and etcd certificates -n names etcd's hosts only).
		if err := auditMachineConfigs(c, g, in); err != nil {
			return nil, err
		}
	}
	if path := c.String("kubeconfig"); path != "" {
		kc, err := command.ReadFile(c.Context, path, "pass a kubeconfig file: --kubeconfig FILE (talosctl kubeconfig writes one)")
		if err != nil {
			return nil, err
		}
		data, err := recovery.FetchWebhookConfigurations(c.Context, kc)
		if err != nil {
			return nil, err
		}
		in.running = runningVersion{evidence: "unknown"}
		if v, err := recovery.ServerVersion(c.Context, kc); err == nil {
			in.running = runningVersion{v, "the API server's /version"}
		} else {
			in.running.evidence = err.Error()
		}
		parsed, err := audit.ParseNamed(path, data)
		if err != nil {
			return nil, err
		}
		cfgs = append(cfgs, parsed...)
	}
	if c.Bool("from-etcd") {
		ec, err := recovery.DialEtcd(c.Context, etcdOptions(c), g.talosOptions())
		if err != nil {
			return nil, err
		}
		defer ec.Close()
		l, err := ec.List(c.Context, kinds.All)
		if err != nil {
			return nil, err
		}
		for _, o := range l.Objects {
			if o.Decoded == nil {
				reason := string(o.Encoding) + " value"
				if o.DecodeError != "" {
					reason += " (" + o.DecodeError + ")"
				}
				in.unreadable = append(in.unreadable, audit.Unreadable{Kind: o.Kind, Name: o.Name, Reason: reason})
				continue
			}
			parsed, err := audit.FromObjects(o.Decoded)
			if err != nil {
				return nil, err
			}
			cfgs = append(cfgs, parsed...)
		}
		if c.String("kubeconfig") == "" {
			v, evidence, err := recovery.EtcdClusterVersion(c.Context, ec)
			if err != nil {
				return nil, err
			}
			in.running = runningVersion{v, evidence}
		}
	}
	if !audit.HasAdmissionObjects(cfgs) && !c.Bool("from-etcd") && c.String("kubeconfig") == "" && len(in.extraArgs) == 0 {
		return nil, failure.Input("breakglass audit -f webhooks.yaml (or a Talos machine config), --from-etcd, --kubeconfig FILE, or -n CP1,CP2,CP3 for the control planes' kube-apiserver flags", "nothing to audit")
	}
	return cfgs, nil
}

// auditMachineConfigs reads each -n node's machine config through the
// Talos API (os:admin) for its cluster.apiServer.extraArgs; the image of
// the first says the version the cluster runs.
func auditMachineConfigs(c *cli.Context, g globalOptions, in *auditInput) error {
	tc, err := connectTalos(c.Context, g)
	if err != nil {
		return err
	}
	defer tc.Close()
	for _, node := range tc.Nodes() {
		mc, err := tc.ReadMachineConfig(c.Context, node)
		if err != nil {
			return err
		}
		ea, err := audit.MachineConfigArgs(node, mc.Bytes)
		if err != nil {
			return talos.NewNodeError(node, "read cluster.apiServer.extraArgs", err)
		}
		in.extraArgs = append(in.extraArgs, ea)
		if facts, err := talos.ReadFacts(mc.Bytes); err == nil && in.running.evidence == "" {
			if tag := imageTag(facts.APIServerImage); tag != "" {
				in.running = runningVersion{tag, "the kube-apiserver image in node " + node + "'s machine config"}
			}
		}
	}
	return nil
}

// imageTag is the tag of an image reference ("" without one).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
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
