package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/buildinfo"
	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/talos"
)

// streams are the command's input and outputs; nothing writes to the
// process's globals directly, so tests run the whole CLI in-process.
type streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// globalOptions are the flags every command understands, named as talosctl
// names them.
type globalOptions struct {
	Talosconfig string
	Context     string
	Endpoints   []string
	Nodes       []string
	Output      string
	Yes         bool
	DryRun      bool
	Verbose     bool
	StateDir    string
	// ConnectTimeout bounds each connection to a Talos API endpoint.
	ConnectTimeout time.Duration
	progress       io.Writer // where a slow connection is said: stderr, whatever -o says
}

func (o globalOptions) json() bool { return o.Output == "json" }

// version, commit and buildDate are stamped at build time (make build,
// make dist: -ldflags "-X main.version=... -X main.commit=... -X
// main.buildDate=..."); buildinfo fills in what the toolchain recorded.
var version, commit, buildDate = "dev", "", ""

func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "talosconfig", Usage: "path to the Talos client configuration", EnvVars: []string{"TALOSCONFIG"}, DefaultText: "~/.talos/config"},
		&cli.StringFlag{Name: "context", Usage: "talosconfig context to use (default: the current one)"},
		&cli.StringSliceFlag{Name: "endpoints", Aliases: []string{"e"}, Usage: "Talos API endpoints (override the talosconfig's)"},
		&cli.StringSliceFlag{Name: "nodes", Aliases: []string{"n"}, Usage: "target nodes (default: the talosconfig context's nodes)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "output format: text or json (runbook show: also yaml; upgrade-check: also junit, markdown)"},
		&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation (for automation)"},
		&cli.BoolFlag{Name: "dry-run", Usage: "show the plan (and let the nodes validate it) without changing anything"},
		&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "also show the evidence behind each diagnosis (-o json and the incident journal always keep it)"},
		&cli.StringFlag{Name: "state-dir", Usage: "where breakglass keeps its records and backups", EnvVars: []string{"BREAKGLASS_STATE_DIR"}, DefaultText: "$XDG_STATE_HOME/breakglass or ~/.local/state/breakglass"},
		&cli.DurationFlag{Name: "connect-timeout", Value: talos.DefaultConnectTimeout, Usage: "give up on a Talos API endpoint that has not connected and answered (TCP, TLS, gRPC) within this long"},
	}
}

func defaultTalosconfig() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".talos", "config")
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "breakglass")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".breakglass"
	}
	return filepath.Join(home, ".local", "state", "breakglass")
}

// withGlobals is an action that needs the global options: they are read,
// and checked, before it runs.
func withGlobals(action func(c *cli.Context, g globalOptions) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		g, err := readGlobals(c)
		if err != nil {
			return err
		}
		return action(c, g)
	}
}

func readGlobals(c *cli.Context) (globalOptions, error) {
	o := globalOptions{
		Talosconfig: c.String("talosconfig"),
		Context:     c.String("context"),
		Endpoints:   c.StringSlice("endpoints"),
		Nodes:       c.StringSlice("nodes"),
		Output:      c.String("output"),
		Yes:         c.Bool("yes"),
		DryRun:      c.Bool("dry-run"),
		Verbose:     c.Bool("verbose"),
		StateDir:    c.String("state-dir"),

		ConnectTimeout: c.Duration("connect-timeout"),
		progress:       c.App.ErrWriter,
	}
	// Defaults are resolved here, not in the flag definitions, so that help
	// and the generated docs do not depend on who generated them.
	if o.Talosconfig == "" {
		o.Talosconfig = defaultTalosconfig()
	}
	if o.StateDir == "" {
		o.StateDir = defaultStateDir()
	}
	// Each command's own -o values (yaml for runbook show) are checked
	// before its action (checkOutput).
	if o.Output != "text" && o.Output != "json" && o.Output != "yaml" && o.Output != "junit" && o.Output != "markdown" {
		return o, failure.Input("use -o text or -o json", "unknown output format %q", o.Output)
	}
	// A node or endpoint given twice is one node: it would otherwise be
	// patched, waited for and reported twice, in parallel with itself.
	o.Nodes, o.Endpoints = unique(flaglist.Split(o.Nodes...)), unique(flaglist.Split(o.Endpoints...))
	return o, nil
}

// unique keeps the first of each value, in order.
func unique(in []string) []string {
	var out []string
	for _, v := range in {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func newApp(s streams) *cli.App {
	app := &cli.App{
		Name:                 "breakglass",
		Usage:                "revive a Talos cluster's kube-apiserver deadlocked by an admission webhook",
		Description:          "Works through the Talos API and etcd only: no kube-apiserver needed.\n\n" + exitCodeHelp(),
		Reader:               s.In,
		Writer:               s.Out,
		ErrWriter:            s.Err,
		Flags:                globalFlags(),
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		// Errors are rendered and mapped to exit codes by run, in one place.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			versionCommand(s),
			admissionCommand(s),
		},
	}
	app.Commands = append(app.Commands, extraCommands(s)...)
	instrument(app)
	return app
}

// extraCommands is where command groups defined in their own files register
// themselves (see init functions), keeping app.go free of merge conflicts.
func extraCommands(s streams) []*cli.Command {
	var out []*cli.Command
	for _, f := range commandRegistry {
		out = append(out, f(s))
	}
	return out
}

var commandRegistry []func(streams) *cli.Command

// argsKey is where the command line as typed is kept in the app's metadata.
const argsKey = "args"

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, s streams) int {
	s = watchOutputs(s) // a failed write is an error (output.go)
	app := newApp(s)
	app.Metadata[argsKey] = args // as typed: what a dry run says to run for real
	err := app.RunContext(ctx, command.Normalize(app, args))
	path, _ := app.Metadata[commandPathKey].(string)
	err = asInterrupted(ctx, err)
	err = permissionAsBadInput(path, err)
	err = withOutputFailure(err, outputFailed(s))
	if err == nil {
		return int(failure.OK)
	}
	return command.Report(s.Err, err)
}

func init() {
	declare("version", commandSpec{args: takes(0, 0, "version takes no arguments", "breakglass version")})
}

func versionCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the breakglass version, commit, build date and Go version",
		Action: withGlobals(func(c *cli.Context, g globalOptions) error {
			info := buildinfo.Read(version, commit, buildDate)
			if g.json() {
				return writeJSON(s.Out, info)
			}
			_, err := io.WriteString(s.Out, info.Text("breakglass"))
			return err
		}),
	}
}
