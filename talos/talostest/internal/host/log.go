package host

import (
	"bytes"
	"context"
	"sync"
)

// Log keeps the lines of one log (a service's, machined's own, a container's) and
// wakes its followers on new lines.
type Log struct {
	mu      sync.Mutex
	lines   [][]byte
	notify  chan struct{}
	maxKeep int
}

// NewLog returns an empty log.
func NewLog() *Log {
	return &Log{notify: make(chan struct{}), maxKeep: 100000}
}

// Append adds a line (with its newline).
func (b *Log) Append(line []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()

	b.lines = append(b.lines, line)
	if len(b.lines) > b.maxKeep {
		b.lines = b.lines[len(b.lines)-b.maxKeep:]
	}

	close(b.notify)
	b.notify = make(chan struct{})
}

// Lines returns a copy of the buffered lines.
func (b *Log) Lines() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()

	return append([][]byte(nil), b.lines...)
}

// Stream sends the last tail lines (all when tail < 0), then, with follow, every new
// line until ctx ends.
func (b *Log) Stream(ctx context.Context, tail int, follow bool, send func([]byte) error) error {
	b.mu.Lock()
	start := 0
	if tail >= 0 && tail < len(b.lines) {
		start = len(b.lines) - tail
	}

	chunk := bytes.Join(b.lines[start:], nil)
	next := len(b.lines)
	wait := b.notify
	b.mu.Unlock()

	if len(chunk) > 0 {
		if err := send(chunk); err != nil {
			return err
		}
	}

	for follow {
		select {
		case <-ctx.Done():
			return nil
		case <-wait:
		}

		b.mu.Lock()
		// lines may have been dropped from the front while waiting
		if next > len(b.lines) {
			next = len(b.lines)
		}

		chunk = bytes.Join(b.lines[next:], nil)
		next = len(b.lines)
		wait = b.notify
		b.mu.Unlock()

		if len(chunk) > 0 {
			if err := send(chunk); err != nil {
				return err
			}
		}
	}

	return nil
}

// LineWriter hands each whole line written to it to Emit (without its newline), as a
// process writes its log in pieces; Flush hands over a last line that has none.
type LineWriter struct {
	Emit func(line []byte)

	mu      sync.Mutex
	partial []byte
}

func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()

	data := append(w.partial, p...)

	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}

		w.Emit(data[:i])
		data = data[i+1:]
	}

	w.partial = bytes.Clone(data)

	return len(p), nil
}

// Flush emits a trailing partial line.
func (w *LineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()

	if len(w.partial) > 0 {
		w.Emit(w.partial)
		w.partial = nil
	}
}
