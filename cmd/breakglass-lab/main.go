// Command breakglass-lab runs what breakglass's lab needs on this machine:
// a real etcd, real kube-apiserver processes and emulated Talos nodes, to
// reproduce the admission-webhook deadlock and rehearse the recovery
// (up, rehearse, bench). It is its own binary so that the on-call
// breakglass links no etcd server, no Talos emulator and no test code;
// `breakglass lab ARGS` runs `breakglass-lab ARGS`.
package main

import (
	"os"

	"github.com/breakglass-dev/breakglass/internal/command"
)

func main() {
	os.Exit(run(command.Interruptible(), os.Args, streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
