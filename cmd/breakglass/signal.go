package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery"
)

// interruptedError is the cause of a run's cancellation by SIGINT or
// SIGTERM: the command stops cleanly and exits 8, whatever it was doing.
type interruptedError struct{ sig os.Signal }

func (e interruptedError) Error() string {
	name := "SIGTERM"
	if e.sig == os.Interrupt {
		name = "SIGINT"
	}
	return "interrupted by " + name
}
func (e interruptedError) Unwrap() error { return failure.Declined }

// interruptible is a context the first SIGINT or SIGTERM cancels with an
// interruptedError as its cause. The handler is then removed, so that a
// second signal aborts at once (the default action). stop releases it.
func interruptible(w io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs) // before saying so: a second signal now kills
			fmt.Fprintf(w, "breakglass: %v: stopping cleanly (press Ctrl-C again to abort at once)\n", interruptedError{sig})
			cancel(interruptedError{sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(nil)
	}
}

// runInterruptible is run with the process's signals: what main does.
func runInterruptible(args []string, s streams) int {
	ctx, stop := interruptible(s.Err)
	defer stop()
	// A write to a pipe whose reader has gone (| head) is then an error
	// (EPIPE), reported with exit 11 (output.go), where SIGPIPE would kill
	// the process in the middle of a step, its journal unfinished.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return run(ctx, args, s)
}

// asInterrupted makes a command's end after an interruption exit 8 and say
// so, whatever error the interrupted call returned (a gRPC "canceled", a
// timeout, a partial result), keeping that error's words and hints. The
// lab's own exit code is the lab's.
func asInterrupted(ctx context.Context, err error) error {
	var sig interruptedError
	if !errors.As(context.Cause(ctx), &sig) {
		return err
	}
	var lab labExited
	if errors.As(err, &lab) {
		return err
	}
	run := &interruptedRun{sig: sig, err: err}
	var in *inIncident
	if errors.As(err, &in) {
		run.incident = in.id
	}
	return run
}

type interruptedRun struct {
	sig      interruptedError
	err      error  // nil: the command finished as the signal came
	incident string // the incident this run wrote into, if any
}

// commandPathKey is where the running command's path ("etcd delete") is
// kept in the app's metadata.
const commandPathKey = "command"

func (e *interruptedRun) Error() string {
	if e.err == nil || errors.Is(e.err, e.sig) {
		return fmt.Sprintf("%v", e.sig)
	}
	return fmt.Sprintf("%v\n%v", e.err, e.sig)
}

// Unwrap is the interruption only, so the exit code is 8 and not the
// interrupted call's; its hints are kept below.
func (e *interruptedRun) Unwrap() error { return e.sig }

// Hints are the interrupted call's, and where this run journaled what it
// did: only an incident it wrote into (a run that opened none, or wrote
// nothing, points at no journal).
func (e *interruptedRun) Hints() []string {
	h := failure.Hints(e.err)
	if e.incident == "" {
		return h
	}
	return append(h, "what was done is in the journal: breakglass journal show "+e.incident)
}

// inIncident is a command's error marked with the incident its run wrote
// into, for what an interruption says.
type inIncident struct {
	err error
	id  string
}

func (e *inIncident) Error() string { return e.err.Error() }
func (e *inIncident) Unwrap() error { return e.err }

// withIncident marks err with the incident res wrote into, if any.
func withIncident(err error, res *recovery.RecoverResult) error {
	if err == nil || res == nil || res.Journal == "" {
		return err
	}
	return &inIncident{err: err, id: res.Incident}
}
