// Command breakglass brings a dead kube-apiserver on Talos Linux back to life
// when an admission webhook has locked it out of its own start-up.
package main

import (
	"os"
)

func main() {
	os.Exit(runInterruptible(os.Args, streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
