package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The Go rendering (render.go) writes what the templates give, byte for
// byte, for apps that use every field the templates read: each help a
// user can ask for (--help, -h and help, at every level), the Markdown
// reference with and without a man section, and the fish completion.
func TestRenderingMatchesTemplates(t *testing.T) {
	for name, newApp := range renderApps() {
		t.Run(name, func(t *testing.T) {
			invocations := HelpInvocations(newApp())
			invocations = append(invocations, []string{"help"})
			for _, c := range newApp().Commands {
				invocations = append(invocations, []string{"help", c.Name})
				for _, sub := range c.Subcommands {
					invocations = append(invocations, []string{c.Name, "help", sub.Name})
				}
			}
			for _, args := range invocations {
				goText := runForHelp(t, newApp(), args, printHelpCustom)
				tmplText := runForHelp(t, newApp(), args, executeHelpTemplate)
				if goText != tmplText {
					t.Errorf("%s: Go rendering differs from the template's\n--- Go\n%s\n--- template\n%s", strings.Join(args, " "), goText, tmplText)
				}
				if goText == "" && args[0] == "--help" {
					t.Errorf("%s: no help written", strings.Join(args, " "))
				}
			}
			for _, section := range []int{0, 8} {
				a := newApp()
				a.Setup()
				var w bytes.Buffer
				if err := a.writeDocTemplate(&w, section); err != nil {
					t.Fatal(err)
				}
				want, err := MarkdownFromTemplate(a, section)
				if err != nil {
					t.Fatal(err)
				}
				if w.String() != want {
					t.Errorf("Markdown (section %d) differs from the template's\n--- Go\n%s\n--- template\n%s", section, w.String(), want)
				}
			}
			a := newApp()
			a.Setup()
			got, err := a.ToFishCompletion()
			if err != nil {
				t.Fatal(err)
			}
			want, err := FishCompletionFromTemplate(a)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("fish completion differs from the template's\n--- Go\n%s\n--- template\n%s", got, want)
			}
		})
	}
}

// wrapAt, the one custom function the default templates heed, wraps alike.
func TestRenderingWrapsAsTemplates(t *testing.T) {
	for name, newApp := range renderApps() {
		a := newApp()
		a.Setup()
		funcs := func() map[string]interface{} { return map[string]interface{}{"wrapAt": func() int { return 30 }} }
		var got, want bytes.Buffer
		printHelpCustom(&got, AppHelpTemplate, a, funcs())
		executeHelpTemplate(&want, AppHelpTemplate, a, funcs())
		if got.String() != want.String() {
			t.Errorf("%s: wrapped at 30, Go rendering differs\n--- Go\n%s\n--- template\n%s", name, got.String(), want.String())
		}
		for _, c := range a.Commands {
			got.Reset()
			want.Reset()
			printHelpCustom(&got, SubcommandHelpTemplate, c, funcs())
			executeHelpTemplate(&want, SubcommandHelpTemplate, c, funcs())
			if got.String() != want.String() {
				t.Errorf("%s %s: wrapped at 30, Go rendering differs\n--- Go\n%s\n--- template\n%s", name, c.Name, got.String(), want.String())
			}
		}
	}
}

// A template this fork cannot render is refused in words, not printed as
// the default.
func TestRenderingRefusesCustomTemplate(t *testing.T) {
	var out, errOut bytes.Buffer
	saved := ErrWriter
	ErrWriter = &errOut
	defer func() { ErrWriter = saved }()
	printHelpCustom(&out, "{{.Name}} only\n", &App{Name: "x"}, nil)
	if out.Len() != 0 || !strings.Contains(errOut.String(), "custom template") {
		t.Errorf("out %q, err %q; want nothing out and the refusal", out.String(), errOut.String())
	}
}

func runForHelp(t *testing.T, a *App, args []string, printer helpPrinterCustom) string {
	t.Helper()
	saved, savedSubs := HelpPrinterCustom, helpCommand.Subcommands
	HelpPrinterCustom = printer
	defer func() { HelpPrinterCustom, helpCommand.Subcommands = saved, savedSubs }()
	var out bytes.Buffer
	a.Writer, a.ErrWriter = &out, &out
	a.ExitErrHandler = func(*Context, error) {}
	_ = a.Run(append([]string{a.Name}, args...))
	return out.String()
}

// renderApps build apps that between them set every field the templates
// read, empty and not.
func renderApps() map[string]func() *App {
	return map[string]func() *App{
		"bare": func() *App { return &App{Name: "bare"} },
		"full": func() *App {
			return &App{
				Name:        "full",
				Usage:       "does everything a template can show",
				Version:     "v1.2.3",
				Description: "A description\nover two lines, the second one long enough to wrap when a narrow width is asked for.",
				Authors:     []*Author{{Name: "Ann", Email: "ann@example.com"}},
				Copyright:   "(c) the authors",
				ArgsUsage:   "FILE...",
				Flags: []Flag{
					&StringFlag{Name: "talosconfig", Usage: "the talosconfig", EnvVars: []string{"TALOSCONFIG"}, TakesFile: true},
					&StringSliceFlag{Name: "nodes", Aliases: []string{"n"}, Usage: "the nodes, comma-separated"},
					&BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "answer yes"},
					&DurationFlag{Name: "timeout", Value: 90 * time.Second, Usage: "how long to wait"},
					&IntFlag{Name: "tail", Value: 100, Usage: "lines", Required: true},
					&StringFlag{Name: "secret", Hidden: true},
					&GenericFlag{Name: "output", Aliases: []string{"o"}, Value: &StringSlice{}, Usage: "text or json", DefaultText: "text"},
				},
				Commands: []*Command{
					{Name: "recover", Aliases: []string{"r"}, Usage: "bring it back", ArgsUsage: "[ID]", Description: "Runs the steps.",
						Flags: []Flag{&BoolFlag{Name: "dry-run", Usage: "plan only"}, &StringFlag{Name: "state-dir", TakesFile: true, Usage: "where"}}},
					{Name: "status", Usage: "say how it is", Args: true, Category: "reading"},
					{Name: "timeline", Usage: "print the journal", Category: "reading", UsageText: "full timeline ID\nfull timeline --last"},
					{Name: "hidden", Hidden: true},
					{Name: "etcd", Usage: "etcd surgery", Subcommands: []*Command{
						{Name: "list", Usage: "list admission objects", Flags: []Flag{&StringFlag{Name: "kind", Value: "all", Usage: "which kind"}}},
						{Name: "delete", Usage: "delete one, after its backup", ArgsUsage: "KIND NAME", Category: "writing"},
						{Name: "backup", Aliases: []string{"b", "bk"}, Usage: "back it up"},
					}},
				},
			}
		},
		"categories": func() *App {
			return &App{
				Name:        "categories",
				Usage:       "flags and commands in categories",
				UsageText:   "categories [options] command",
				Version:     "v0.1",
				HideVersion: true,
				Authors:     []*Author{{Name: "Ann"}, {Name: "Bob", Email: "bob@example.com"}},
				Flags: []Flag{
					&StringFlag{Name: "endpoints", Aliases: []string{"e"}, Category: "Talos", Usage: "endpoints"},
					&StringFlag{Name: "context", Category: "Talos", Usage: "context"},
					&BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "say more"},
					&StringFlag{Name: "cacert", Category: "etcd", Usage: "the CA", TakesFile: true},
				},
				Commands: []*Command{
					{Name: "a", Category: "first", Usage: "a"},
					{Name: "bee", Aliases: []string{"b"}, Category: "second", Usage: "b"},
					{Name: "see", Usage: "c", Subcommands: []*Command{
						{Name: "deep", Usage: "deeper", Flags: []Flag{&StringFlag{Name: "x", Category: "X", Usage: "x"}, &BoolFlag{Name: "y"}}, Subcommands: []*Command{{Name: "deepest"}}},
					}},
				},
			}
		},
		"hidden help": func() *App {
			return &App{
				Name:            "quiet",
				HideHelpCommand: true,
				Flags:           []Flag{&BoolFlag{Name: "q"}},
				Commands:        []*Command{{Name: "one", HideHelp: true, Flags: []Flag{&BoolFlag{Name: "f"}}}, {Name: "two", Subcommands: []*Command{{Name: "x"}}}},
			}
		},
	}
}
