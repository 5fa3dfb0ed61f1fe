package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/command"
)

// Issue 21, case 9, for the lab: `replay -f FIFO` waiting on its input
// stops at the first SIGTERM with exit 8. On main the read ignored the
// context and the command waited on.
func TestReplayInterruptedReadingInput(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "objects")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(command.Interruptible(), []string{"breakglass-lab", "replay", "--from", "v1.32.13", "--to", "v1.34.4", "-f", fifo},
			streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &errOut})
	}()
	// A writer can open the FIFO without blocking once the command reads it.
	var w *os.File
	for w == nil {
		select {
		case code := <-done:
			t.Fatalf("ended (exit %d) before it read its input:\n%s", code, errOut.String())
		case <-time.After(5 * time.Millisecond):
		}
		w, _ = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	}
	defer w.Close()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 8 {
			t.Errorf("exit %d, want 8:\n%s", code, errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("did not stop after SIGTERM")
	}
}
