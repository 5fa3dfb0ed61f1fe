package main

import (
	"testing"

	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/golden"
)

// The committed command reference must match the CLI definition: run
// `make docs` after changing a command.
func TestCommandReferenceUpToDate(t *testing.T) {
	app := newApp(streams{})
	want, err := command.Reference(app, referenceGenerator)
	if err != nil {
		t.Fatal(err)
	}
	golden.Generated(t, "../../docs/commands.md", want, "make docs")
}
