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
	var data []byte
	var err error
	if name == "-" {
		data, err = ctxfile.ReadAll(ctx, stdin, 0)
	} else {
		data, err = ctxfile.ReadFile(ctx, name, 0)
	}
	switch {
	case ctx.Err() != nil:
		return nil, err
	case err != nil:
		return nil, failure.Input(hint, "%v", err)
	}
	return data, nil
}
