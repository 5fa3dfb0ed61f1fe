package main

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// A pseudo-terminal is a terminal, and its width is told.
func TestPseudoTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptmx.Close()
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("cannot open the pseudo-terminal: %v", err)
	}
	defer pts.Close()
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 123, Row: 40}); err != nil {
		t.Fatal(err)
	}
	if !isTerminal(pts) {
		t.Error("a pseudo-terminal is not taken for a terminal")
	}
	if got := terminalWidth(pts); got != 123 {
		t.Errorf("terminal width %d, want 123", got)
	}
}
