package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() { commandRegistry = append(commandRegistry, etcdCommand) }

// etcdFlags are etcdctl's connection flags, prefixed as in issue 3.
type etcdFlags struct {
	Endpoints         []string
	CACert, Cert, Key string
	Prefix            string
}

func etcdConnFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "etcd-endpoints", EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Usage: "etcd client URLs (default: https://NODE:2379 for the target nodes); http:// for an etcd without TLS"},
		&cli.StringFlag{Name: "etcd-cacert", EnvVars: []string{"ETCDCTL_CACERT"}, Usage: "etcd CA certificate file (etcdctl --cacert)"},
		&cli.StringFlag{Name: "etcd-cert", EnvVars: []string{"ETCDCTL_CERT"}, Usage: "etcd client certificate file (etcdctl --cert); without it one is minted from the Talos etcd CA, in memory, for one hour"},
		&cli.StringFlag{Name: "etcd-key", EnvVars: []string{"ETCDCTL_KEY"}, Usage: "etcd client key file (etcdctl --key)"},
		&cli.StringFlag{Name: "etcd-prefix", Value: etcd.DefaultPrefix, Usage: "kube-apiserver's --etcd-prefix"},
	}
}

func kindFlag(def string) cli.Flag {
	return &cli.StringFlag{Name: "kind", Value: def, Usage: "which admission objects: " + strings.Join(kinds.Values, "|")}
}

func readEtcdFlags(c *cli.Context) etcdFlags {
	f := etcdFlags{
		Endpoints: flaglist.Split(c.StringSlice("etcd-endpoints")...),
		CACert:    c.String("etcd-cacert"), Cert: c.String("etcd-cert"), Key: c.String("etcd-key"),
		Prefix: c.String("etcd-prefix"),
	}
	return f
}

func plainHTTP(endpoints []string) bool {
	if len(endpoints) == 0 {
		return false
	}
	for _, e := range endpoints {
		if !strings.HasPrefix(e, "http://") {
			return false
		}
	}
	return true
}

// needsTalos mirrors recovery.ConnectEtcd: explicit certificates with
// endpoints, or plain http:// endpoints, need no Talos access at all.
func (f etcdFlags) needsTalos() bool {
	if len(f.Endpoints) == 0 {
		return true
	}
	return !f.hasClientCert() && !plainHTTP(f.Endpoints)
}

func (f etcdFlags) hasClientCert() bool { return f.Cert != "" && f.Key != "" }

// withNodes gives a client certificate without --etcd-endpoints the target
// nodes' https://NODE:2379, as recovery.ConnectEtcd would from the Talos
// client's nodes: with -n, no talosconfig is needed for them.
func (f etcdFlags) withNodes(nodes []string) etcdFlags {
	if len(f.Endpoints) == 0 && f.hasClientCert() {
		for _, n := range nodes {
			f.Endpoints = append(f.Endpoints, "https://"+net.JoinHostPort(n, "2379"))
		}
	}
	return f
}

// connectEtcd connects with the given certificates, or mints a one-hour
// client certificate in memory from the etcd CA read through the Talos API
// (os:admin), with https://NODE:2379 as default endpoints.
func connectEtcd(ctx context.Context, g globalOptions, f etcdFlags) (*etcd.Client, error) {
	f = f.withNodes(g.Nodes)
	tc, err := talosForEtcd(ctx, g, f)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		defer tc.Close()
	}
	return recovery.ConnectEtcd(ctx, tc, f.options())
}

// talosForEtcd opens the Talos client when reaching etcd needs one (to mint
// a client certificate, or for the nodes' endpoints), nil otherwise. When
// etcd flags were given that are not enough without a talosconfig, and it
// cannot be read, the error says which etcd flags are missing: the
// operator meant to reach etcd directly.
func talosForEtcd(ctx context.Context, g globalOptions, f etcdFlags) (*talos.Client, error) {
	if !f.needsTalos() {
		return nil, nil
	}
	tc, err := connectTalos(ctx, g)
	if err == nil {
		return tc, nil
	}
	given := f.given()
	if len(given) == 0 || failure.Code(err) != int(failure.BadInput) {
		return nil, err // no etcd flags: the talosconfig is the way, and its error says what is wrong
	}
	// With -n the endpoints are the nodes' (withNodes); only the
	// certificate then needs the talosconfig.
	var missing, give, how []string
	if len(f.Endpoints) == 0 && len(g.Nodes) == 0 {
		missing, give = append(missing, "--etcd-endpoints"), append(give, "--etcd-endpoints https://HOST:2379")
		how = append(how, "at https://NODE:2379 of the talosconfig's nodes")
	}
	if !f.hasClientCert() {
		if f.CACert == "" {
			missing, give = append(missing, "--etcd-cacert"), append(give, "--etcd-cacert FILE")
		}
		missing, give = append(missing, "--etcd-cert", "--etcd-key"), append(give, "--etcd-cert FILE", "--etcd-key FILE")
		how = append(how, "with a client certificate minted from the Talos etcd CA")
	}
	them := "them"
	if len(missing) == 1 {
		them = "it"
	}
	hint := "to reach etcd directly, give " + strings.Join(give, " ") + " (etcdctl's names)"
	if len(missing) == 1 { // only the endpoints: the nodes will do
		hint += ", or the control-plane nodes with -n NODE"
	}
	return nil, failure.Input(hint+"; or a talosconfig it can read: --talosconfig PATH", "%s given, but not %s: without %s breakglass reaches etcd %s, and %v", joinFlags(given), joinFlags(missing), them, strings.Join(how, ", "), err)
}

// given are the etcd connection flags set (on the command line or as ETCDCTL_*).
func (f etcdFlags) given() []string {
	var out []string
	for _, x := range []struct {
		name string
		set  bool
	}{{"--etcd-endpoints", len(f.Endpoints) > 0}, {"--etcd-cacert", f.CACert != ""}, {"--etcd-cert", f.Cert != ""}, {"--etcd-key", f.Key != ""}} {
		if x.set {
			out = append(out, x.name)
		}
	}
	return out
}

// joinFlags is "--a", "--a and --b", "--a, --b and --c".
func joinFlags(flags []string) string {
	if len(flags) <= 1 {
		return strings.Join(flags, "")
	}
	return strings.Join(flags[:len(flags)-1], ", ") + " and " + flags[len(flags)-1]
}

func (f etcdFlags) options() recovery.EtcdOptions {
	return recovery.EtcdOptions{Endpoints: f.Endpoints, CACert: f.CACert, Cert: f.Cert, Key: f.Key, Prefix: f.Prefix}
}

func etcdCommand(s streams) *cli.Command {
	withConn := func(flags ...cli.Flag) []cli.Flag { return append(etcdConnFlags(), flags...) }
	return &cli.Command{
		Name:  "etcd",
		Usage: "find, back up, delete and restore admission objects straight in etcd (no API server needed)",
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
						out := c.String("out")
						if out == "" {
							dir, err := etcdStateDir(ctx, g, ec, "backups")
							if err != nil {
								return err
							}
							out = filepath.Join(dir, "etcd-backup-"+time.Now().UTC().Format("20060102T150405Z")+".json")
						}
						res, err := ec.BackupObjects(ctx, c.Args().Slice(), selected, out, version, effects(g, nil).EtcdWriter(ec))
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
		},
	}
}

// withEtcd reads the flags, connects, runs fn and closes.
func withEtcd(c *cli.Context, fn func(context.Context, globalOptions, *etcd.Client) error) error {
	g, err := readGlobals(c)
	if err != nil {
		return err
	}
	ec, err := connectEtcd(c.Context, g, readEtcdFlags(c))
	if err != nil {
		return err
	}
	defer ec.Close()
	return fn(c.Context, g, ec)
}

// etcdStateDir is STATE-DIR/etcd/CLUSTER-ID/SUB: records are per etcd cluster.
func etcdStateDir(ctx context.Context, g globalOptions, ec *etcd.Client, sub string) (string, error) {
	info, err := ec.Cluster(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(g.StateDir, "etcd", info.ClusterID.String(), sub), nil
}

// withEtcdChange runs a change of etcd through the engine: with a Talos
// connection only when the etcd flags need one (to mint a certificate).
func withEtcdChange(c *cli.Context, s streams, change recovery.EtcdChange,
	run func(context.Context, *talos.Client, recovery.State, recovery.Effects, recovery.UI, recovery.EtcdChange) (*recovery.RecoverResult, error)) (globalOptions, *recovery.RecoverResult, error) {
	g, err := readGlobals(c)
	if err != nil {
		return g, nil, err
	}
	f := readEtcdFlags(c).withNodes(g.Nodes)
	tc, err := talosForEtcd(c.Context, g, f)
	if err != nil {
		return g, nil, err
	}
	if tc != nil {
		defer tc.Close()
	}
	change.Etcd, change.ToolVersion, change.CommandLine = f.options(), version, typedCommand(c, tc)
	res, err := run(c.Context, tc, recovery.State{Dir: g.StateDir}, effects(g, tc), newChangeUI(s, g), change)
	if res != nil {
		fmt.Fprintf(s.Err, "journal: breakglass journal show %s\n", res.Incident)
	}
	return g, res, withIncident(err, res)
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
	out, ran := recovery.Outcome[*recovery.DeleteResult](res)
	switch {
	case !ran || out.Outcome == nil:
	case g.json():
		if werr := writeJSON(s.Out, out.Outcome); werr != nil {
			return werr
		}
	default:
		renderDeleteResult(s.Out, out.Outcome, err)
	}
	return err
}

func renderDeleteResult(w io.Writer, res *etcd.DeleteResult, err error) {
	if res.Snapshot != nil {
		if res.DryRun {
			fmt.Fprintf(w, "would save snapshot %s\n", res.Snapshot.Path)
		} else {
			fmt.Fprintf(w, "snapshot %s (%d bytes, sha256 %s) verified\n", res.Snapshot.Path, res.Snapshot.Size, res.Snapshot.SHA256)
		}
	}
	if res.Backup != nil {
		if res.DryRun {
			fmt.Fprintf(w, "would write backup %s\n", res.BackupPath)
		} else {
			fmt.Fprintf(w, "backup %s written and verified\n", res.BackupPath)
		}
	}
	for _, k := range res.Deleted {
		if res.DryRun {
			fmt.Fprintf(w, "would delete %s (guard holds now)\n", safeName(k))
		} else {
			fmt.Fprintf(w, "deleted %s\n", safeName(k))
		}
	}
	switch {
	case err != nil:
	case res.DryRun:
		fmt.Fprintln(w, "Dry run: nothing was written.")
	default:
		if res.RecordPath != "" {
			fmt.Fprintf(w, "recorded in %s\n", res.RecordPath)
		}
		fmt.Fprintf(w, "Undo with: breakglass etcd restore %s\n", res.BackupPath)
	}
}

func runEtcdRestore(c *cli.Context, s streams, path string) error {
	if err := checkBackupFile(path); err != nil {
		return err
	}
	g, res, err := withEtcdChange(c, s, recovery.EtcdChange{File: path, ForceCluster: c.Bool("force-cluster")}, recovery.RestoreBackup)
	if res == nil {
		return err
	}
	out, ran := recovery.Outcome[*recovery.RestoreResult](res)
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
			return werr
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
	ctx := c.Context
	f := readEtcdFlags(c)
	out := c.String("out")
	var info *etcd.SnapshotInfo
	source := ""
	if len(f.Endpoints) > 0 || f.Cert != "" {
		// Straight from etcd.
		ec, err := connectEtcd(ctx, g, f)
		if err != nil {
			return err
		}
		defer ec.Close()
		source = "etcd " + strings.Join(ec.Endpoints(), ",")
		if info, err = ec.Snapshot(ctx, out, effects(g, nil).EtcdWriter(ec)); err != nil {
			return err
		}
	} else {
		// Through the Talos API: os:operator is enough, no etcd certificate needed.
		tc, err := connectTalos(ctx, g)
		if err != nil {
			return err
		}
		defer tc.Close()
		nodes := tc.Nodes()
		if len(nodes) == 0 {
			return failure.Input("-n NODE", "no target node for the snapshot")
		}
		source = "the Talos API on node " + nodes[0]
		w := effects(g, nil).EtcdWriter(nil)
		if w.DryRun() {
			// The stream is not even opened.
			info, err = etcd.WriteSnapshot(strings.NewReader(""), out, w)
		} else {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(tc.EtcdSnapshot(ctx, nodes[0], pw)) }()
			info, err = etcd.WriteSnapshot(pr, out, w)
			pr.Close()
		}
		if err != nil {
			return err
		}
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

func renderListing(w io.Writer, l *etcd.Listing) {
	fmt.Fprintf(w, "etcd cluster %s, member %s, revision %d, prefix %s: %d admission object(s)\n", l.Cluster.ClusterID, l.Cluster.MemberID, l.Cluster.Revision, l.Prefix, len(l.Objects))
	for _, o := range l.Objects {
		fmt.Fprintf(w, "\n%s %s\n", o.Kind, safeName(o.Name))
		fmt.Fprintf(w, "  key %s, mod revision %d, version %d, %s\n", safeName(o.Key), o.ModRevision, o.Version, recovery.EncodingNote(o))
		if n := recovery.KeyNote(o); n != "" {
			fmt.Fprintf(w, "  %s\n", n)
		}
		for _, wh := range o.Webhooks {
			fmt.Fprintf(w, "  webhook %s\n", safeName(wh.Name))
			fmt.Fprintf(w, "    failurePolicy %s, timeout %ds, %s\n", wh.FailurePolicy, wh.TimeoutSeconds, safeName(wh.Target()))
			for _, r := range wh.Rules {
				scope := "*"
				if r.Scope != nil {
					scope = string(*r.Scope)
				}
				ops := make([]string, len(r.Operations))
				for i, op := range r.Operations {
					ops[i] = string(op)
				}
				fmt.Fprintf(w, "    rule %s groups=%s versions=%s resources=%s scope=%s\n", strings.Join(ops, ","),
					recovery.ListOrNone(r.APIGroups), recovery.ListOrNone(r.APIVersions), recovery.ListOrNone(r.Resources), scope)
			}
			fmt.Fprintf(w, "    namespaceSelector %s, objectSelector %s\n", selector(wh.NamespaceSelector), selector(wh.ObjectSelector))
			for _, mc := range wh.MatchConditions {
				fmt.Fprintf(w, "    matchCondition %s: %s\n", safeName(mc.Name), safeName(mc.Expression))
			}
			if len(wh.MatchConditions) == 0 {
				fmt.Fprintln(w, "    no matchConditions")
			}
		}
		if p := o.Policy; p != nil {
			if p.PolicyName != "" {
				fmt.Fprintf(w, "  binds policy %s", safeName(p.PolicyName))
				if len(p.ValidationActions) > 0 {
					fmt.Fprintf(w, ", actions %s", strings.Join(p.ValidationActions, ","))
				}
				fmt.Fprintln(w)
			} else {
				fmt.Fprintf(w, "  failurePolicy %s, %d validation(s), %d mutation(s), %d matchCondition(s)\n", p.FailurePolicy, p.Validations, p.Mutations, len(p.MatchConditions))
			}
			if m := p.MatchConstraints; m != nil {
				for _, r := range m.ResourceRules {
					fmt.Fprintf(w, "    matches groups=%s resources=%s\n", recovery.ListOrNone(r.APIGroups), recovery.ListOrNone(r.Resources))
				}
			}
		}
	}
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
