package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/command"
)

// Every duration and count flag of every command has its accepted range
// here, so a new flag cannot slip past the checks made before anything is
// dialled; a new command states what arguments it takes.
func TestEveryFlagValueChecked(t *testing.T) {
	app := newApp(streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard})
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(path + " " + c.Name)
			if c.SkipFlagParsing || c.Hidden {
				continue // lab: breakglass-lab checks its own flags
			}
			for _, f := range c.Flags {
				name := f.Names()[0]
				switch f.(type) {
				case *cli.DurationFlag:
					if _, ok := durationRanges[name]; !ok {
						t.Errorf("%s --%s: a duration flag without a range in durationRanges", p, name)
					}
				case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
					if _, ok := intRanges[name]; !ok {
						t.Errorf("%s --%s: a count flag without a range in intRanges", p, name)
					}
				}
			}
			if len(c.Subcommands) > 0 {
				walk(p, c.Subcommands)
				continue
			}
			if commandSpecs[p].args == nil && c.ArgsUsage == "" {
				t.Errorf("%s: takes no ArgsUsage and declares no args: its arguments are not checked", p)
			}
		}
	}
	walk("", app.Commands)
}

// Every declared spec is of a command there is (a misspelt path would
// leave its command unchecked), and what a spec says matches the command:
// a required flag or a destination check names a flag it has.
func TestSpecsAreOfCommands(t *testing.T) {
	app := newApp(streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard})
	commands := map[string]*cli.Command{}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := strings.TrimSpace(path + " " + c.Name)
			commands[p] = c
			walk(p, c.Subcommands)
		}
	}
	walk("", app.Commands)
	has := func(c *cli.Command, flag string) bool {
		return slices.ContainsFunc(c.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), flag) })
	}
	for path, spec := range commandSpecs {
		c, ok := commands[path]
		switch {
		case !ok || len(c.Subcommands) > 0:
			t.Errorf("spec of %q: no such command", path)
		case spec.required != "" && !has(c, spec.required), spec.newFile != "" && !has(c, "out"), spec.backupDir && !has(c, "backup-dir"):
			t.Errorf("%s: its spec names a flag it does not have", path)
		case spec.journaled && spec.state == stateRead:
			t.Errorf("%s: journaled, but its spec says it only reads the state directory", path)
		}
	}
}

// A global flag left without its value at the end of the line is reported
// as such, not read as taking the command's name.
func TestNormalizeDanglingGlobalFlag(t *testing.T) {
	app := newApp(streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard})
	if got := command.Normalize(app, []string{"breakglass", "admission", "status", "-n"}); !slices.Equal(got, []string{"breakglass", "-n"}) {
		t.Errorf("Normalize = %q", got)
	}
	if got := command.Normalize(app, []string{"breakglass", "admission", "status", "-n", "10.5.0.2"}); !slices.Equal(got, []string{"breakglass", "-n", "10.5.0.2", "admission", "status"}) {
		t.Errorf("Normalize = %q", got)
	}
}
