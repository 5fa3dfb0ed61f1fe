package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
)

// screen is what a terminal shows of what was written to it: the few
// control sequences terminalUI uses (carriage return, erase line, erase
// down, cursor up) applied to rows of text. A row longer than the width
// wraps, as a terminal wraps it.
type screen struct {
	mu    sync.Mutex
	width int
	rows  []string
	row   int
	col   int
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := string(p)
	for len(in) > 0 {
		switch {
		case strings.HasPrefix(in, "\033["):
			end := strings.IndexAny(in, "KJA")
			arg, op := in[2:end], in[end]
			in = in[end+1:]
			switch op {
			case 'K':
				s.put("")
				s.rows[s.row] = s.rows[s.row][:s.col]
			case 'J':
				s.put("")
				s.rows[s.row] = s.rows[s.row][:s.col]
				s.rows = s.rows[:s.row+1]
			case 'A':
				n, _ := strconv.Atoi(arg)
				s.row = max(0, s.row-n)
			}
		case in[0] == '\r':
			s.col, in = 0, in[1:]
		case in[0] == '\n':
			s.row, s.col, in = s.row+1, 0, in[1:]
		default:
			r := []rune(in)
			s.put(string(r[0]))
			in = string(r[1:])
		}
	}
	return len(p), nil
}

// put writes text at the cursor (nothing: makes sure the row exists).
func (s *screen) put(text string) {
	for len(s.rows) <= s.row {
		s.rows = append(s.rows, "")
	}
	if text == "" {
		return
	}
	if s.col >= s.width {
		s.row, s.col = s.row+1, 0
		s.put("")
	}
	line := []rune(s.rows[s.row])
	for len(line) < s.col {
		line = append(line, ' ')
	}
	if s.col < len(line) {
		line[s.col] = []rune(text)[0]
	} else {
		line = append(line, []rune(text)...)
	}
	s.rows[s.row] = string(line)
	s.col++
}

func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimRight(strings.Join(s.rows, "\n"), "\n")
}

func testTerminal(width int, verbose bool) (*terminalUI, *screen) {
	scr := &screen{width: width}
	u := &terminalUI{w: scr, conf: &confirmer{yes: true}, live: true, verbose: verbose, said: map[string]string{}, cols: func() int { return width }}
	return u, scr
}

func step(name, description string) recovery.Step {
	return recovery.Step{Name: name, Description: description, Params: &runbooks.VerifyParams{}}
}

// A wait on three nodes: each node's line is rewritten in place, cut to
// the width, and replaced by the end line when the step ends well.
func TestTerminalLiveLinesRewrittenInPlace(t *testing.T) {
	u, scr := testTerminal(60, false)
	s := step("wait-apiserver", "Wait for kube-apiserver to be ready on every node. It takes seconds.")
	u.Begin(4, 9, s)
	for i := range 20 {
		for _, n := range []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"} {
			u.Progress(n, "not ready: failing "+strings.Repeat("poststarthook/rbac/bootstrap-roles, ", i%4+1)+"(0 restarts)")
		}
	}
	mid := scr.text()
	if got := strings.Count(mid, "127.0.0.1"); got != 3 {
		t.Errorf("while waiting the screen shows %d node lines, want 3 (one per node):\n%s", got, mid)
	}
	for _, row := range strings.Split(mid, "\n") {
		if n := len([]rune(row)); n >= 60 {
			t.Errorf("a live line takes %d columns of 60 (it would wrap): %q", n, row)
		}
	}
	u.Progress("127.0.0.12", "WARNING: something to keep")
	u.End(s, recovery.OutcomeOK, 3*time.Second, "ready on every node")
	got := scr.text()
	want := "\n[4/9] wait-apiserver: Wait for kube-apiserver to be ready…\n  127.0.0.12: WARNING: something to keep\n  => wait-apiserver done (3s): ready on every node"
	if got != want {
		t.Errorf("after the step the screen is\n%q\nwant\n%q", got, want)
	}
}

// A step that fails keeps each node's last line: it says where it stopped.
func TestTerminalFailedStepKeepsNodeLines(t *testing.T) {
	u, scr := testTerminal(100, false)
	s := step("verify", "Check it.")
	u.Begin(9, 9, s)
	u.Progress("127.0.0.11", "ready")
	u.Progress("127.0.0.12", "not ready: failing etcd")
	u.Progress("127.0.0.12", "not answering: connection refused")
	u.End(s, recovery.OutcomeFailed, time.Second, "timed out")
	want := "\n[9/9] verify: Check it.\n  127.0.0.11: ready\n  127.0.0.12: not answering: connection refused\n  => verify FAILED (1s): timed out"
	if got := scr.text(); got != want {
		t.Errorf("screen\n%q\nwant\n%q", got, want)
	}
}

// A step skipped without a word is one line; a plan the same on every
// node is said once; its evidence shows with -v only.
func TestTerminalSkippedStepAndCollapsedPlan(t *testing.T) {
	view := recovery.View{Head: "Plan: disable on 3 node(s)\n"}
	for _, n := range []string{"127.0.0.11", "127.0.0.12", "127.0.0.13"} {
		view.Parts = append(view.Parts, recovery.ViewPart{Node: n, About: "cluster c, Talos v1.13.8", Body: "    disable-admission-plugins: (none) -> X\n", Detail: "  node " + n + "'s dry run:\n    | +x\n"})
	}
	for _, verbose := range []bool{false, true} {
		u, scr := testTerminal(200, verbose)
		snap := step("snapshot", "Save a snapshot. Skipped when nothing is to be deleted.")
		u.Begin(5, 9, snap)
		u.End(snap, recovery.OutcomeSkipped, 0, "nothing to delete")
		dis := step("disable", "Add the plugins; Talos restarts the pod. The value is recorded.")
		u.Begin(3, 9, dis)
		u.Show(view)
		if err := u.Confirm(context.Background(), recovery.Question{Text: "disable on 3 node(s)?"}); err != nil {
			t.Fatal(err)
		}
		u.End(dis, recovery.OutcomeOK, time.Second, "applied")
		got := scr.text()
		if !strings.HasPrefix(got, "[5/9] snapshot: skipped, nothing to delete\n") {
			t.Errorf("verbose %v: a skipped step is not one line:\n%s", verbose, got)
		}
		if !strings.Contains(got, "the same on all 3 nodes: 127.0.0.11, 127.0.0.12, 127.0.0.13 (cluster c, Talos v1.13.8)") || strings.Count(got, "disable-admission-plugins") != 1 {
			t.Errorf("verbose %v: the plan is not said once for the three nodes:\n%s", verbose, got)
		}
		if dry := strings.Count(got, "'s dry run:"); verbose && dry != 3 || !verbose && dry != 0 {
			t.Errorf("verbose %v: %d nodes' dry runs shown:\n%s", verbose, dry, got)
		}
		header := "[3/9] disable: Add the plugins."
		if verbose {
			header = "[3/9] disable: Add the plugins; Talos restarts the pod. The value is recorded."
		}
		if !strings.Contains(got, header+"\n") {
			t.Errorf("verbose %v: no header %q:\n%s", verbose, header, got)
		}
	}
}

// Not on a terminal, a node's line is printed when it changes, once.
func TestPlainLinesOnChangeOnly(t *testing.T) {
	var b bytes.Buffer
	u := &terminalUI{w: &b, conf: &confirmer{yes: true}, said: map[string]string{}, cols: func() int { return 0 }}
	s := step("wait", "Wait.")
	u.Begin(1, 1, s)
	for range 5 {
		u.Progress("127.0.0.11", "not ready")
	}
	u.Progress("127.0.0.11", "ready")
	u.End(s, recovery.OutcomeOK, time.Second, "ok")
	if n := strings.Count(b.String(), "127.0.0.11: "); n != 2 {
		t.Errorf("%d lines for the node, want 2 (one per change):\n%s", n, b.String())
	}
	if strings.Contains(b.String(), "\033") {
		t.Errorf("control sequences written to a non-terminal: %q", b.String())
	}
}

// Issue 29: off a terminal nothing echoes the answer, so the question's
// line was never ended, and what came next (the node's progress, the
// step's end line) went on the same line. The answer is written after the
// question, and the line ended.
func TestPlainQuestionOnItsOwnLine(t *testing.T) {
	for _, c := range []struct {
		name, in string
		q        recovery.Question
		want     string
	}{
		{"yes", "yes\n", recovery.Question{Text: "disable on 1 node(s)?"}, "  disable on 1 node(s)? [y/N] yes\n"},
		{"no", "n\n", recovery.Question{Text: "disable on 1 node(s)?"}, "  disable on 1 node(s)? [y/N] n\n"},
		{"asked again", "yse\ny\n", recovery.Question{Text: "disable on 1 node(s)?"}, "  disable on 1 node(s)? [y/N] yse\nanswer yes or no.\n  disable on 1 node(s)? [y/N] y\n"},
		{"no answer", "", recovery.Question{Text: "disable on 1 node(s)?"}, "  disable on 1 node(s)? [y/N] \n"},
		{"word", "web\n", recovery.Question{Text: "delete?", Word: "web"}, "  delete?\nType \"web\" to continue: web\n"},
	} {
		for _, progress := range []bool{false, true} {
			var b bytes.Buffer
			u := &terminalUI{w: &b, conf: newConfirmer(streams{In: strings.NewReader(c.in), Err: &b}, false), said: map[string]string{}, cols: func() int { return 0 }}
			s := step("disable", "Disable.")
			u.Begin(3, 9, s)
			_ = u.Confirm(context.Background(), c.q)
			before := b.String()
			if progress {
				u.Progress("127.0.0.11", "applying")
			}
			u.End(s, recovery.OutcomeOK, time.Second, "applied")
			if !strings.HasSuffix(before, c.want) {
				t.Errorf("%s: the question reads\n%q\nwant it to end\n%q", c.name, before, c.want)
			}
			for _, l := range strings.Split(b.String(), "\n") {
				if strings.Contains(l, "?") && (strings.Contains(l, "=>") || strings.Contains(l, "127.0.0.11")) {
					t.Errorf("%s: the question and what follows share a line: %q", c.name, l)
				}
			}
		}
	}
}
