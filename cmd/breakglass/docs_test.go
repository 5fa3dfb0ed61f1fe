package main

import (
	"os"
	"testing"
)

// The committed command reference must match the CLI definition: run
// `make docs` after changing a command.
func TestCommandReferenceUpToDate(t *testing.T) {
	app := newApp(streams{})
	want, err := commandReference(app)
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
