// Package errwriter lets a renderer write many lines and check for a
// write error once, at the end.
package errwriter

import (
	"fmt"
	"io"
)

// Writer writes to W until a write fails; later writes do nothing, and
// Err is the first error.
type Writer struct {
	W   io.Writer
	Err error
}

func (e *Writer) Write(p []byte) (int, error) {
	if e.Err != nil {
		return 0, e.Err
	}
	n, err := e.W.Write(p)
	e.Err = err
	return n, err
}

// Printf formats to the writer.
func (e *Writer) Printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }
