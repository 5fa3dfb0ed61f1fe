package cli

// This file is breakglass's, not upstream's (see the package comment).
//
// The default help and the fish completion, rendered in Go to the bytes the
// templates of template.go give. Executing a template reaches
// reflect.Value.MethodByName with a name known only at run time
// (text/template's evalField), and a binary that can reach such a call keeps
// every exported method of every type it links: the Go linker cannot tell
// which ones a template might call. For breakglass that was 9.4 MB of its
// 44.1 MB (linux/amd64), once grpc's golang.org/x/net/trace, which executes
// templates for its debug pages, was left out too (-tags grpcnotrace). See
// urfave/cli#2277 and golang/go#72895; cobra dropped its templates for the
// same reason (spf13/cobra#1956). HelpFromTemplate and its siblings
// (template_exec.go) keep the template rendering for the tests that hold
// the two equal.

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The help templates as this package defines them, before a program sets
// its own: printHelpCustom renders these in Go and refuses any other.
var (
	defaultAppHelpTemplate        = AppHelpTemplate
	defaultCommandHelpTemplate    = CommandHelpTemplate
	defaultSubcommandHelpTemplate = SubcommandHelpTemplate
)

// helpWrapAt is where the default help wraps lines (upstream's
// maxLineLength: in effect, never).
const helpWrapAt = 10000

// printHelpCustom is the default implementation of HelpPrinterCustom: the
// default templates' output, written by Go code. Of customFuncs it heeds
// "wrapAt" (func() int) and "wrap" (func(string, int) string), the only
// ones the default templates can use; a custom template is refused on
// ErrWriter, as this fork cannot execute templates without losing the
// linker's dead-code elimination.
func printHelpCustom(out io.Writer, templ string, data interface{}, customFuncs map[string]interface{}) {
	h := helpText{wrap: func(input string, offset int) string { return wrap(input, offset, helpWrapAt) }}
	if waf, ok := customFuncs["wrapAt"].(func() int); ok {
		wrapAt := waf()
		h.wrap = func(input string, offset int) string { return wrap(input, offset, wrapAt) }
	} else if f, ok := customFuncs["wrap"].(func(string, int) string); ok {
		h.wrap = f
	}
	var render func()
	switch d := data.(type) {
	case *App:
		if templ == defaultAppHelpTemplate {
			render = func() { h.app(d) }
		}
	case *Command:
		switch templ {
		case defaultCommandHelpTemplate:
			render = func() { h.command(d, false) }
		case defaultSubcommandHelpTemplate:
			render = func() { h.command(d, true) }
		}
	}
	if render == nil {
		_, _ = fmt.Fprintf(ErrWriter, "cli: no help for %T with a custom template: only the default templates are rendered (third_party/forked/urfave/cli/render.go)\n", data)
		return
	}
	w := tabwriter.NewWriter(out, 1, 8, 2, ' ', 0)
	h.w = w
	if h.run(render) {
		_ = w.Flush()
	}
}

// helpText writes one help text as a template executes: piece by piece,
// stopping at the first write error or panic (a method of an App or Command
// that is not set up yet can panic, as `help CMD` of a command with
// subcommands does: upstream prints what came before, and so does this).
// Each method is the template of the same name in template.go.
type helpText struct {
	w    io.Writer
	err  error
	wrap func(input string, offset int) string
}

func (h *helpText) s(parts ...string) {
	for _, p := range parts {
		if h.err != nil {
			return
		}
		_, h.err = io.WriteString(h.w, p)
	}
}

// run renders, and tells whether it went to the end, as Execute's error
// does (text/template turns a method's panic into its error).
func (h *helpText) run(render func()) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	render()
	return h.err == nil
}

// app is AppHelpTemplate.
func (h *helpText) app(a *App) {
	h.s("NAME:\n   ")
	h.helpName(a.HelpName, a.Usage)
	h.s("\n\nUSAGE:\n   ")
	if a.UsageText != "" {
		h.s(h.wrap(a.UsageText, 3))
	} else {
		h.s(a.HelpName, " ")
		if len(a.VisibleFlags()) > 0 {
			h.s("[global options]")
		}
		if len(a.Commands) > 0 {
			h.s(" command [command options]")
		}
		h.argsUsage(a.ArgsUsage, a.Args)
	}
	if a.Version != "" && !a.HideVersion {
		h.s("\n\nVERSION:\n   ", a.Version)
	}
	if a.Description != "" {
		h.s("\n\nDESCRIPTION:\n   ", h.wrap(a.Description, 3))
	}
	// The newline before "{{- if len .Authors}}" is trimmed.
	if len(a.Authors) > 0 {
		h.s("\n\nAUTHOR")
		h.authors(a.Authors)
	}
	if len(a.VisibleCommands()) > 0 {
		h.s("\n\nCOMMANDS:")
		h.commandCategories(a.VisibleCategories())
	}
	if cats := a.VisibleFlagCategories(); len(cats) > 0 {
		h.s("\n\nGLOBAL OPTIONS:")
		h.flagCategories(cats)
	} else if flags := a.VisibleFlags(); len(flags) > 0 {
		h.s("\n\nGLOBAL OPTIONS:")
		h.flags(flags)
	}
	if a.Copyright != "" {
		h.s("\n\nCOPYRIGHT:\n   ", h.wrap(a.Copyright, 3))
	}
	h.s("\n")
}

// command is CommandHelpTemplate, or SubcommandHelpTemplate (which lists
// the subcommands).
func (h *helpText) command(c *Command, sub bool) {
	h.s("NAME:\n   ")
	h.helpName(c.HelpName, c.Usage)
	h.s("\n\nUSAGE:\n   ")
	h.usage(c)
	if c.Category != "" {
		h.s("\n\nCATEGORY:\n   ", c.Category)
	}
	if c.Description != "" {
		h.s("\n\nDESCRIPTION:\n   ", h.wrap(c.Description, 3))
	}
	if sub && len(c.VisibleCommands()) > 0 {
		h.s("\n\nCOMMANDS:")
		h.commandCategories(c.VisibleCategories())
	}
	if cats := c.VisibleFlagCategories(); len(cats) > 0 {
		h.s("\n\nOPTIONS:")
		h.flagCategories(cats)
	} else if flags := c.VisibleFlags(); len(flags) > 0 {
		h.s("\n\nOPTIONS:")
		h.flags(flags)
	}
	h.s("\n")
}

// helpName is helpNameTemplate.
func (h *helpText) helpName(helpName, usage string) {
	h.s(h.wrap(helpName, 3))
	if usage != "" {
		h.s(" - ", h.wrap(usage, offset(helpName, 6)))
	}
}

// usage is usageTemplate.
func (h *helpText) usage(c *Command) {
	if c.UsageText != "" {
		h.s(h.wrap(c.UsageText, 3))
		return
	}
	h.s(c.HelpName)
	if len(c.VisibleFlags()) > 0 {
		h.s(" [command options]")
	}
	h.argsUsage(c.ArgsUsage, c.Args)
}

func (h *helpText) argsUsage(argsUsage string, args bool) {
	if argsUsage != "" {
		h.s(" ", argsUsage)
	} else if args {
		h.s(" [arguments...]")
	}
}

// authors is authorsTemplate.
func (h *helpText) authors(authors []*Author) {
	if len(authors) != 1 {
		h.s("S")
	}
	h.s(":\n   ")
	for i, a := range authors {
		if i > 0 {
			h.s("\n   ")
		}
		h.s(fmt.Sprint(a))
	}
}

// commandCategories is visibleCommandCategoryTemplate.
func (h *helpText) commandCategories(cats []CommandCategory) {
	for _, cat := range cats {
		if cat.Name() == "" {
			h.commands(cat.VisibleCommands())
			continue
		}
		h.s("\n   ", cat.Name(), ":")
		for _, c := range cat.VisibleCommands() {
			h.s("\n     ", strings.Join(c.Names(), ", "), "\t", c.Usage)
		}
	}
}

// commands is visibleCommandTemplate.
func (h *helpText) commands(cmds []*Command) {
	cv := offsetCommands(cmds, 5)
	for _, c := range cmds {
		s := strings.Join(c.Names(), ", ")
		h.s("\n   ", s, indent(subtract(cv, offset(s, 3)), ""), h.wrap(c.Usage, cv))
	}
}

// flagCategories is visibleFlagCategoryTemplate.
func (h *helpText) flagCategories(cats []VisibleFlagCategory) {
	for _, cat := range cats {
		h.s("\n   ")
		if cat.Name() != "" {
			h.s(cat.Name(), "\n\n   ")
		}
		flags := cat.Flags()
		for i, f := range flags {
			if i == len(flags)-1 {
				h.s(fmt.Sprint(f), "\n")
			} else {
				h.s(fmt.Sprint(f), "\n   ")
			}
		}
	}
}

// flags is visibleFlagTemplate.
func (h *helpText) flags(flags []Flag) {
	for _, f := range flags {
		h.s("\n   ", h.wrap(f.String(), 6))
	}
}

// writeFishCompletionTemplate writes what FishCompletionTemplate gives.
func (a *App) writeFishCompletionTemplate(w io.Writer) error {
	d := a.fishCompletionData()
	var b strings.Builder
	b.WriteString("# " + a.Name + " fish shell completion\n\n")
	b.WriteString("function __fish_" + a.Name + "_no_subcommand --description 'Test if there has been any subcommand yet'\n")
	b.WriteString("    for i in (commandline -opc)\n")
	b.WriteString("        if contains -- $i")
	for _, c := range d.AllCommands {
		b.WriteString(" " + c)
	}
	b.WriteString("\n            return 1\n        end\n    end\n    return 0\nend\n\n")
	for _, c := range d.Completions {
		b.WriteString(c + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
