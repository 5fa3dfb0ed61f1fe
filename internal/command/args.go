// Package command is what both breakglass binaries do around their commands:
// read the command line as talosctl does, report errors, handle signals.
package command

import (
	"strings"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
)

// Normalize reorders a command line so that urfave/cli v2 parses it the
// way talosctl users expect: global flags may stand anywhere (before or after
// the subcommand), and a command's own flags may follow its positional
// arguments ("etcd delete NAME --kind mutating"). urfave/cli v2 stops parsing
// flags at the first positional argument and only knows app-level flags
// before the command name, so flags are moved, never changed or dropped.
func Normalize(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	// Shell completion asks with a last argument that must stay last.
	if last := args[len(args)-1]; last == "--generate-bash-completion" {
		return append(Normalize(app, args[:len(args)-1]), last)
	}
	var global, path, own, positional, afterDashes []string
	commands := app.Commands
	var current *cli.Command
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		arg := rest[i]
		if arg == "--" {
			afterDashes = append([]string{"--"}, rest[i+1:]...)
			break
		}
		if len(arg) > 1 && strings.HasPrefix(arg, "-") {
			name, hasValue := flagName(arg)
			if f := findFlag(current, name); f != nil {
				own = append(own, arg)
				if takesValue(f) && !hasValue && i+1 < len(rest) {
					i++
					own = append(own, rest[i])
				}
				continue
			}
			if f := findFlagIn(app.Flags, name); f != nil {
				if takesValue(f) && !hasValue && i+1 == len(rest) {
					// A global flag missing its value at the end: alone, so
					// that urfave/cli says it needs one instead of taking the
					// command's name as the value.
					return []string{args[0], arg}
				}
				global = append(global, arg)
				if takesValue(f) && !hasValue && i+1 < len(rest) {
					i++
					global = append(global, rest[i])
				}
				continue
			}
			// Unknown flag: keep it with the command so urfave/cli reports it there.
			own = append(own, arg)
			continue
		}
		if len(positional) == 0 {
			if sub := findCommand(commands, arg); sub != nil {
				// Flags seen so far belong to the parent; keep them before the name.
				path = append(path, own...)
				own = nil
				path = append(path, arg)
				current = sub
				commands = sub.Subcommands
				continue
			}
		}
		positional = append(positional, arg)
	}
	out := append([]string{args[0]}, global...)
	out = append(out, path...)
	out = append(out, own...)
	out = append(out, positional...)
	return append(out, afterDashes...)
}

func flagName(arg string) (name string, hasValue bool) {
	name = strings.TrimLeft(arg, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		return name[:i], true
	}
	return name, false
}

func findCommand(commands []*cli.Command, name string) *cli.Command {
	for _, c := range commands {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func findFlag(cmd *cli.Command, name string) cli.Flag {
	if cmd == nil {
		return nil
	}
	return findFlagIn(cmd.Flags, name)
}

func findFlagIn(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func takesValue(f cli.Flag) bool {
	if dv, ok := f.(cli.DocGenerationFlag); ok {
		return dv.TakesValue()
	}
	return true
}
