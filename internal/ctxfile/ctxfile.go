// Package ctxfile reads what an operator names on the command line (a
// talosconfig, a runbook, manifests, certificates) so that Ctrl-C still
// stops the command: a FIFO with no writer blocks open(2), a pipe from a
// stalled process blocks read(2), and neither looks at a context. The read
// runs in a goroutine that is abandoned when the context is done (the
// process exits soon after, which ends it).
package ctxfile

import (
	"context"
	"io"
	"os"
)

type result struct {
	data []byte
	err  error
}

// ReadFile is os.ReadFile (its errors as they are, so errors.Is(err,
// fs.ErrNotExist) still tells), stopped by ctx with its cause; limit > 0
// reads at most limit bytes (the caller tells a longer file by getting
// exactly limit of them).
func ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	return wait(ctx, func() ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readAll(f, limit)
	})
}

// ReadAll is io.ReadAll of r (standard input, a pipe), stopped by ctx.
func ReadAll(ctx context.Context, r io.Reader, limit int64) ([]byte, error) {
	return wait(ctx, func() ([]byte, error) { return readAll(r, limit) })
}

func readAll(r io.Reader, limit int64) ([]byte, error) {
	if limit > 0 {
		r = io.LimitReader(r, limit)
	}
	return io.ReadAll(r)
}

func wait(ctx context.Context, read func() ([]byte, error)) ([]byte, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	done := make(chan result, 1) // the abandoned goroutine must not block on it
	go func() {
		data, err := read()
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
