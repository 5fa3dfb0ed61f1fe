// Command breakglass brings a dead kube-apiserver on Talos Linux back to life
// when an admission webhook has locked it out of its own start-up.
package main

import (
	"os"

	"github.com/breakglass-dev/breakglass/internal/command"
)

func main() {
	os.Exit(run(command.Interruptible(), os.Args, streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
