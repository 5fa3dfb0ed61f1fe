// Command breakglass-lab runs what breakglass's lab needs on this machine:
// a real etcd, real kube-apiserver processes and emulated Talos nodes, to
// reproduce the admission-webhook deadlock and rehearse the recovery
// (up, rehearse, bench). It is its own binary so that the on-call
// breakglass links no etcd server, no Talos emulator and no test code;
// `breakglass lab ARGS` runs `breakglass-lab ARGS`.
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
		// The first signal cancels the context: the lab stops its
		// kube-apiservers, etcd and nodes and removes what it must.
		// Then the default handling is back, so a second signal aborts.
		<-ctx.Done()
		stop()
		fmt.Fprintln(os.Stderr, "breakglass: interrupted: stopping cleanly (press Ctrl-C again to abort at once)")
	}()
	os.Exit(run(ctx, os.Args, streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
