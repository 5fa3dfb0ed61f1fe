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
// than guess. A confirmation is a question: an answer it cannot read (a
// mistyped name, "yse") is asked again, a few times; "no" is a no. What a
// no means for the run, the engine says.
//
// On a terminal the answer typed ends the question's line (the terminal
// echoes it). Anywhere else (an answer piped in, stderr in a log) nothing
// does, so the confirmer writes the answer after the question and ends the
// line itself: what follows starts a line of its own.
type confirmer struct {
	in   *bufio.Reader
	out  io.Writer
	yes  bool
	echo bool // write the answer and end the line: not typed at a terminal that shows out
}

// confirmTries is how many answers a question reads before taking the
// last unreadable one as a no.
const confirmTries = 3

func newConfirmer(s streams, yes bool) *confirmer {
	return &confirmer{in: bufio.NewReader(s.In), out: s.Err, yes: yes, echo: !isTerminal(s.In) || !isTerminal(s.Err)}
}

// Confirm asks q: a yes or no, or the word to type.
func (c *confirmer) Confirm(ctx context.Context, q recovery.Question) error {
	if c.yes {
		return nil
	}
	prompt := q.Text + " [y/N] "
	if q.Word != "" {
		prompt = fmt.Sprintf("%s\nType %q to continue: ", q.Text, q.Word)
	}
	for try := 1; ; try++ {
		fmt.Fprint(c.out, prompt)
		answer, err := c.readLine(ctx)
		if c.echo {
			fmt.Fprintln(c.out, answer)
		}
		if err != nil {
			return err
		}
		yes, no := answer == q.Word, false
		switch strings.ToLower(answer) {
		case "", "n", "no":
			no = true
		case "y", "yes":
			yes = yes || q.Word == ""
		}
		switch {
		case yes:
			return nil
		case no && q.Word != "":
			return recovery.Declined("%q was not typed", q.Word)
		case no:
			return recovery.Declined("not confirmed")
		case try == confirmTries && q.Word != "":
			return recovery.Declined("%q was not typed (%d tries)", q.Word, try)
		case try == confirmTries:
			return recovery.Declined("not confirmed (%d unreadable answers)", try)
		case q.Word != "":
			fmt.Fprintf(c.out, "%q is not %q; type it exactly (or no to decline).\n", answer, q.Word)
			prompt = fmt.Sprintf("Type %q to continue: ", q.Word)
		default:
			fmt.Fprintf(c.out, "answer yes or no.\n")
		}
	}
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
		return "", fmt.Errorf("%w: interrupted at the confirmation", recovery.ErrAborted)
	case r := <-ch:
		if r.err != nil && r.line == "" {
			return "", &noAnswerError{}
		}
		return r.line, nil
	}
}

type noAnswerError struct{}

func (noAnswerError) Error() string { return "no answer on standard input to the confirmation" }
func (noAnswerError) Unwrap() error { return recovery.ErrAborted }
func (noAnswerError) Hints() []string {
	return []string{"run it in a terminal to answer, or add --yes to proceed without asking (automation)"}
}
