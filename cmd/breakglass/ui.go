package main

// How a guided run (recover, resume, revert) talks to the operator. The
// rules, for a person reading at 3 a.m. and for a CI log:
//
//   - A step is a header line with the first clause of its description
//     (all of it with -v), what it shows and asks, and one line when it
//     ends. The header waits until the step has something to say: a step
//     that ends skipped without a word is one line, its reason.
//   - A plan that is the same on every node is said once, naming the
//     nodes; the evidence behind a diagnosis or a plan (the nodes' own dry
//     runs, the log lines) shows with -v. -o json and the journal keep
//     everything either way.
//   - On a terminal, what each node is doing is one live line per node,
//     rewritten in place while the step works, cut to the terminal's width,
//     with a spinner under it. A step that ends well replaces its live lines
//     with its end line (with -v they stay); one that fails leaves them as
//     they last were, for they say where each node stopped. Anything else
//     printed meanwhile (a plan, a question) goes above them for good.
//   - Elsewhere (a pipe, a CI log) a node's line is printed, timestamped,
//     when what it says changes, never twice the same.
//   - Warnings are never rewritten.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/breakglass-dev/breakglass/recovery"
)

// terminalUI is how a guided recovery talks to the operator.
type terminalUI struct {
	w       io.Writer
	conf    *confirmer
	live    bool       // a terminal: lines rewritten in place, a spinner
	cols    func() int // the terminal's width, 0 when it cannot be told
	verbose bool
	streams streams // the command's, for OutputErr

	mu     sync.Mutex
	step   string     // "[3/9] disable"
	header string     // the current step's header, until it is printed
	began  time.Time  // the current step's start: the spinner counts from it
	lines  []liveLine // the current step's live lines, in the order first seen
	drawn  int        // how many live lines are on the screen, below the fixed text
	said   map[string]string
	stop   chan struct{}
	done   chan struct{}
}

// liveLine is what one node (or etcd, or a webhook) is doing now.
type liveLine struct{ who, msg string }

func newTerminalUI(s streams, g globalOptions) *terminalUI {
	u := &terminalUI{w: s.Err, conf: newConfirmer(s, g.Yes), live: isTerminal(s.Err), verbose: g.Verbose, said: map[string]string{}, cols: func() int { return 0 },
		streams: s}
	if f := fileOf(s.Err); f != nil {
		u.cols = func() int { return terminalWidth(f) }
	}
	return u
}

// OutputErr tells the engine, before each change, whether standard output
// and standard error still take writes (output.go).
func (u *terminalUI) OutputErr() error { return outputHealthy(u.streams) }

// isTerminal tells whether a stream is a terminal the way the terminal
// itself does (x/term asks for its settings): /dev/null is a character
// device too, and 2>/dev/null is not a terminal.
func isTerminal(stream any) bool {
	f := fileOf(stream)
	return f != nil && term.IsTerminal(int(f.Fd()))
}

// terminalWidth is the width of the terminal f, or 0 when it cannot be
// told.
func terminalWidth(f *os.File) int {
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return cols
}

// width is how many columns a live line may take: one less than the
// terminal's, so that no line wraps (a wrapped line would throw the
// rewriting off); 79 when the width cannot be told.
func (u *terminalUI) width() int {
	if n := u.cols(); n > 1 {
		return n - 1
	}
	return 79
}

// fit cuts s to n columns (runes), marking the cut.
func fit(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

var spinFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// Terminal control sequences: erase the line the cursor is on; erase from
// the cursor to the end of the screen; move up n lines.
const (
	eraseLine = "\r\033[K"
	eraseDown = "\033[J"
)

func cursorUp(n int) string { return fmt.Sprintf("\033[%dA", n) }

func (u *terminalUI) Begin(index, total int, s recovery.Step) {
	u.mu.Lock()
	u.freezeLocked()
	u.step = fmt.Sprintf("[%d/%d] %s", index, total, s.Name)
	u.header = "\n" + u.step
	if d := u.describe(s.Description); d != "" {
		u.header += ": " + d
	}
	u.began = time.Now()
	u.mu.Unlock()
	u.startSpinner()
}

// describe is a step's description as its header says it: up to the end
// of its first sentence or clause, unless verbose.
func (u *terminalUI) describe(d string) string {
	d = strings.Join(strings.Fields(d), " ")
	if u.verbose {
		return d
	}
	for _, end := range []string{". ", ": ", "; "} {
		if i := strings.Index(d, end); i >= 0 {
			d = d[:i] + "."
		}
	}
	return d
}

// headerLocked prints the current step's header, once, before the first
// thing the step says.
func (u *terminalUI) headerLocked() {
	if u.header == "" {
		return
	}
	u.eraseLiveLocked()
	header := u.header
	if u.live && !u.verbose {
		header = fit(header, u.width())
	}
	fmt.Fprintln(u.w, header)
	u.header = ""
	u.redrawLocked()
}

// startSpinner runs the spinner for the current step, on a terminal.
func (u *terminalUI) startSpinner() {
	if u.live && u.stop == nil {
		u.stop, u.done = make(chan struct{}), make(chan struct{})
		go u.spin(u.stop, u.done)
	}
}

func (u *terminalUI) spin(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			u.mu.Lock()
			fmt.Fprint(u.w, eraseLine)
			u.mu.Unlock()
			return
		case <-t.C:
			u.mu.Lock()
			line := fmt.Sprintf("%s %s %s", spinFrames[i%len(spinFrames)], strings.TrimPrefix(u.step, " "), time.Since(u.began).Round(100*time.Millisecond))
			fmt.Fprint(u.w, eraseLine+fit(line, u.width()))
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

// freezeLocked leaves the live lines on the screen as they are: what is
// printed next goes below them for good, and a later line of a node
// starts a new block.
func (u *terminalUI) freezeLocked() {
	if u.live {
		fmt.Fprint(u.w, eraseLine)
	}
	u.lines, u.drawn = nil, 0
}

// eraseLiveLocked takes the live lines and the spinner off the screen,
// leaving the cursor where the first live line was.
func (u *terminalUI) eraseLiveLocked() {
	if !u.live {
		return
	}
	fmt.Fprint(u.w, eraseLine)
	if u.drawn > 0 {
		fmt.Fprint(u.w, cursorUp(u.drawn))
	}
	fmt.Fprint(u.w, eraseDown)
	u.drawn = 0
}

func (u *terminalUI) redrawLocked() {
	if !u.live {
		return
	}
	width := u.width()
	for _, l := range u.lines {
		fmt.Fprintln(u.w, fit(fmt.Sprintf("  %s: %s", l.who, l.msg), width))
	}
	u.drawn = len(u.lines)
}

func (u *terminalUI) End(s recovery.Step, outcome string, elapsed time.Duration, message string) {
	u.pauseSpinner()
	u.mu.Lock()
	defer u.mu.Unlock()
	mark := map[string]string{recovery.OutcomeOK: "done", recovery.OutcomeSkipped: "skipped", recovery.OutcomeFailed: "FAILED", recovery.OutcomeAborted: "aborted"}[outcome]
	if outcome == recovery.OutcomeSkipped && u.header != "" {
		// Nothing said: one line, the reason.
		u.eraseLiveLocked()
		line := u.step + ": " + mark
		if message != "" {
			line += ", " + message
		}
		fmt.Fprintln(u.w, line)
		u.header, u.lines = "", nil
		return
	}
	u.headerLocked()
	if outcome == recovery.OutcomeOK && !u.verbose {
		u.eraseLiveLocked() // the end line says how it ended
	}
	u.freezeLocked()
	line := fmt.Sprintf("  => %s %s (%s)", s.Name, mark, elapsed.Round(time.Millisecond))
	if message != "" {
		line += ": " + message
	}
	fmt.Fprintln(u.w, line)
}

func (u *terminalUI) Progress(who, msg string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.headerLocked()
	warning := strings.HasPrefix(msg, "WARNING")
	if !u.live {
		if warning || u.said[who] != msg {
			u.said[who] = msg
			fmt.Fprintf(u.w, "  %s  %s: %s\n", time.Now().Format("15:04:05.000"), who, msg)
		}
		return
	}
	u.eraseLiveLocked()
	if warning {
		fmt.Fprintf(u.w, "  %s: %s\n", who, msg) // above the live lines, for good
	} else {
		u.setLine(who, msg)
	}
	u.redrawLocked()
}

func (u *terminalUI) setLine(who, msg string) {
	for i := range u.lines {
		if u.lines[i].who == who {
			u.lines[i].msg = msg
			return
		}
	}
	u.lines = append(u.lines, liveLine{who: who, msg: msg})
}

func (u *terminalUI) Show(v recovery.View) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.headerLocked()
	u.eraseLiveLocked()
	for _, l := range strings.Split(strings.TrimRight(v.Short(u.verbose), "\n"), "\n") {
		fmt.Fprintf(u.w, "    %s\n", l)
	}
	u.redrawLocked()
}

// Confirm stops the spinner while the operator reads and answers, and
// starts it again for the rest of the step (the apply and the wait after a
// confirmation take seconds).
func (u *terminalUI) Confirm(ctx context.Context, q recovery.Question) error {
	u.pauseSpinner()
	defer u.startSpinner()
	u.mu.Lock()
	u.headerLocked()
	u.freezeLocked()
	u.mu.Unlock()
	q.Text = "  " + q.Text
	return u.conf.Confirm(ctx, q)
}

// changeUI is how a standalone change (a run of one step) talks: its plan
// on standard output (unless -o json), progress lines and questions on
// standard error, no step headers. Its dry run shows the evidence (the
// nodes' own diffs): that is what it is run for.
type changeUI struct {
	out      io.Writer
	json     bool
	verbose  bool
	conf     *confirmer
	progress func(node, msg string)
	streams  streams // the command's, for OutputErr
}

func newChangeUI(s streams, g globalOptions) *changeUI {
	return &changeUI{out: s.Out, json: g.json(), verbose: g.Verbose || g.DryRun, conf: newConfirmer(s, g.Yes), progress: progressPrinter(s.Err), streams: s}
}

// OutputErr: see terminalUI's.
func (u *changeUI) OutputErr() error { return outputHealthy(u.streams) }

func (u *changeUI) Begin(int, int, recovery.Step)                    {}
func (u *changeUI) End(recovery.Step, string, time.Duration, string) {}
func (u *changeUI) Progress(node, msg string)                        { u.progress(node, msg) }
func (u *changeUI) Show(v recovery.View) {
	if !u.json {
		fmt.Fprint(u.out, v.Short(u.verbose))
	}
}
func (u *changeUI) Confirm(ctx context.Context, q recovery.Question) error {
	return u.conf.Confirm(ctx, q)
}
