//go:build unix

package main

import "syscall"

// On Unix, `breakglass lab` execs breakglass-lab, as kubectl runs its plugins:
// one process, so a Ctrl-C reaches the lab once, any signal sent to
// breakglass's pid reaches the lab, and its exit status is breakglass's.
func init() { execLab = syscall.Exec }
