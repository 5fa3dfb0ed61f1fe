package main

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/buildinfo"
	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/lab"
)

// streams are the command's input and outputs; nothing writes to the
// process's globals directly, so tests run the whole CLI in-process.
type streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// version, commit and buildDate are stamped at build time (make build,
// make dist: -ldflags "-X main.version=... -X main.commit=... -X
// main.buildDate=..."); buildinfo fills in what the toolchain recorded.
var version, commit, buildDate = "dev", "", ""

// defaultName is the program's name in help and the generated docs. When
// breakglass hands `breakglass lab ...` over, it passes "breakglass lab" as
// argv[0], so help and usage errors read as they always did.
const defaultName = "breakglass-lab"

func newApp(s streams, name string) *cli.App {
	app := &cli.App{
		Name:  name,
		Usage: "reproduce the incident locally with real etcd and kube-apiserver on emulated Talos nodes",
		Description: "Needs the lab's kube-apiserver binaries (make kube-apiserver-rehearse for the rehearsal's pair, make kube-apiserver\n" +
			"for all; found through $" + lab.KubeBinDirEnv + ", else in ~/.cache/breakglass/kube-apiserver, once per machine).\n" +
			"Everything listens on loopback only. See lab/README.md.\n" +
			"`breakglass lab COMMAND` runs `breakglass-lab COMMAND` (found beside breakglass or on PATH).\n\n" + failure.Help(),
		Reader:    s.In,
		Writer:    s.Out,
		ErrWriter: s.Err,
		Flags: []cli.Flag{
			// The one global flag of breakglass that the lab uses.
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "output format: text or json"},
		},
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		// Errors are rendered and mapped to exit codes by run, in one place.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands:       append(labCommands(s), versionCommand(s), docsCommand(s)),
	}
	// A flag that does not parse is bad input (exit 2) with the command's
	// help as hint, not the whole help text.
	app.OnUsageError = usageHint(name + " --help")
	for _, c := range app.Commands {
		c.OnUsageError = usageHint(name + " " + c.Name + " --help")
	}
	return app
}

func usageHint(help string) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		return failure.Input("see: "+help, "%s", command.ExplainParseError(c, err.Error()))
	}
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, s streams) int {
	name := defaultName
	if len(args) > 0 {
		if b := filepath.Base(args[0]); b != "" && b != "." && b != string(filepath.Separator) {
			name = b
		}
	}
	app := newApp(s, name)
	err := app.RunContext(ctx, command.Normalize(app, args))
	return command.Report(s.Err, err)
}

// jsonOutput reads the global --output flag: true for json, a BadInput
// error for anything but text or json.
func jsonOutput(c *cli.Context) (bool, error) {
	switch o := c.String("output"); o {
	case "text":
		return false, nil
	case "json":
		return true, nil
	default:
		return false, failure.Input("use -o text or -o json", "unknown output format %q", o)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func versionCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the breakglass-lab version, commit, build date and Go version",
		Action: func(c *cli.Context) error {
			js, err := jsonOutput(c)
			if err != nil {
				return err
			}
			info := buildinfo.Read(version, commit, buildDate)
			if js {
				return writeJSON(s.Out, info)
			}
			_, err = io.WriteString(s.Out, info.Text("breakglass-lab"))
			return err
		},
	}
}

// docsCommand writes docs/breakglass-lab.md (a test checks it is current).
func docsCommand(s streams) *cli.Command {
	return command.Docs(s.Out, referenceGenerator, func() *cli.App { return newApp(s, defaultName) })
}

const referenceGenerator = "breakglass-lab docs docs/breakglass-lab.md"
