package main

import (
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() {
	commandRegistry = append(commandRegistry, runbookCommand)
	declare("runbook list", commandSpec{args: takes(0, 0, "runbook list takes no arguments", "show one with: breakglass runbook show NAME")})
	declare("runbook show", commandSpec{outputs: []string{"text", "json", "yaml"}})
	declare("runbook run", commandSpec{state: stateWrite, journaled: true, talos: talosAlways})
}

// guidedSteps resolves the runbook (a built-in name or a file) and applies
// the command line's overrides to it.
func guidedSteps(c *cli.Context) (string, []recovery.Step, error) {
	rb, err := runbooks.ResolveContext(c.Context, c.String("runbook"))
	if err != nil {
		return "", nil, err
	}
	// --delete names are resolved by the engine, across admission kinds (RecoverOptions.Delete).
	o := runbooks.Overrides{Plugins: flaglist.Split(c.StringSlice("plugins")...)}
	if d := c.Duration("revert-after"); d > 0 {
		o.RevertAfter = runbooks.Duration(d)
	}
	if len(o.Plugins) == 0 {
		o.Plugins = nil
	}
	if rb, err = rb.WithOverrides(o); err != nil {
		return "", nil, err
	}
	if err := rb.CheckInputs(); err != nil {
		return "", nil, err
	}
	return rb.Metadata.Name, recovery.StepsOf(rb), nil
}

func runbookCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "runbook",
		Usage: "the runbooks that sequence a guided recovery: list, show, run",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the built-in runbooks",
				Action: withGlobals(func(c *cli.Context, g globalOptions) error {
					if g.json() {
						return writeJSON(s.Out, map[string]any{"runbooks": runbooks.Builtin()})
					}
					for _, rb := range runbooks.Builtin() {
						fmt.Fprintf(s.Out, "%-28s %d steps  %s\n", rb.Metadata.Name, len(rb.Spec.Steps), firstSentence(rb.Metadata.Description))
					}
					return nil
				}),
			},
			{
				Name:      "show",
				Usage:     "show a runbook's steps, actions and parameters (-o yaml: its YAML, to start a custom runbook from)",
				ArgsUsage: "NAME|FILE",
				Action: withGlobals(func(c *cli.Context, g globalOptions) error {
					if c.Args().Len() != 1 {
						return failure.Input("list them with: breakglass runbook list", "runbook show takes one runbook name or file")
					}
					rb, err := runbooks.ResolveContext(c.Context, c.Args().First())
					if err != nil {
						return err
					}
					switch g.Output {
					case "json":
						return writeJSON(s.Out, rb)
					case "yaml":
						// The runbook's own YAML, to start a custom one from (as with kubectl get -o yaml).
						y, err := runbooks.YAML(rb)
						if err != nil {
							return err
						}
						_, err = s.Out.Write(y)
						return err
					}
					return runbooks.Render(s.Out, rb)
				}),
			},
			{
				Name:      "run",
				Usage:     "run a runbook as a guided recovery (like recover --runbook NAME|FILE)",
				ArgsUsage: "NAME|FILE",
				Flags:     recoverFlags(),
				Action: func(c *cli.Context) error {
					if c.Args().Len() != 1 {
						return failure.Input("list them with: breakglass runbook list", "runbook run takes one runbook name or file")
					}
					if err := c.Set("runbook", c.Args().First()); err != nil {
						return err
					}
					return runRecover(c, s)
				},
			},
		},
	}
}

// firstSentence shortens a description for a one-line listing.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if len(s) > 110 {
		s = s[:107] + "..."
	}
	return s
}
