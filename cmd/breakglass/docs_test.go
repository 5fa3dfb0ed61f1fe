package main

import (
	"os"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/command"
)

// The committed command reference must match the CLI definition: run
// `make docs` after changing a command.
func TestCommandReferenceUpToDate(t *testing.T) {
	app := newApp(streams{})
	want, err := command.Reference(app, referenceGenerator)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/commands.md")
	if err != nil {
		t.Fatalf("docs/commands.md: %v (generate it with: make docs)", err)
	}
	if string(got) != want {
		t.Fatal("docs/commands.md is out of date: run make docs")
	}
}
