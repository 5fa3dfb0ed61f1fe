package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/breakglass-dev/breakglass/recovery"
)

// confirmer asks the operator before anything changes. --yes answers for
// them; with no answer on standard input (a script, CI) it refuses rather
// than guess.
type confirmer struct {
	in  *bufio.Reader
	out io.Writer
	yes bool
}

func newConfirmer(s streams, yes bool) *confirmer {
	return &confirmer{in: bufio.NewReader(s.In), out: s.Err, yes: yes}
}

// Confirm asks a yes/no question; anything but yes aborts.
func (c *confirmer) Confirm(ctx context.Context, question string) error {
	if c.yes {
		return nil
	}
	fmt.Fprintf(c.out, "%s [y/N] ", question)
	answer, err := c.readLine(ctx)
	if err != nil {
		return err
	}
	switch strings.ToLower(answer) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("%w: not confirmed, nothing was changed", recovery.ErrAborted)
}

// ConfirmTyped asks the operator to type a word (an object's name) before a
// destructive step; --yes still answers for them.
func (c *confirmer) ConfirmTyped(ctx context.Context, question, word string) error {
	if c.yes {
		return nil
	}
	fmt.Fprintf(c.out, "%s\nType %q to continue: ", question, word)
	answer, err := c.readLine(ctx)
	if err != nil {
		return err
	}
	if answer != word {
		return fmt.Errorf("%w: %q was not typed, nothing was changed", recovery.ErrAborted, word)
	}
	return nil
}

func (c *confirmer) readLine(ctx context.Context) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := c.in.ReadString('\n')
		ch <- result{strings.TrimSpace(line), err}
	}()
	select {
	case <-ctx.Done():
		return "", fmt.Errorf("%w: interrupted at the confirmation, nothing was changed", recovery.ErrAborted)
	case r := <-ch:
		if r.err != nil && r.line == "" {
			return "", &noAnswerError{}
		}
		return r.line, nil
	}
}

type noAnswerError struct{}

func (noAnswerError) Error() string {
	return "no answer on standard input to the confirmation: nothing was changed"
}
func (noAnswerError) Unwrap() error { return recovery.ErrAborted }
func (noAnswerError) Hints() []string {
	return []string{"run it in a terminal to answer, or add --yes to proceed without asking (automation)"}
}
