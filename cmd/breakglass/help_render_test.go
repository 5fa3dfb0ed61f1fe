package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli/clitest"
)

// The urfave/cli fork (third_party/forked/urfave/cli) writes the help, the
// command reference and the fish completion in Go, so that no template runs
// in the on-call binary (deps_test.go): for every command of breakglass they
// are byte for byte what upstream urfave/cli's templates give.
func TestHelpMatchesUpstreamTemplates(t *testing.T) {
	clitest.SameAsTemplates(t, "breakglass", func() *cli.App { return newApp(streams{}) }, func(args []string) string {
		var out bytes.Buffer
		run(context.Background(), append([]string{"breakglass"}, args...), streams{In: strings.NewReader(""), Out: &out, Err: &out})
		return out.String()
	}, 30)
}
