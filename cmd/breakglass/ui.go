package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// terminalUI is how a guided recovery talks to the operator. On a terminal
// a spinner shows that a step is still working; otherwise (a pipe, a CI
// log) every line is plain and timestamped.
type terminalUI struct {
	w       io.Writer
	conf    *confirmer
	spinner bool

	mu      sync.Mutex
	current string
	began   time.Time // the current step's start: the spinner counts from it
	stop    chan struct{}
	done    chan struct{}
}

func newTerminalUI(s streams, yes bool) *terminalUI {
	return &terminalUI{w: s.Err, conf: newConfirmer(s, yes), spinner: isTerminal(s.Err)}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

var spinFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func (u *terminalUI) Begin(index, total int, s recovery.Step) {
	u.mu.Lock()
	fmt.Fprintf(u.w, "\n[%d/%d] %s (%s)\n", index, total, s.Name, s.Action())
	if s.Description != "" {
		for _, l := range strings.Split(strings.TrimSpace(s.Description), "\n") {
			fmt.Fprintf(u.w, "      %s\n", l)
		}
	}
	u.current, u.began = s.Name, time.Now()
	u.mu.Unlock()
	u.startSpinner()
}

// startSpinner runs the spinner for the current step, on a terminal.
func (u *terminalUI) startSpinner() {
	if u.spinner && u.stop == nil {
		u.stop, u.done = make(chan struct{}), make(chan struct{})
		go u.spin(u.stop, u.done, u.began)
	}
}

func (u *terminalUI) spin(stop, done chan struct{}, start time.Time) {
	defer close(done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			u.mu.Lock()
			fmt.Fprint(u.w, "\r\033[K")
			u.mu.Unlock()
			return
		case <-t.C:
			u.mu.Lock()
			fmt.Fprintf(u.w, "\r\033[K%s %s %s", spinFrames[i%len(spinFrames)], u.current, time.Since(start).Round(100*time.Millisecond))
			u.mu.Unlock()
		}
	}
}

func (u *terminalUI) pauseSpinner() {
	if u.stop != nil {
		close(u.stop)
		<-u.done
		u.stop = nil
	}
}

func (u *terminalUI) End(s recovery.Step, outcome string, elapsed time.Duration, message string) {
	u.pauseSpinner()
	u.mu.Lock()
	defer u.mu.Unlock()
	mark := map[string]string{recovery.OutcomeOK: "done", recovery.OutcomeSkipped: "skipped", recovery.OutcomeFailed: "FAILED", recovery.OutcomeAborted: "aborted"}[outcome]
	fmt.Fprintf(u.w, "  => %s %s (%s)", s.Name, mark, elapsed.Round(time.Millisecond))
	if message != "" {
		fmt.Fprintf(u.w, ": %s", message)
	}
	fmt.Fprintln(u.w)
}

func (u *terminalUI) Progress(node, msg string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.spinner {
		fmt.Fprint(u.w, "\r\033[K")
	}
	fmt.Fprintf(u.w, "  %s  %s: %s\n", time.Now().Format("15:04:05.000"), node, msg)
}

func (u *terminalUI) Show(v recovery.View) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.spinner {
		fmt.Fprint(u.w, "\r\033[K")
	}
	for _, l := range strings.Split(strings.TrimRight(v.String(), "\n"), "\n") {
		fmt.Fprintf(u.w, "    %s\n", l)
	}
}

// Confirm stops the spinner while the operator reads and answers, and
// starts it again for the rest of the step (the apply and the wait after a
// confirmation take seconds).
func (u *terminalUI) Confirm(ctx context.Context, q recovery.Question) error {
	u.pauseSpinner()
	defer u.startSpinner()
	q.Text = "  " + q.Text
	return u.conf.Confirm(ctx, q)
}

// changeUI is how a standalone change (a run of one step) talks: its plan
// on standard output (unless -o json), progress lines and questions on
// standard error, no step headers.
type changeUI struct {
	out      io.Writer
	json     bool
	conf     *confirmer
	progress func(node, msg string)
}

func newChangeUI(s streams, g globalOptions) *changeUI {
	return &changeUI{out: s.Out, json: g.json(), conf: newConfirmer(s, g.Yes), progress: progressPrinter(s.Err)}
}

func (u *changeUI) Begin(int, int, recovery.Step)                    {}
func (u *changeUI) End(recovery.Step, string, time.Duration, string) {}
func (u *changeUI) Progress(node, msg string)                        { u.progress(node, msg) }
func (u *changeUI) Show(v recovery.View) {
	if !u.json {
		fmt.Fprint(u.out, v.String())
	}
}
func (u *changeUI) Confirm(ctx context.Context, q recovery.Question) error {
	return u.conf.Confirm(ctx, q)
}
