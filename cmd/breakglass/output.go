package main

// What breakglass writes is how the operator learns what it did: the
// backup's path, the command that undoes a change, the verdict. So a write
// to standard output or standard error that fails (a pipe closed early,
// /dev/full, a full disk) is an error with its own exit code (11), never
// silence; and before each change the engine asks the UI whether its
// output still takes writes (recovery.OutputChecker): a change whose
// record cannot be written is not made.
//
// A descriptor already closed when breakglass starts is not one of these:
// the Go runtime opens /dev/null in its place before main runs, which
// cannot be told from 2>/dev/null, a request to discard.

import (
	"errors"
	"io"
	"os"
	"sync"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// output is one of the command's output streams, watched: it remembers
// the first write that failed.
type output struct {
	w    io.Writer
	name string // "standard output"

	mu  sync.Mutex
	err error
}

// watchOutputs wraps s's outputs (once: streams already watched stay so).
func watchOutputs(s streams) streams {
	if _, ok := s.Out.(*output); !ok {
		s.Out = &output{w: s.Out, name: "standard output"}
	}
	if _, ok := s.Err.(*output); !ok {
		s.Err = &output{w: s.Err, name: "standard error"}
	}
	return s
}

func (o *output) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		o.fail(err)
	}
	return n, err
}

func (o *output) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = &outputError{stream: o.name, err: err}
	}
}

// failed is the first write that failed, nil if none has.
func (o *output) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// check is failed, after asking the stream with an empty write: a full
// device (/dev/full) and a closed file refuse even that, so a run notices
// before it has anything to say. (A pipe takes an empty write whoever
// reads it: a pipe closed early is noticed at the first real write, the
// plan's.)
func (o *output) check() error {
	if err := o.failed(); err != nil {
		return err
	}
	if _, err := o.w.Write(nil); err != nil {
		o.fail(err)
	}
	return o.failed()
}

// fileOf is the file a stream writes to or reads from, watched or not; nil
// for anything else (a buffer).
func fileOf(stream any) *os.File {
	if w, ok := stream.(io.Writer); ok {
		stream = unwatched(w)
	}
	f, _ := stream.(*os.File)
	return f
}

// unwatched is the stream a watched output writes to.
func unwatched(w io.Writer) io.Writer {
	if o, ok := w.(*output); ok {
		return o.w
	}
	return w
}

// outputErr is the first of s's watched outputs that fails, checked now.
func outputErr(s streams) error { return firstOutput(s, (*output).check) }

// outputFailed is the first of s's watched outputs that failed a write.
func outputFailed(s streams) error { return firstOutput(s, (*output).failed) }

// firstOutput is the first error of s's watched outputs (stdout, then
// stderr) that errOf gives.
func firstOutput(s streams, errOf func(*output) error) error {
	for _, w := range []io.Writer{s.Out, s.Err} {
		if o, ok := w.(*output); ok {
			if err := errOf(o); err != nil {
				return err
			}
		}
	}
	return nil
}

// withOutputFailure is the command's error once an output has failed a
// write: the command's own failure keeps its exit code (the output's is
// added to its message); an outcome it already rendered (a verdict) was
// lost on the way, so the output's failure is the error; a success is
// one no more.
func withOutputFailure(err, out error) error {
	var reported failure.Reported
	var lost *outputError
	switch {
	case out == nil || errors.Is(err, failure.Output):
		return err
	case err == nil || errors.As(err, &reported):
		return out
	case errors.As(out, &lost) && errors.Is(err, lost.err):
		return out // the command's error is that write's: say it once
	}
	return errors.Join(err, out)
}

// either is the command's own error when it has one, else the failed
// write's: a result that could not be written says nothing new of the
// command (run reports the output's failure in any case).
func either(err, werr error) error {
	if err != nil {
		return err
	}
	return werr
}

// outputError is a stream that failed a write.
type outputError struct {
	stream string
	err    error
}

func (e *outputError) Error() string {
	return e.stream + " cannot be written: " + e.err.Error()
}
func (e *outputError) Unwrap() []error { return []error{failure.Output, e.err} }
func (e *outputError) Hints() []string {
	return []string{"give breakglass an output that takes what it writes: a terminal, a file on a disk with space, or a pipe read to the end"}
}

// notRecorded is a change refused because its record cannot be written.
type notRecorded struct{ err error }

func (e *notRecorded) Error() string {
	return e.err.Error() + ": not applied, for what it would do (its backup, the way back) could not be said"
}
func (e *notRecorded) Unwrap() error { return e.err }

// outputHealthy is the UIs' OutputErr: recovery.OutputChecker.
func outputHealthy(s streams) error {
	if err := outputErr(s); err != nil {
		return &notRecorded{err: err}
	}
	return nil
}
