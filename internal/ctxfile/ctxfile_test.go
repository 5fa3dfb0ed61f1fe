package ctxfile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if b, err := ReadFile(ctx, p, 0); err != nil || string(b) != "0123456789" {
		t.Errorf("whole: %q %v", b, err)
	}
	if b, err := ReadFile(ctx, p, 4); err != nil || string(b) != "0123" {
		t.Errorf("limit 4: %q %v", b, err)
	}
	if _, err := ReadFile(ctx, filepath.Join(dir, "absent"), 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: %v, want fs.ErrNotExist", err)
	}
}

// A FIFO nobody writes to blocks open(2) for ever: the read gives up with
// the context's cause, and the abandoned open ends once a writer comes.
func TestReadFileFIFOStoppedByContext(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("interrupted by SIGINT")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ReadFile(ctx, p, 0)
		done <- err
	}()
	cancel(cause)
	if err := <-done; !errors.Is(err, cause) {
		t.Fatalf("err %v, want the cause", err)
	}
	// Release the abandoned open, if it began: a writer that closes at once
	// (without a reader there, opening it fails at once instead).
	if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		w.Close()
	}
}
