// Command breakglass brings a dead kube-apiserver on Talos Linux back to life
// when an admission webhook has locked it out of its own start-up.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal cancels the context: the running step stops,
		// the journal and records are flushed, temporary changes reported.
		// Then the default handling is back, so a second signal aborts.
		<-ctx.Done()
		stop()
		fmt.Fprintln(os.Stderr, "breakglass: interrupted: stopping cleanly (press Ctrl-C again to abort at once)")
	}()
	code := run(ctx, os.Args, streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	os.Exit(code)
}
