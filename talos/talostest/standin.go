package talostest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// StandIn is an in-process kube-apiserver stand-in for unit tests: it logs a start
// line, is ready after ReadyAfter, and can be told to crash or hang depending on the
// rendered command line. It implements PodRunner and Prober.
type StandIn struct {
	// ReadyAfter is the time from start to ready; default 50ms.
	ReadyAfter time.Duration
	// Crash, when it returns a non-empty message for the container, makes the
	// container log that message and exit with an error after ReadyAfter.
	Crash func(c ContainerConfig) string
	// Hang, when true for the container, keeps it running but never live nor ready
	// (the admission-webhook deadlock).
	Hang func(c ContainerConfig) bool
}

var (
	_ PodRunner = StandIn{}
	_ Prober    = StandIn{}
)

func (s StandIn) readyAfter() time.Duration {
	if s.ReadyAfter <= 0 {
		return 50 * time.Millisecond
	}

	return s.ReadyAfter
}

// Run implements PodRunner.
func (s StandIn) Run(ctx context.Context, c Container, logs io.Writer) error {
	fmt.Fprintf(logs, "I0000 stand-in kube-apiserver %s starting: %s\n", c.Image, strings.Join(c.Args(), " "))

	timer := time.NewTimer(s.readyAfter())
	defer timer.Stop()

	select {
	case <-ctx.Done():
		return nil
	case <-timer.C:
	}

	if s.Crash != nil {
		if msg := s.Crash(c.ContainerConfig); msg != "" {
			fmt.Fprintf(logs, "E0000 %s\n", msg)

			return errors.New(msg)
		}
	}

	if s.Hang != nil && s.Hang(c.ContainerConfig) {
		fmt.Fprintf(logs, "E0000 stand-in kube-apiserver: start-up blocked, not ready\n")
	} else {
		fmt.Fprintf(logs, "I0000 stand-in kube-apiserver: serving, ready\n")
	}

	<-ctx.Done()

	return nil
}

// Live implements Prober.
func (s StandIn) Live(_ context.Context, c Container) bool {
	return s.Hang == nil || !s.Hang(c.ContainerConfig)
}

// Ready implements Prober.
func (s StandIn) Ready(ctx context.Context, c Container) bool {
	if s.Crash != nil && s.Crash(c.ContainerConfig) != "" {
		return false
	}

	return s.Live(ctx, c) && time.Since(c.StartedAt) >= s.readyAfter()
}

// FlagHas reports whether the comma-separated flag --name holds value, for StandIn hooks.
func FlagHas(c ContainerConfig, name, value string) bool {
	v, ok := c.Flag(name)

	return ok && slices.Contains(strings.Split(v, ","), value)
}
