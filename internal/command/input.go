package command

import (
	"context"
	"io"

	"github.com/breakglass-dev/breakglass/internal/ctxfile"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// ReadInput reads the file a -f flag names; "-" is stdin. A file that
// cannot be read is bad input with hint as the next step. Waiting on it (a
// FIFO, a pipe) ends when ctx does, with its cause.
func ReadInput(ctx context.Context, name string, stdin io.Reader, hint string) ([]byte, error) {
	if name != "-" {
		return ReadFile(ctx, name, hint)
	}
	return checkRead(ctx, hint)(ctxfile.ReadAll(ctx, stdin, 0))
}

// ReadFile is ReadInput for a file a flag names where "-" means no stdin
// (a --kubeconfig).
func ReadFile(ctx context.Context, path, hint string) ([]byte, error) {
	return checkRead(ctx, hint)(ctxfile.ReadFile(ctx, path, 0))
}

func checkRead(ctx context.Context, hint string) func([]byte, error) ([]byte, error) {
	return func(data []byte, err error) ([]byte, error) {
		switch {
		case ctx.Err() != nil:
			return nil, err
		case err != nil:
			return nil, failure.Input(hint, "%v", err)
		}
		return data, nil
	}
}
