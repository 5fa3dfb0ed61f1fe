package talostest

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"
)

// logBuffer keeps a container's log lines (in the CRI log file format kubelet writes,
// which is what Talos streams for CRI containers) and wakes followers on new lines.
type logBuffer struct {
	mu      sync.Mutex
	lines   [][]byte
	notify  chan struct{}
	maxKeep int
}

func newLogBuffer() *logBuffer {
	return &logBuffer{notify: make(chan struct{}), maxKeep: 100000}
}

func (b *logBuffer) appendLine(line []byte) {
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
func (b *logBuffer) Lines() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()

	return append([][]byte(nil), b.lines...)
}

// stream sends the last tail lines (all when tail < 0), then, with follow, every new
// line until ctx ends.
func (b *logBuffer) stream(ctx context.Context, tail int, follow bool, send func([]byte) error) error {
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

// criWriter turns written text into CRI log lines: "<RFC3339Nano> stderr F <line>".
type criWriter struct {
	mu      sync.Mutex
	buf     *logBuffer
	stream  string
	partial []byte
}

var _ io.Writer = (*criWriter)(nil)

func (w *criWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()

	data := append(w.partial, p...)

	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}

		w.emit(data[:i])
		data = data[i+1:]
	}

	w.partial = append([]byte(nil), data...)

	return len(p), nil
}

func (w *criWriter) emit(line []byte) {
	out := make([]byte, 0, len(line)+48)
	out = time.Now().UTC().AppendFormat(out, time.RFC3339Nano)
	out = append(out, ' ')
	out = append(out, w.stream...)
	out = append(out, " F "...)
	out = append(out, line...)
	out = append(out, '\n')
	w.buf.appendLine(out)
}

// flush emits a trailing partial line.
func (w *criWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()

	if len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = nil
	}
}
