// Package childproc starts the processes the lab and the emulator run beside them
// (kube-apiserver, etcd members) so that none outlives the process that started it.
package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd in a process group of its own (a signal to the group reaches
// everything it started), killed (SIGKILL) when the process that started it dies,
// and returns a channel that receives cmd.Wait's result once it exited.
func Start(cmd *exec.Cmd) (<-chan error, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	started := make(chan error, 1)
	exited := make(chan error, 1)

	go func() {
		// Pdeathsig fires when the thread that started the child ends: keep that
		// thread for as long as the child runs. Unlock it after, never end
		// locked: a goroutine that ends locked takes its thread with it, and
		// a child another goroutine started from that thread earlier (lab's
		// recorder starts kube-apiserver with Pdeathsig too) would be killed
		// with it ("signal: killed" in TestStartupRecordings beside the labs).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()

		if err := cmd.Start(); err != nil {
			started <- err

			return
		}

		started <- nil
		exited <- cmd.Wait()
	}()

	if err := <-started; err != nil {
		return nil, err
	}

	return exited, nil
}

// Signal sends sig to the process group of cmd, started by Start.
func Signal(cmd *exec.Cmd, sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) }
