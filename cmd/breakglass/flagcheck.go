package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/breakglass-dev/breakglass/runbooks"
)

// durationRanges are the accepted ranges of the duration flags, checked
// before anything is dialled: a bad value must change nothing.
var durationRanges = map[string][2]time.Duration{
	"revert-after": {runbooks.MinRevertAfter, 24 * time.Hour},
	"wait-timeout": {time.Second, 24 * time.Hour},
	"timeout":      {time.Second, 24 * time.Hour},
}

// checkDurations refuses a duration flag given outside its range.
func checkDurations(c *cli.Context) error {
	for _, name := range c.FlagNames() {
		r, ok := durationRanges[name]
		if !ok || !c.IsSet(name) {
			continue
		}
		if d := c.Duration(name); d < r[0] || d > r[1] {
			return usageError{fmt.Sprintf("--%s %s is out of range: from %s to %s", name, d, r[0], r[1]), fmt.Sprintf("give --%s a value from %s to %s, e.g. --%s %s", name, r[0], r[1], name, 10*r[0])}
		}
	}
	return nil
}
