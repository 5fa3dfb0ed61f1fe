package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// StandIn is an in-process kube-apiserver stand-in for unit tests. To the kubelet
// it is a process that runs or exits, nothing more (the pod has no probes): it
// logs a start line, after ReadyAfter a line saying whether it serves, and can be
// told to crash or hang depending on the rendered command line. It implements
// PodRunner.
type StandIn struct {
	// ReadyAfter is the time from start to serving (or crashing); default 50ms.
	ReadyAfter time.Duration
	// Crash, when it returns a non-empty message for the container, makes the
	// container log that message and exit with an error after ReadyAfter.
	Crash func(c ContainerConfig) string
	// Hang, when true for the container, keeps it running but never serving
	// (the admission-webhook deadlock). The kubelet does not notice.
	Hang func(c ContainerConfig) bool
	// GiveUpAfter makes a hung container exit with an error this long after it
	// started serving nothing, as v1.34 does when a post-start hook gives up
	// (RBAC bootstrap after about 30s); zero: it hangs until stopped.
	GiveUpAfter time.Duration
	// ShutdownDelay is how long the container takes to exit after SIGTERM
	// (it is killed sooner when the kubelet's grace period ends); default 0.
	ShutdownDelay time.Duration
}

var _ PodRunner = StandIn{}

func (s StandIn) readyAfter() time.Duration {
	if s.ReadyAfter <= 0 {
		return 50 * time.Millisecond
	}

	return s.ReadyAfter
}

// Run implements PodRunner.
func (s StandIn) Run(ctx context.Context, c Container, logs io.Writer) error {
	fmt.Fprintf(logs, "I0000 stand-in kube-apiserver %s starting: %s\n", c.Image, strings.Join(c.Args(), " "))

	if !sleep(ctx, s.readyAfter()) {
		return s.stop(c, logs)
	}

	if s.Crash != nil {
		if msg := s.Crash(c.ContainerConfig); msg != "" {
			fmt.Fprintf(logs, "E0000 %s\n", msg)

			return errors.New(msg)
		}
	}

	if s.Hang == nil || !s.Hang(c.ContainerConfig) {
		fmt.Fprintf(logs, "I0000 stand-in kube-apiserver: serving, ready\n")
		<-ctx.Done()

		return s.stop(c, logs)
	}

	fmt.Fprintf(logs, "E0000 stand-in kube-apiserver: start-up blocked, not ready\n")

	if s.GiveUpAfter <= 0 {
		<-ctx.Done()

		return s.stop(c, logs)
	}

	if !sleep(ctx, s.GiveUpAfter) {
		return s.stop(c, logs)
	}

	const msg = `PostStartHook "rbac/bootstrap-roles" failed: unable to initialize roles: timed out waiting for the condition`

	fmt.Fprintf(logs, "F0000 stand-in kube-apiserver: %s\n", msg)

	return errors.New(msg)
}

// stop is the shutdown after SIGTERM: ShutdownDelay, cut short by a kill.
func (s StandIn) stop(c Container, logs io.Writer) error {
	select {
	case <-c.Kill: // SIGKILL: nothing more is written
		return nil
	default:
	}

	fmt.Fprintf(logs, "I0000 stand-in kube-apiserver: received SIGTERM, shutting down\n")

	if s.ShutdownDelay > 0 {
		select {
		case <-time.After(s.ShutdownDelay):
		case <-c.Kill:
			return nil
		}
	}

	fmt.Fprintf(logs, "I0000 stand-in kube-apiserver: stopped\n")

	return nil
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
