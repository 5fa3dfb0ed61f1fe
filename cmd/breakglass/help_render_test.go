package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/cli"
)

// internal/cli writes the help, the command reference and the fish
// completion in Go, so that no template runs in the on-call binary
// (deps_test.go): for every command of breakglass they are byte for byte
// what upstream urfave/cli's templates give.
func TestHelpMatchesUpstreamTemplates(t *testing.T) {
	invocations := cli.HelpInvocations(newApp(streams{}))
	if len(invocations) < 30 {
		t.Fatalf("only %d help invocations: the check would prove little", len(invocations))
	}
	for _, args := range invocations {
		got := helpOutput(args, nil)
		want := helpOutput(args, cli.HelpFromTemplate)
		if got != want {
			t.Errorf("breakglass %s: help differs from the template's\n--- Go\n%s\n--- template\n%s", strings.Join(args, " "), got, want)
		}
		if !strings.Contains(got, "USAGE:") {
			t.Errorf("breakglass %s: no help\n%s", strings.Join(args, " "), got)
		}
	}
	app := newApp(streams{})
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

// helpOutput is what breakglass ARGS writes, the help printed by printer
// (nil: the default).
func helpOutput(args []string, printer func(out io.Writer, templ string, data interface{}, customFuncs map[string]interface{})) string {
	saved := cli.HelpPrinterCustom
	if printer != nil {
		cli.HelpPrinterCustom = printer
	}
	defer func() { cli.HelpPrinterCustom = saved }()
	var out bytes.Buffer
	run(context.Background(), append([]string{"breakglass"}, args...), streams{In: strings.NewReader(""), Out: &out, Err: &out})
	return out.String()
}
