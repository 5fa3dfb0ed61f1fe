package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery/upgradecheck"
	"github.com/breakglass-dev/breakglass/talos"
)

// The gate before `talosctl upgrade-k8s`. Its name follows talosctl's:
// a hyphenated verb at the top (upgrade-k8s, apply-config, reset), and the
// same --to and --from as upgrade-k8s takes them ("1.35", "1.35.0",
// "v1.35.0"), so that the gate and the upgrade differ by one word in a
// runbook or a pipeline.

func init() {
	commandRegistry = append(commandRegistry, upgradeCheckCommand)
	declare("upgrade-check", commandSpec{args: takes(0, 0, "upgrade-check takes no arguments", "name the version: breakglass upgrade-check --to 1.NN"),
		outputs: []string{"text", "json", "junit", "markdown"}, talos: talosAlways})
	durationRanges["max-snapshot-age"] = [2]time.Duration{time.Minute, 90 * 24 * time.Hour}
	durationRanges["replay-timeout"] = [2]time.Duration{10 * time.Second, time.Hour}
	durationRanges["cluster-timeout"] = [2]time.Duration{10 * time.Second, 24 * time.Hour}
}

func upgradeCheckCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "upgrade-check",
		Usage: "go or no-go before talosctl upgrade-k8s: every known way the upgrade can kill kube-apiserver, checked on the live cluster",
		Description: "Reads the cluster through the Talos API and etcd only (kube-apiserver need not run) and gives one verdict\n" +
			"per check, go, warn or no-go, each with its evidence (-v) and its fix:\n" +
			upgradecheck.ChecksHelp(104) +
			"A check that could not run is a no-go. Warnings fail only with --strict.\n" +
			"Several clusters: --context a,b,c or --all-contexts (every context of the talosconfig), checked side\n" +
			"by side, a live line each on a terminal, then each cluster's checks and a summary; one that cannot\n" +
			"be reached is a no-go for it after its --connect-timeout, and keeps no other waiting.\n" +
			"Output: -o text (a table, the no-gos first), json, junit (a test suite per cluster, a test case per\n" +
			"check, a no-go a failure), markdown (for a change ticket). Read-only, but for the --snapshot file.\n" +
			"Exit 0 go (warnings allowed), 40 no-go.\n\n" + exitCodeHelp(),
		Flags: append(etcdConnFlags(),
			&cli.StringFlag{Name: "to", Usage: "the Kubernetes version to upgrade to, as talosctl upgrade-k8s --to takes it (1.33 to 1.37)"},
			&cli.StringFlag{Name: "from", Usage: "the Kubernetes version the cluster runs", DefaultText: "the lowest the control planes' kube-apiserver images name"},
			&cli.BoolFlag{Name: "all-contexts", Usage: "check every context of the talosconfig, side by side"},
			&cli.StringFlag{Name: "snapshot", Usage: "take a verified etcd snapshot now into this new file (a directory: DIR/CONTEXT/upgrade-check-TIME.snapshot; so with several clusters)"},
			&cli.StringSliceFlag{Name: "last-snapshot", Usage: "snapshot files, or directories of them, taken before: the newest is the rollback point (with several clusters: DIR/CONTEXT/)"},
			&cli.DurationFlag{Name: "max-snapshot-age", Value: upgradecheck.DefaultMaxSnapshotAge, Usage: "how old the newest snapshot named may be"},
			&cli.BoolFlag{Name: "replay", Usage: "also replay the upgrade on the lab's real binaries (breakglass-lab; about a minute a cluster, one at a time)"},
			&cli.DurationFlag{Name: "replay-timeout", Value: 90 * time.Second, Usage: "how long the replayed target may take to become ready"},
			&cli.DurationFlag{Name: "cluster-timeout", Value: 10 * time.Minute, Usage: "give up on a cluster whose checks take longer (its unread checks are no-go)"},
			&cli.StringFlag{Name: "secrets-bundle", Usage: "this cluster's secrets bundle, kept offline (talos-access: a new talosconfig can be made from it; read, never printed)"},
			&cli.StringFlag{Name: "candidate-config", Usage: "a machine config about to be applied (a regenerated config, a new contract): encryption also judges what it would render (read, never printed)"},
			&cli.BoolFlag{Name: "strict", Usage: "a warning is a no-go too"},
		),
		Action: func(c *cli.Context) error {
			opts, err := upgradeCheckOptions(c, s)
			if err != nil {
				return err
			}
			g, err := readGlobals(c)
			if err != nil {
				return err
			}
			live := newFleetLive(s)
			for i := range opts {
				opts[i].Events = live.event
			}
			fl := upgradecheck.RunFleet(c.Context, opts)
			live.done()
			if err := c.Context.Err(); err != nil {
				return err
			}
			switch g.Output {
			case "json":
				err = upgradecheck.WriteJSON(s.Out, fl)
			case "junit":
				err = upgradecheck.WriteJUnit(s.Out, fl)
			case "markdown":
				err = upgradecheck.WriteMarkdown(s.Out, fl)
			default:
				width := 0
				if f := fileOf(s.Out); f != nil && isTerminal(s.Out) {
					width = terminalWidth(f) - 1
				}
				err = upgradecheck.WriteText(s.Out, fl, upgradecheck.TextOptions{Verbose: g.Verbose, Width: width})
			}
			if err != nil {
				return err
			}
			if fl.Err() != nil {
				return failure.Reported{Category: failure.UpgradeNoGo}
			}
			return nil
		},
	}
}

// upgradeCheckOptions reads the command line into one Options per
// cluster, refusing what cannot work before anything is dialled.
func upgradeCheckOptions(c *cli.Context, s streams) ([]upgradecheck.Options, error) {
	g, err := readGlobals(c)
	if err != nil {
		return nil, err
	}
	if c.String("to") == "" {
		return nil, failure.Input("breakglass upgrade-check --to 1.NN (the version talosctl upgrade-k8s --to will name)", "upgrade-check needs the version to upgrade to")
	}
	known := fmt.Sprintf("(%s to %s)", upgradecheck.MinKnown, upgradecheck.MaxKnown)
	to, err := upgradecheck.ParseMinor(c.String("to"))
	if err != nil {
		return nil, failure.Input("give it as talosctl upgrade-k8s does: --to 1.35 or --to 1.35.0 "+known, "--to %s: %v", c.String("to"), err)
	}
	var from upgradecheck.Minor
	if c.String("from") != "" {
		if from, err = upgradecheck.ParseMinor(c.String("from")); err != nil {
			return nil, failure.Input("give it as talosctl upgrade-k8s does: --from 1.34 "+known, "--from %s: %v", c.String("from"), err)
		}
	}
	contexts := flaglist.Split(g.Context)
	snapshot := c.String("snapshot")
	if snapshot != "" && len(contexts) <= 1 && !c.Bool("all-contexts") {
		if err := checkNewFile(snapshot); err != nil {
			return nil, err
		}
	}
	if c.Bool("all-contexts") {
		if len(contexts) > 0 {
			return nil, failure.Input("give either --context a,b,c or --all-contexts", "--all-contexts and --context %s both name the clusters", g.Context)
		}
		if contexts, _, err = talos.Contexts(c.Context, g.Talosconfig); err != nil {
			return nil, err
		}
	}
	eo := etcdOptions(c)
	fleet := len(contexts) > 1
	if fleet {
		var given []string
		if len(g.Nodes) > 0 {
			given = append(given, "-n")
		}
		if len(g.Endpoints) > 0 {
			given = append(given, "-e")
		}
		if len(eo.Endpoints) > 0 || eo.Cert != "" || eo.CACert != "" {
			given = append(given, "--etcd-endpoints/--etcd-cacert/--etcd-cert")
		}
		if len(given) > 0 {
			return nil, failure.Input("each context's own nodes and endpoints are used: leave them out, or check one cluster at a time", "%s belong to one cluster, and %d clusters are checked", strings.Join(given, ", "), len(contexts))
		}
	}
	if len(contexts) == 0 {
		// The talosconfig's current context, by its name: the report, the
		// live line and the snapshot's directory say it.
		_, current, err := talos.Contexts(c.Context, g.Talosconfig)
		if err != nil {
			return nil, err
		}
		contexts = []string{current}
	}
	if fleet && len(c.StringSlice("last-snapshot")) > 0 {
		for _, p := range c.StringSlice("last-snapshot") {
			if st, err := os.Stat(p); err != nil || !st.IsDir() {
				return nil, failure.Input("with several clusters, name directories holding one directory per context: --last-snapshot DIR (DIR/CONTEXT/...)", "--last-snapshot %s is not a directory", p)
			}
		}
	}
	var candidate []byte
	if p := c.String("candidate-config"); p != "" {
		if candidate, err = os.ReadFile(p); err != nil {
			return nil, failure.Input("name a machine config file you can read: --candidate-config controlplane.yaml", "--candidate-config %s: %v", p, errors.Unwrap(err))
		}
	}
	if p := c.String("secrets-bundle"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return nil, failure.Input("name this cluster's secrets bundle: --secrets-bundle secrets.yaml (talosctl gen secrets --from-controlplane-config controlplane.yaml -o secrets.yaml makes one)", "--secrets-bundle %s: %v", p, errors.Unwrap(err))
		}
	}
	var replay upgradecheck.Replayer
	if c.Bool("replay") {
		replay = labReplayer(c.Duration("replay-timeout"))
	}
	stamp := time.Now().UTC().Format("20060102-150405")
	out := make([]upgradecheck.Options, 0, len(contexts))
	for _, ctxName := range contexts {
		t := g.talosOptions()
		t.Context = ctxName
		if fleet {
			t.Progress = nil // the live lines say it
		}
		o := upgradecheck.Options{Talos: t, Etcd: eo, From: from, To: to, MaxSnapshotAge: c.Duration("max-snapshot-age"),
			Replay: replay, ReplayTimeout: c.Duration("replay-timeout"), Strict: c.Bool("strict"), Timeout: c.Duration("cluster-timeout"),
			Candidate: candidate, CandidateName: c.String("candidate-config"), SecretsBundle: c.String("secrets-bundle")}
		if snapshot != "" {
			o.Snapshot = snapshot
			if st, err := os.Stat(snapshot); fleet || err == nil && st.IsDir() || strings.HasSuffix(snapshot, string(os.PathSeparator)) {
				name := ctxName
				if name == "" {
					name = "current-context"
				}
				dir := filepath.Join(snapshot, name)
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return nil, failure.Input("give --snapshot a directory you can write", "--snapshot %s: %v", snapshot, errors.Unwrap(err))
				}
				o.Snapshot = filepath.Join(dir, "upgrade-check-"+stamp+".snapshot")
			}
		}
		for _, p := range c.StringSlice("last-snapshot") {
			if fleet {
				p = filepath.Join(p, ctxName)
			}
			o.LastSnapshots = append(o.LastSnapshots, p)
		}
		out = append(out, o)
	}
	return out, nil
}

// checkNewFile refuses a snapshot file that exists (nothing is ever
// overwritten) or whose directory cannot take it, before anything is
// dialled; an existing directory is the place for one.
func checkNewFile(path string) error {
	const hint = "name a new file: --snapshot FILE (or a directory: --snapshot DIR/)"
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return nil
		}
		return failure.Input(hint, "--snapshot %s exists: breakglass never overwrites a file", path)
	}
	dir := filepath.Dir(path)
	if strings.HasSuffix(path, string(os.PathSeparator)) {
		dir = path
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return failure.Input(hint, "--snapshot %s: %s is not a directory", path, dir)
	} else if err == nil {
		if err := writableDir(dir); err != nil {
			return failure.Input(hint, "--snapshot %s: %v", path, err)
		}
	}
	return nil
}

// fleetLive shows, while the clusters are checked, one line per cluster:
// rewritten in place on a terminal, printed when it changes elsewhere.
type fleetLive struct {
	ui *terminalUI
}

func newFleetLive(s streams) *fleetLive {
	return &fleetLive{ui: newTerminalUI(s, globalOptions{})}
}

// event shows what one cluster is doing; its name comes from a file and
// the message may quote the cluster: both escaped.
func (l *fleetLive) event(e upgradecheck.Event) {
	who := termsafe.String(e.Cluster)
	if e.Cluster == "" {
		who = "current context"
	}
	if e.Done {
		msg := fmt.Sprintf("%s (%s, %s)", strings.ToUpper(string(e.Verdict)), countsOf(e.Report), e.Report.Elapsed.Round(100*time.Millisecond))
		l.ui.Progress(who, msg)
		return
	}
	l.ui.Progress(who, termsafe.Text(e.Message)+" …")
}

func countsOf(r *upgradecheck.Report) string {
	return fmt.Sprintf("%d no-go, %d warn", r.Count(upgradecheck.NoGo), r.Count(upgradecheck.Warn))
}

// done leaves the live lines as they last were (each cluster's verdict).
func (l *fleetLive) done() {
	l.ui.mu.Lock()
	defer l.ui.mu.Unlock()
	l.ui.freezeLocked()
}
