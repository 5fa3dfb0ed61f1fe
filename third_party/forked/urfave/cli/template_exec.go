package cli

// This file is breakglass's, not upstream's: see render.go.

import (
	"bytes"
	"io"
)

// HelpFromTemplate writes the help as upstream does, by executing templ
// with text/template, for tests to compare with HelpPrinterCustom's. A
// program must not call it: linking it costs the binary its method
// dead-code elimination (render.go).
func HelpFromTemplate(out io.Writer, templ string, data interface{}, customFuncs map[string]interface{}) {
	executeHelpTemplate(out, templ, data, customFuncs)
}

// FishCompletionFromTemplate is ToFishCompletion as upstream renders it,
// with text/template; for tests only, as HelpFromTemplate.
func FishCompletionFromTemplate(a *App) (string, error) {
	var w bytes.Buffer
	if err := a.executeFishCompletionTemplate(&w); err != nil {
		return "", err
	}
	return w.String(), nil
}

// HelpInvocations are the command lines (without the program's name) that
// ask a's help at every level: --help and -h for the app, and COMMAND...
// --help for each command, hidden ones too (not one that skips flag
// parsing, whose --help is an argument). Tests run each through
// HelpFromTemplate and the default printer. `help NAME` is left out: running
// the help command in a process appends upstream's one shared help command
// to its own subcommands, after which ToMarkdown never ends (this package's
// tests put it back).
func HelpInvocations(a *App) [][]string {
	out := [][]string{{"--help"}, {"-h"}}
	var walk func(path []string, cmds []*Command)
	walk = func(path []string, cmds []*Command) {
		for _, c := range cmds {
			if c.SkipFlagParsing {
				continue // --help is its argument
			}
			p := append(append([]string(nil), path...), c.Name)
			out = append(out, append(p, "--help"))
			walk(p, c.Subcommands)
		}
	}
	walk(nil, a.Commands)
	return out
}
