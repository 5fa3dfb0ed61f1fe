package failure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCode(t *testing.T) {
	busy := New(Conflict, "the node is busy")
	partialOf := func(errs ...error) error {
		return errors.Join(append([]error{New(Partial, "partial failure")}, errs...)...)
	}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain", errors.New("boom"), 1},
		{"sentinel", fmt.Errorf("node 1: %w", busy), 6},
		{"input", Input("try this", "bad %s", "flag"), 2},
		{"partial wins over its nodes' causes", partialOf(New(Unreachable, "x"), New(Refused, "y")), 5},
		{"an outcome wins over a failure", errors.Join(New(Timeout, "t"), New(AuditDeadlock, "d")), 24},
		{"interrupted", fmt.Errorf("wait: %w", context.Canceled), 8},
		{"credentials before unreachable", errors.Join(New(Unreachable, "u"), New(Credentials, "c")), 3},
		{"reported", Reported{Category: Disabled}, 20},
		{"output", fmt.Errorf("standard output: %w", New(Output, "write /dev/stdout: no space left on device")), 11},
		{"a command's own failure before its lost output", errors.Join(New(Unreachable, "u"), New(Output, "o")), 4},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("%s: Code = %d, want %d", tc.name, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", busy), busy) {
		t.Error("a sentinel keeps its identity")
	}
}

func TestHintsOnceEachInOrder(t *testing.T) {
	err := errors.Join(Input("first", "a"), fmt.Errorf("wrapped: %w", Input("second", "b")), Input("first", "c"))
	if got := strings.Join(Hints(err), "|"); got != "first|second" {
		t.Errorf("Hints = %q", got)
	}
}

// Bad input that wraps a cause (%w) is the cause's category when it has
// one, and says the cause's hints after its own.
func TestInputWrapsItsCause(t *testing.T) {
	cause := Hinted(New(Conflict, "held by someone else"), "wait")
	err := Input("name the kind", "--delete: %w", cause)
	if err.Error() != "--delete: held by someone else" || !errors.Is(err, cause) || !errors.Is(err, BadInput) {
		t.Errorf("%v: does not wrap its cause as bad input", err)
	}
	if Code(err) != int(Conflict) || strings.Join(Hints(err), "|") != "name the kind|wait" {
		t.Errorf("code %d, hints %q", Code(err), Hints(err))
	}
	if plain := Input("", "bad %s", "flag"); Code(plain) != int(BadInput) || len(Hints(plain)) != 0 {
		t.Errorf("%v: code %d, hints %q", plain, Code(plain), Hints(plain))
	}
}

func TestEveryCategoryHasItsWords(t *testing.T) {
	seen := map[Category]bool{}
	for _, e := range Table {
		if seen[e.Category] || e.What == "" {
			t.Errorf("exit code %d listed twice or without words", e.Category)
		}
		seen[e.Category] = true
	}
	for _, c := range precedence {
		if !seen[c] {
			t.Errorf("category %d has no row in the table", c)
		}
	}
}
