package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli/clitest"
)

// As for breakglass (cmd/breakglass/help_render_test.go): every help of
// breakglass-lab, its command reference and fish completion are what
// upstream urfave/cli's templates give.
func TestHelpMatchesUpstreamTemplates(t *testing.T) {
	clitest.SameAsTemplates(t, "breakglass-lab", func() *cli.App { return newApp(streams{}, defaultName) }, func(args []string) string {
		var out bytes.Buffer
		run(context.Background(), append([]string{defaultName}, args...), streams{In: strings.NewReader(""), Out: &out, Err: &out})
		return out.String()
	}, 6)
}
