package runbooks

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time span written the way Go and kubectl write them ("90s",
// "5m", "1h30m"). A bare number is refused: "300" could mean seconds or
// minutes, and at 3 a.m. nobody should have to guess.
type Duration time.Duration

// Durations in runbooks must lie in this range.
const (
	minDuration = time.Second
	maxDuration = 24 * time.Hour
	// MinRevertAfter is the shortest try-mode window: the new flags must reach
	// the pod at the kubelet's pace (its 20 s manifest poll, the old pod's
	// shutdown) and kube-apiserver start before the node rolls back.
	MinRevertAfter = 2 * time.Minute
)

// ParseDuration reads a non-zero duration with a unit; each field checks its range.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration (want a duration such as 30s, 5m or 1h)")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if strings.Trim(s, "0123456789") == "" {
			return 0, fmt.Errorf("duration %q has no unit (want a duration such as %ss or %sm)", s, s, s)
		}
		return 0, fmt.Errorf("bad duration %q (want a duration such as 30s, 5m or 1h)", s)
	}
	if d == 0 {
		// Zero would read as "not set": for revertAfter, no auto-revert.
		return 0, fmt.Errorf("duration %q is zero (leave the field out instead)", s)
	}
	// The range is the field's (revertAfter from 2m, timeouts from 1s, all
	// to 24h): its check names it.
	return Duration(d), nil
}

// Std is d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String writes d the short way: "30m", "1h30m", "90s" becomes "1m30s".
// ParseDuration reads it back to the same value.
func (d Duration) String() string {
	t := time.Duration(d)
	if t == 0 {
		return "0s"
	}
	if t < 0 || t%time.Second != 0 {
		return t.String()
	}
	var b strings.Builder
	if h := t / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
		t -= h * time.Hour
	}
	if m := t / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
		t -= m * time.Minute
	}
	if s := t / time.Second; s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// IsZero reports an unset duration (omitted from YAML and JSON).
func (d Duration) IsZero() bool { return d == 0 }

// UnmarshalYAML accepts a string with a unit only.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return fmt.Errorf("want a duration such as 30s, 5m or 1h, got %s", describe(n))
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML writes the short form ("30m").
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes the short form as a JSON string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads what MarshalJSON writes. JSON is what breakglass
// wrote itself (journals, step parameters, elapsed times), so any duration
// Go writes is accepted; runbook files are checked by UnmarshalYAML.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"5m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q (want a duration such as 30s, 5m or 1h)", s)
	}
	*d = Duration(v)
	return nil
}
