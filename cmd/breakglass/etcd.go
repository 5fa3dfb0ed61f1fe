package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery"
)

func init() {
	commandRegistry = append(commandRegistry, etcdCommand)
	declare("etcd webhooks", commandSpec{args: takes(0, 0, "etcd webhooks takes no arguments", "choose the objects with --kind "+strings.Join(kinds.Values, "|")),
		talos: talosForEtcd})
	declare("etcd backup", commandSpec{state: stateWrite, talos: talosForEtcd,
		newFile: "give --out a new file, e.g. --out ./etcd-backup.json, or leave it out for a new file in the state directory"})
	declare("etcd delete", commandSpec{state: stateWrite, journaled: true, talos: talosForEtcd, backupDir: true})
	declare("etcd restore", commandSpec{state: stateWrite, journaled: true, talos: talosForEtcd})
	declare("etcd snapshot", commandSpec{args: takes(0, 0, "etcd snapshot takes no arguments", "name the file with --out FILE"),
		required: "out", talos: talosForEtcd, newFile: "give --out a new file, e.g. --out ./etcd-snapshot.db"})
}

func kindFlag(def string) cli.Flag {
	return &cli.StringFlag{Name: "kind", Value: def, Usage: "which admission objects: " + strings.Join(kinds.Values, "|")}
}

func etcdCommand(s streams) *cli.Command {
	withConn := func(flags ...cli.Flag) []cli.Flag { return append(etcdConnFlags(), flags...) }
	return &cli.Command{
		Name:  "etcd",
		Usage: "find, back up, delete and restore admission objects straight in etcd, and see what fills it (no API server needed)",
		Subcommands: []*cli.Command{
			{
				Name:  "webhooks",
				Usage: "list every admission object in etcd, decoded",
				Description: "Lists PREFIX/RESOURCE/ for validating and mutating webhook configurations, validating and\n" +
					"mutating admission policies and their bindings (range reads of exactly those prefixes) and\n" +
					"decodes each value. Encrypted, JSON and undecodable values are listed as such, never\n" +
					"dropped. -o json gives the full objects. Read-only.\n\n" + exitCodeHelp(),
				Flags: withConn(kindFlag("all")),
				Action: func(c *cli.Context) error {
					return withEtcd(c, func(ctx context.Context, g globalOptions, ec *etcd.Client) error {
						selected, err := kinds.Parse(c.String("kind"))
						if err != nil {
							return err
						}
						l, err := ec.List(ctx, selected)
						if err != nil {
							return err
						}
						if g.json() {
							return writeJSON(s.Out, l)
						}
						renderListing(s.Out, l)
						return nil
					})
				},
			},
			{
				Name:      "backup",
				Usage:     "back up admission objects to a verified file (all of the selected kinds when no NAME)",
				ArgsUsage: "[NAME...]",
				Description: "Writes FILE.part (0600, exclusive), fsyncs, renames without overwriting, fsyncs the directory,\n" +
					"then reads the file back and checks every sha256. Never overwrites an existing file.\n" +
					"Format: etcd/BACKUP_FORMAT.md.\n\n" + exitCodeHelp(),
				Flags: withConn(kindFlag("all"),
					&cli.StringFlag{Name: "out", Usage: "backup file (default: a new file under STATE-DIR/etcd/CLUSTER-ID/backups)"}),
				Action: func(c *cli.Context) error {
					return withEtcd(c, func(ctx context.Context, g globalOptions, ec *etcd.Client) error {
						selected, err := kinds.Parse(c.String("kind"))
						if err != nil {
							return err
						}
						st := recovery.State{Dir: g.StateDir}
						res, err := st.BackupObjects(ctx, ec, effects(g, nil), c.Args().Slice(), selected, c.String("out"), version)
						if err != nil {
							return err
						}
						if g.json() {
							return writeJSON(s.Out, res)
						}
						verb := "backed up"
						if res.DryRun {
							verb = "would back up"
						}
						fmt.Fprintf(s.Out, "%s %d key(s) from etcd cluster %s at revision %d to %s\n", verb, len(res.Backup.Keys), res.Backup.ClusterID, res.Backup.Revision, res.Path)
						for _, k := range res.Backup.Keys {
							fmt.Fprintf(s.Out, "  %s (mod revision %d, sha256 %s)\n", safeName(k.Key), k.ModRevision, k.SHA256[:12])
						}
						return nil
					})
				},
			},
			{
				Name:      "delete",
				Usage:     "delete admission objects from etcd, after a verified backup, guarded by mod revision",
				ArgsUsage: "NAME...",
				Description: "Resolves each NAME by listing (never a guessed key), shows the plan and asks. Then: optional full\n" +
					"snapshot (--snapshot), the backup (written, read back, verified), and ONE transaction that\n" +
					"deletes every key only if its mod revision is still the one backed up: if anything changed\n" +
					"meanwhile, nothing is deleted (exit 6). The state directory records what was deleted and\n" +
					"where the backup is. Undo with: breakglass etcd restore BACKUP. --dry-run checks all of\n" +
					"this against the live etcd and writes nothing.\n\n" + exitCodeHelp(),
				Flags: withConn(kindFlag("all"),
					&cli.StringFlag{Name: "backup-dir", Usage: "where the backup goes (default: STATE-DIR/etcd/CLUSTER-ID/backups)"},
					&cli.BoolFlag{Name: "snapshot", Usage: "also take a full etcd snapshot into the backup directory first"}),
				Action: func(c *cli.Context) error {
					return runEtcdDelete(c, s)
				},
			},
			{
				Name:      "restore",
				Usage:     "put back the keys of a backup file that are absent (create-only, byte for byte)",
				ArgsUsage: "FILE",
				Description: "Verifies the file (format and every sha256), refuses one from another etcd cluster unless\n" +
					"--force-cluster, shows per key what would happen and asks. Each key is created only if absent\n" +
					"(a transaction on create revision 0); a key present with another value is a conflict, left\n" +
					"alone (exit 6). Idempotent: re-running reports already-present-identical.\n\n" + exitCodeHelp(),
				Flags: withConn(&cli.BoolFlag{Name: "force-cluster", Usage: "restore a backup taken from another etcd cluster ID"}),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return failure.Input("breakglass etcd restore FILE", "restore takes exactly one backup FILE")
					}
					return runEtcdRestore(c, s, c.Args().First())
				},
			},
			{
				Name:  "snapshot",
				Usage: "save a full etcd snapshot to a new file, verified",
				Description: "Straight from etcd when etcd certificates (or an http:// endpoint) are given, otherwise through\n" +
					"the Talos API (EtcdSnapshot, os:operator is enough). Written FILE.part, checked while\n" +
					"streaming (size a multiple of 512 plus a sha256 trailer that must match), renamed without\n" +
					"overwriting, read back and checked again.\n\n" + exitCodeHelp(),
				Flags: withConn(&cli.StringFlag{Name: "out", Usage: "snapshot file to create (required)"}),
				Action: func(c *cli.Context) error {
					return runEtcdSnapshot(c, s)
				},
			},
			etcdUsageCommand(s, withConn),
		},
	}
}

func runEtcdDelete(c *cli.Context, s streams) error {
	if c.NArg() == 0 {
		return failure.Input("breakglass etcd webhooks lists them", "delete needs at least one NAME")
	}
	// --kind was checked with the command line (checkFlagValues).
	change := recovery.EtcdChange{Kind: c.String("kind"), Names: c.Args().Slice(), BackupDir: c.String("backup-dir"), Snapshot: c.Bool("snapshot")}
	g, res, err := withEtcdChange(c, s, change, recovery.DeleteObjects)
	if res == nil {
		return err
	}
	out, ran := recovery.ResultOf[*recovery.DeleteResult](res)
	switch {
	case !ran || out.Outcome == nil:
	case g.json():
		if werr := writeJSON(s.Out, out.Outcome); werr != nil {
			return either(err, werr)
		}
	default:
		renderDeleteResult(s.Out, out.Outcome, err)
	}
	return err
}

func runEtcdRestore(c *cli.Context, s streams, path string) error {
	if err := checkBackupFile(path); err != nil {
		return err
	}
	g, res, err := withEtcdChange(c, s, recovery.EtcdChange{File: path, ForceCluster: c.Bool("force-cluster")}, recovery.RestoreBackup)
	if res == nil {
		return err
	}
	out, ran := recovery.ResultOf[*recovery.RestoredObjects](res)
	if !ran || len(out.Plans) == 0 {
		return err
	}
	final := out.Plans[0] // with nothing to restore, or in a dry run, the plan is the outcome
	if len(out.Restored) > 0 {
		final = out.Restored[0]
	}
	switch {
	case g.json():
		if werr := writeJSON(s.Out, final); werr != nil {
			return either(err, werr)
		}
	case len(out.Restored) > 0:
		recovery.RenderRestore(s.Out, nil, final, false)
	case g.DryRun:
		fmt.Fprintln(s.Out, "Dry run: nothing was written.")
	}
	return err
}

func runEtcdSnapshot(c *cli.Context, s streams) error {
	g, err := readGlobals(c)
	if err != nil {
		return err
	}
	info, source, err := recovery.SaveSnapshot(c.Context, etcdOptions(c), g.talosOptions(), effects(g, nil), c.String("out"))
	if err != nil {
		return err
	}
	if g.json() {
		return writeJSON(s.Out, info)
	}
	if info.DryRun {
		fmt.Fprintf(s.Out, "would save a snapshot from %s to %s\n", source, info.Path)
		return nil
	}
	fmt.Fprintf(s.Out, "snapshot from %s saved to %s: %d bytes, sha256 %s, verified\n", source, info.Path, info.Size, info.SHA256)
	return nil
}

// safeName prints text read from etcd (names, keys, expressions) so that
// it cannot drive the terminal; an empty name is shown as "".
func safeName(s string) string { return termsafe.String(s) }

// selector renders a label selector; an empty one matches everything.
func selector(s *metav1.LabelSelector) string {
	if s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0) {
		return "(everything)"
	}
	return metav1.FormatLabelSelector(s)
}
