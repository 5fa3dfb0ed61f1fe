package talostest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Logged is kube-apiserver stuck as a real one was in an incident: it logs
// Lines (the real binary's), then exits after ExitAfter as v1.34.4 does
// once a post-start hook gives up (Talos sets no probe that would restart
// it), so the kubelet restarts it again and again. A stop ends it at once.
// It implements PodRunner.
type Logged struct {
	Lines     []string
	ExitAfter time.Duration
}

var _ PodRunner = Logged{}

// Run implements PodRunner.
func (l Logged) Run(ctx context.Context, _ Container, logs io.Writer) error {
	for _, line := range l.Lines {
		fmt.Fprintln(logs, line)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(l.ExitAfter):
		return errors.New("PostStartHook failed")
	}
}
