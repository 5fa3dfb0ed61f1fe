package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() {
	commandRegistry = append(commandRegistry, recoverCommand, resumeCommand, revertCommand, journalCommand, lockCommand)
	const listThem = "list them with: breakglass journal list"
	declare("recover", commandSpec{args: takes(0, 0, "recover takes no arguments", "a runbook is named with --runbook NAME|FILE, objects to remove with --delete NAME"),
		state: stateWrite, journaled: true, talos: talosAlways})
	for _, verb := range []string{"resume", "revert"} {
		declare(verb, commandSpec{args: takes(0, 1, verb+" takes at most one incident ID", listThem), state: stateWrite, journaled: true, talos: talosAlways})
	}
	declare("journal list", commandSpec{args: takes(0, 0, "journal list takes no arguments", "show one with: breakglass journal show ID"), state: stateRead})
	declare("journal close", commandSpec{args: takes(0, 1, "journal close takes at most one incident ID", listThem), state: stateWrite})
	for _, sub := range []string{"show", "timeline"} {
		declare("journal "+sub, commandSpec{args: takes(0, 1, "journal "+sub+" takes at most one incident ID", listThem), state: stateRead})
	}
	declare("lock status", commandSpec{args: takes(0, 0, "lock status takes no arguments", "breakglass lock status"), talos: talosForEtcd})
	declare("lock break", commandSpec{args: takes(0, 0, "lock break takes no arguments", "see who holds it: breakglass lock status"),
		journaled: true, talos: talosForEtcd})
}

func recoverCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:      "recover",
		Usage:     "the whole incident in one guided command (runbook webhook-deadlock by default)",
		ArgsUsage: " ",
		Description: "Runs a runbook step by step: preflight (Talos reachable, role, control planes, the cluster lock),\n" +
			"a short diagnosis, disable the admission plugins, wait for the API server, optionally remove the\n" +
			"named webhook configurations from etcd (verified backup and snapshot first), wait for the\n" +
			"webhook's backend, restore the plugins exactly, verify. Each step says what it does and why\n" +
			"before it runs, asks before changing anything (removing an object asks to type its name), and is\n" +
			"written to the incident journal before and after. --dry-run walks the whole runbook changing\n" +
			"nothing, with the nodes' own dry runs: the rehearsal on staging. An interrupted run continues\n" +
			"with: breakglass resume.\n" +
			"When the diagnosis finds kube-apiserver refusing its own flags (verdict flags-refused: a feature gate\n" +
			"locked or gone, a flag removed, a runtime-config version it no longer serves), the run follows runbook\n" +
			"apiserver-flags instead: it takes exactly those flags out of cluster.apiServer.extraArgs on every control\n" +
			"plane (shown, asked, no reboot), waits for /readyz, and says where else to make the change so that it\n" +
			"stays; breakglass revert puts the old values back.\n\n" + exitCodeHelp(),
		Flags: recoverFlags(),
		Action: func(c *cli.Context) error {
			return runRecover(c, s)
		},
	}
}

func recoverFlags() []cli.Flag {
	return append(etcdConnFlags(),
		&cli.StringFlag{Name: "runbook", Value: "webhook-deadlock", Usage: "a built-in runbook name, or a runbook file"},
		&cli.StringSliceFlag{Name: "delete", Usage: "remove these admission objects from etcd after a verified backup: webhook configurations, policies or bindings, found by name"},
		&cli.StringFlag{Name: "kind", Usage: "the kind of the --delete objects, when a name is held by more than one: " + strings.Join(kinds.Values, "|")},
		&cli.StringSliceFlag{Name: "plugins", Usage: "admission plugins to disable (default: those the diagnosis names, at least the runbook's)"},
		&cli.DurationFlag{Name: "revert-after", Usage: "disable in Talos try mode: the nodes revert by themselves after this long"},
		&cli.BoolFlag{Name: "keep-disabled", Usage: "stop before putting the plugins back (restore later with: breakglass admission restore)"},
		&cli.StringSliceFlag{Name: "nodes-gone", Usage: "control planes gone for good (replaced without talosctl etcd leave), left out of -n: checked not to answer; their etcd members are removed"},
		&cli.StringFlag{Name: "secrets-bundle", Usage: "this cluster's Talos secrets bundle (encryption-drift: where a key no control plane's machine config holds may be found; read when needed, never printed or kept)"},
		&cli.BoolFlag{Name: "remove-unreadable", Usage: "encryption-drift, the last resort: back up (verified) and remove from etcd the encrypted values no key breakglass can find decrypts, each listed with what it is; revert --objects puts them back"},
		noKubeletRestartFlag(),
		allowPendingFlag(),
	)
}

func runRecover(c *cli.Context, s streams) error {
	if _, err := readGlobals(c); err != nil {
		return err
	}
	if err := checkDurations(c); err != nil {
		return err
	}
	name, steps, err := guidedSteps(c)
	if err != nil {
		return err
	}
	opts := recovery.RecoverOptions{Runbook: name, Steps: steps, KeepDisabled: c.Bool("keep-disabled"),
		PluginsExplicit: c.IsSet("plugins"), RunbookExplicit: c.IsSet("runbook"),
		Delete: flaglist.Split(c.StringSlice("delete")...), DeleteKind: c.String("kind"),
		AllowPendingChange: c.Bool("allow-pending-change"), NoKubeletRestart: c.Bool("no-kubelet-restart"), Etcd: etcdOptions(c), ToolVersion: version, Command: "recover",
		NodesGone: unique(flaglist.Split(c.StringSlice("nodes-gone")...)), SecretsBundle: c.String("secrets-bundle"),
		RemoveUnreadable: c.Bool("remove-unreadable")}
	return runGuided(c, s, func(g globalOptions, ui recovery.UI, tc *talos.Client) (*recovery.RecoverResult, error) {
		opts.CommandLine = typedCommand(c, tc)
		return recovery.Recover(c.Context, tc, recovery.State{Dir: g.StateDir}, effects(g, tc), ui, opts)
	})
}

func resumeCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "continue an interrupted incident from its last completed step",
		ArgsUsage: "[INCIDENT-ID]",
		Description: "Reads the incident journal (with no ID: the newest unfinished incident; where it changed nothing\n" +
			"and an older unfinished one did, both are named and the ID is asked for) and runs the steps that\n" +
			"did not complete, with the options the incident was started with, on the nodes it recorded, after\n" +
			"checking they are the same cluster (its name, etcd's cluster ID): another -n or --context is\n" +
			"refused unless --nodes-gone names the recorded nodes that are gone. Steps are idempotent: a\n" +
			"step that had already taken effect notices it. --dry-run reads the journal and writes nothing,\n" +
			"not even the journal; an incident that was a dry run is never resumed for real.\n\n" + exitCodeHelp(),
		Flags: []cli.Flag{nodesGoneFlag()},
		Action: func(c *cli.Context) error {
			if err := checkIncident(c, true); err != nil {
				return err
			}
			return runGuided(c, s, func(g globalOptions, ui recovery.UI, tc *talos.Client) (*recovery.RecoverResult, error) {
				return recovery.Resume(c.Context, tc, recovery.State{Dir: g.StateDir}, effects(g, tc), ui, incidentOptions(c, g))
			})
		},
	}
}

func revertCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:      "revert",
		Usage:     "undo what an incident changed: the admission flag, the extraArgs it took out, and removed objects when asked",
		ArgsUsage: "[INCIDENT-ID]",
		Description: "Puts disable/enable-admission-plugins back to the recorded values on the incident's nodes (the\n" +
			"same checks of cluster and nodes as resume), and the cluster.apiServer.extraArgs an apiserver-flags\n" +
			"run took out (byte-identical when nothing else changed; kube-apiserver refused them, so it will\n" +
			"crash-loop again). With --objects, also restores the objects the\n" +
			"incident removed from etcd, from every verified backup it wrote, creating only keys that are\n" +
			"absent. Idempotent. --dry-run reads the journal and writes nothing.\n\n" + exitCodeHelp(),
		Flags: append(etcdConnFlags(), nodesGoneFlag(),
			&cli.BoolFlag{Name: "objects", Usage: "also restore the objects the incident removed from etcd"}),
		Action: func(c *cli.Context) error {
			if err := checkIncident(c, false); err != nil {
				return err
			}
			return runGuided(c, s, func(g globalOptions, ui recovery.UI, tc *talos.Client) (*recovery.RecoverResult, error) {
				return recovery.Revert(c.Context, tc, recovery.State{Dir: g.StateDir}, effects(g, tc), ui, incidentOptions(c, g))
			})
		},
	}
}

func nodesGoneFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "nodes-gone", Usage: "the incident's recorded nodes that are gone for good: left out, and said so"}
}

// incidentOptions are resume's and revert's: the incident, and what the
// command line says of its cluster.
func incidentOptions(c *cli.Context, g globalOptions) recovery.IncidentOptions {
	return recovery.IncidentOptions{ID: c.Args().First(), Nodes: g.Nodes, Context: g.Context, NodesGone: unique(flaglist.Split(c.StringSlice("nodes-gone")...)),
		Objects: c.Bool("objects"), Etcd: etcdOptions(c), ToolVersion: version}
}

// typedCommand is the command line as typed, without --dry-run, and with
// the nodes when it named none: what a dry run says to run for real.
func typedCommand(c *cli.Context, tc *talos.Client) string {
	args, _ := c.App.Metadata[argsKey].([]string)
	out := []string{"breakglass"}
	nodes := false
	for _, a := range args[min(1, len(args)):] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case strings.HasPrefix(a, "-") && name == "dry-run":
			continue
		case strings.HasPrefix(a, "-") && (name == "n" || name == "nodes"):
			nodes = true
		}
		out = append(out, recovery.ShellWord(a))
	}
	if !nodes && len(tc.Nodes()) > 0 {
		out = append(out, "-n", recovery.ShellWord(strings.Join(tc.Nodes(), ",")))
	}
	return strings.Join(out, " ")
}

// checkIncident refuses a damaged incident before anything is dialled.
func checkIncident(c *cli.Context, resume bool) error {
	g, err := readGlobals(c)
	if err != nil {
		return err
	}
	return recovery.State{Dir: g.StateDir}.CheckIncident(c.Args().First(), resume)
}

func journalCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "journal",
		Usage: "the incident journals: list, show, timeline",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the incidents in the state directory",
				Action: withGlobals(func(c *cli.Context, g globalOptions) error {
					list, err := recovery.State{Dir: g.StateDir}.Incidents()
					if err != nil {
						return err
					}
					if g.json() {
						return writeJSON(s.Out, map[string]any{"incidents": list})
					}
					for _, i := range list {
						if i.State == "damaged" {
							fmt.Fprintf(s.Out, "%s  %-11s %s\n", i.ID, i.State, termsafe.String(i.Damage))
							continue
						}
						last := i.LastStep
						if last == "" {
							last = "-"
						}
						dry := ""
						if i.DryRun {
							dry = " (dry run)"
						}
						fmt.Fprintf(s.Out, "%s  %-11s %-18s %s by %s, last step %s%s\n", i.ID, i.State, i.Runbook, i.Started.Local().Format(time.RFC3339), i.By, last, dry)
					}
					if len(list) == 0 {
						fmt.Fprintln(s.Out, "no incident yet")
					}
					return nil
				}),
			},
			{
				Name:      "show",
				Usage:     "print an incident's journal records (the newest incident by default)",
				ArgsUsage: "[INCIDENT-ID]",
				Action: func(c *cli.Context) error {
					g, entries, err := readIncident(c)
					var damage *recovery.JournalDamageError
					if errors.As(err, &damage) {
						err = damage.Shown(len(entries)) // after the records it could read
					}
					if len(entries) == 0 {
						return err
					}
					// A damaged journal: its readable records, then what is wrong.
					if g.json() {
						if werr := writeJSON(s.Out, map[string]any{"incident": entries[0].Meta, "entries": entries}); werr != nil {
							return either(err, werr)
						}
						return err
					}
					for _, e := range entries {
						line := fmt.Sprintf("%s  %-8s %-18s %-8s %s", e.Time.Local().Format("15:04:05.000"), e.Kind, e.Step, e.Outcome, e.Message)
						if e.Error != "" {
							line += " error: " + e.Error
						}
						fmt.Fprintln(s.Out, termsafe.String(line))
					}
					return err
				},
			},
			{
				Name:      "close",
				Usage:     "end an incident that will not be resumed (another run recovered the cluster, or a new incident takes over)",
				ArgsUsage: "[INCIDENT-ID]",
				Description: "Ends the incident's journal with a record of who closed it and why; resume refuses it from then on.\n" +
					"Nothing on the cluster changes, and what the incident changed stays (its journal says what). For an\n" +
					"incident another operator's run superseded (breakglass diagnose shows the cluster recovered), or one\n" +
					"whose plan the world moved under: close it, then start afresh with breakglass recover. Asks first\n" +
					"(--yes answers); --dry-run says what it would do. Refused for an incident that ended, or that a\n" +
					"breakglass process runs now.\n\n" + exitCodeHelp(),
				Flags: []cli.Flag{&cli.StringFlag{Name: "why", Value: "superseded", Usage: "why it is closed, for the journal"}},
				Action: withGlobals(func(c *cli.Context, g globalOptions) error {
					st := recovery.State{Dir: g.StateDir}
					closing, err := st.PlanClose(c.Args().First(), c.String("why"))
					if err != nil {
						return err
					}
					fmt.Fprint(s.Err, closing.Plan())
					if !g.DryRun {
						q := recovery.Question{Text: "close incident " + closing.Incident + "?"}
						if err := newConfirmer(s, g.Yes).Confirm(c.Context, q); err != nil {
							return err
						}
						if err := st.Close(closing); err != nil {
							return err
						}
					}
					if g.json() {
						return writeJSON(s.Out, closing)
					}
					if closing.Closed {
						fmt.Fprintf(s.Out, "incident %s closed (%s)\n", closing.Incident, termsafe.String(closing.Why))
					} else {
						fmt.Fprintln(s.Out, "Dry run: nothing was closed.")
					}
					return nil
				}),
			},
			{
				Name:      "timeline",
				Usage:     "the incident's steps with times and durations, for the postmortem",
				ArgsUsage: "[INCIDENT-ID]",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "format", Value: "text", Usage: "text or markdown"}},
				Action: func(c *cli.Context) error {
					g, entries, err := readIncident(c)
					if err != nil {
						return err
					}
					meta, rows := recovery.Timeline(entries)
					if g.json() {
						return writeJSON(s.Out, map[string]any{"incident": meta, "timeline": rows})
					}
					switch c.String("format") {
					case "text", "markdown":
					default:
						return failure.Input("use --format text or --format markdown", "unknown format %s", c.String("format"))
					}
					renderTimeline(s.Out, meta, rows, c.String("format") == "markdown")
					return nil
				},
			},
		},
	}
}

// readIncident reads the journal of the incident named by the first
// argument (the newest when none is named).
func readIncident(c *cli.Context) (globalOptions, []recovery.Entry, error) {
	g, err := readGlobals(c)
	if err != nil {
		return g, nil, err
	}
	_, entries, err := recovery.State{Dir: g.StateDir}.ReadIncident(c.Args().First())
	return g, entries, err
}

func lockCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "lock",
		Usage: "the cluster lock that keeps two breakglass runs apart",
		Subcommands: []*cli.Command{
			{
				Name:  "status",
				Usage: "say who holds the cluster lock",
				Flags: etcdConnFlags(),
				Action: func(c *cli.Context) error {
					return withLockHolder(c, func(g globalOptions, h *etcd.LockHolder, unreadable *etcd.UnreadableLockError) error {
						if g.json() {
							if unreadable != nil {
								return writeJSON(s.Out, map[string]any{"holder": nil, "unreadable": string(unreadable.Raw)})
							}
							return writeJSON(s.Out, map[string]any{"holder": h})
						}
						switch {
						case unreadable != nil:
							fmt.Fprintf(s.Out, "held, by a value breakglass cannot read: %s\n", unreadable.Shown())
							fmt.Fprintln(s.Out, "if no breakglass run holds it, break it: breakglass lock break")
						case h == nil:
							fmt.Fprintln(s.Out, "the cluster lock is free")
						default:
							fmt.Fprintf(s.Out, "held by %s\n", recovery.HolderText(h))
						}
						return nil
					})
				},
			},
			{
				Name:  "break",
				Usage: "remove the cluster lock whoever holds it (when its holder is gone)",
				Flags: etcdConnFlags(),
				Action: func(c *cli.Context) error {
					g, res, err := withEtcdChange(c, s, recovery.EtcdChange{}, recovery.BreakClusterLock)
					if res == nil {
						return err
					}
					out, ran := recovery.ResultOf[*recovery.LockBreakResult](res)
					switch {
					case !ran:
					case g.json():
						if werr := writeJSON(s.Out, out); werr != nil {
							return either(err, werr)
						}
					case out.Broken || out.Holder == nil && out.Unreadable == "":
						fmt.Fprintln(s.Out, out.Message())
					case g.DryRun:
						fmt.Fprintln(s.Out, "Dry run: the lock was not broken.")
					}
					return err
				},
			},
		},
	}
}

// withLockHolder connects to etcd and reads who holds the cluster lock, or
// the value there when breakglass cannot read it.
func withLockHolder(c *cli.Context, fn func(globalOptions, *etcd.LockHolder, *etcd.UnreadableLockError) error) error {
	return withEtcd(c, func(ctx context.Context, g globalOptions, ec *etcd.Client) error {
		h, err := ec.ReadLock(ctx)
		var unreadable *etcd.UnreadableLockError
		if errors.As(err, &unreadable) {
			return fn(g, nil, unreadable)
		}
		if err != nil {
			return err
		}
		return fn(g, h, nil)
	})
}
