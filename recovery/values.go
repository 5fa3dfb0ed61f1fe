package recovery

// Small values every file of the package uses.

import (
	"slices"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
)

// union is a then the items of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// Duration is a duration written the short way in JSON ("1.5s", "5m"):
// the runbooks' type, so every duration breakglass writes reads the same.
type Duration = runbooks.Duration

// elapsedSince is the time since start, to the millisecond.
func elapsedSince(start time.Time) Duration {
	return Duration(time.Since(start).Round(time.Millisecond))
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func orDefault(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// without is a minus b.
func without(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}
