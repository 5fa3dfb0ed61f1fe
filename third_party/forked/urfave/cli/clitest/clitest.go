// Package clitest checks that the fork's Go rendering of an app's help,
// command reference and fish completion is byte for byte what upstream
// urfave/cli's templates give, so that no template runs in the binaries.
// It is breakglass's own, not upstream's, and kept with the fork: it checks
// the fork's one change, and leaves with it (README.md beside the fork).
package clitest

import (
	"io"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
)

// SameAsTemplates runs every help invocation of the app newApp makes
// (run runs the binary's command line, ARGS after its name, and returns
// what it wrote) once with the Go rendering and once with upstream's
// template, and compares them, the command reference and the fish
// completion. Fewer than minHelps invocations fail: the check would prove
// little.
func SameAsTemplates(t *testing.T, name string, newApp func() *cli.App, run func(args []string) string, minHelps int) {
	t.Helper()
	invocations := cli.HelpInvocations(newApp())
	if len(invocations) < minHelps {
		t.Fatalf("only %d help invocations: the check would prove little", len(invocations))
	}
	for _, args := range invocations {
		got := helpOutput(run, args, nil)
		want := helpOutput(run, args, cli.HelpFromTemplate)
		if got != want {
			t.Errorf("%s %s: help differs from the template's\n--- Go\n%s\n--- template\n%s", name, strings.Join(args, " "), got, want)
		}
		if !strings.Contains(got, "USAGE:") {
			t.Errorf("%s %s: no help\n%s", name, strings.Join(args, " "), got)
		}
	}
	app := newApp()
	app.Setup()
	md, err := app.ToMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	if want, err := cli.MarkdownFromTemplate(app, 0); err != nil || md != want {
		t.Errorf("the command reference differs from the template's (%v)", err)
	}
	fish, err := app.ToFishCompletion()
	if err != nil {
		t.Fatal(err)
	}
	if want, err := cli.FishCompletionFromTemplate(app); err != nil || fish != want {
		t.Errorf("the fish completion differs from the template's (%v)", err)
	}
}

// helpOutput is what run writes for args, the help printed by printer
// (nil: the default).
func helpOutput(run func([]string) string, args []string, printer func(out io.Writer, templ string, data interface{}, customFuncs map[string]interface{})) string {
	saved := cli.HelpPrinterCustom
	if printer != nil {
		cli.HelpPrinterCustom = printer
	}
	defer func() { cli.HelpPrinterCustom = saved }()
	return run(args)
}
