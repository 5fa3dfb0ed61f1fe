package main

import (
	"os"
	"testing"
)

// Issue 29: 2>/dev/null is not a terminal. /dev/null is a character
// device, as a terminal is, and a test of the file's mode took it for one
// (the spinner and the live lines went there, and recover's recap was cut
// short); a regular file and a pipe are not terminals either.
func TestNotATerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	file, err := os.Create(t.TempDir() + "/err.log")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, f := range map[string]*os.File{"/dev/null": null, "a file": file, "a pipe": w} {
		if isTerminal(f) {
			t.Errorf("%s is taken for a terminal", name)
		}
		if n := terminalWidth(f); n != 0 {
			t.Errorf("%s has a terminal width of %d, want 0 (none)", name, n)
		}
	}
}
