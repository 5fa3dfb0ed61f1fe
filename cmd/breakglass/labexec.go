package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// labBinary is the lab's own binary (cmd/breakglass-lab).
var labBinary = func() string {
	if runtime.GOOS == "windows" {
		return "breakglass-lab.exe"
	}
	return "breakglass-lab"
}()

// labArgv0 is the name the lab is run under: its help and usage errors then
// read "breakglass lab up ...", as they did when the lab was built in.
const labArgv0 = "breakglass lab"

// handOverLab runs `breakglass-lab [--output O] SUB ARGS...`: the
// subcommand's arguments verbatim (it skips flag parsing), and of the
// global flags the one the lab uses.
func handOverLab(s streams, sub string) cli.ActionFunc {
	return func(c *cli.Context) error {
		var args []string
		if c.IsSet("output") {
			args = append(args, "--output", c.String("output"))
		}
		args = append(args, sub)
		args = append(args, c.Args().Slice()...)
		path, err := findLab()
		if err != nil {
			return err
		}
		return runLab(s, path, args)
	}
}

// findLab looks for breakglass-lab beside the running executable (its
// symlinks resolved too), then on PATH, as git and kubectl find their
// external subcommands.
func findLab() (string, error) {
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
		if real, err := filepath.EvalSymlinks(exe); err == nil && filepath.Dir(real) != dirs[0] {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, labBinary)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && (runtime.GOOS == "windows" || fi.Mode()&0o111 != 0) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(labBinary); err == nil {
		return p, nil // a PATH entry ".": exec.ErrDot, not taken
	}
	beside := ""
	if len(dirs) > 0 {
		beside = dirs[0]
	}
	return "", &labMissingError{Beside: beside}
}

// labMissingError: breakglass-lab is neither beside breakglass nor on PATH.
type labMissingError struct{ Beside string }

func (e *labMissingError) Error() string {
	where := "next to breakglass"
	if e.Beside != "" {
		where += " (in " + e.Beside + ")"
	}
	return "the lab is its own binary, " + labBinary + ", and it is not " + where + " nor on PATH"
}

func (e *labMissingError) Unwrap() error { return failure.LabNoBinaries }

func (e *labMissingError) Hints() []string {
	dir := e.Beside
	if dir == "" {
		dir = "DIR"
	}
	return []string{
		"from a checkout, build both into bin/: make build (then run bin/breakglass lab ...)",
		"or build it next to this breakglass: go build -o " + filepath.Join(dir, labBinary) + " ./cmd/breakglass-lab",
		"or install it on PATH, from a clone of breakglass: go install ./cmd/breakglass-lab",
	}
}

// labExited is the lab's own exit code: the lab has reported whatever it
// had to, so breakglass prints nothing more and exits with it unchanged.
type labExited int

func (e labExited) Error() string { return fmt.Sprintf("%s exited %d", labBinary, int(e)) }
func (e labExited) Unwrap() error { return failure.Reported{Category: failure.Category(e)} }

// execLab replaces this process with the lab (Unix: labexec_unix.go), so
// the lab gets the terminal, the signals and the exit status as if it had
// been run itself. It returns only if it could not.
var execLab func(path string, argv, env []string) error

// runLab runs the lab with args. When breakglass's streams are the
// process's own, it execs the lab (where execLab exists). Otherwise (tests
// that run the CLI in-process, or no exec) it runs the lab as a child with
// the streams attached, forwards SIGINT and SIGTERM to it (the lab decides
// what they mean: the first stops it cleanly) and returns its exit code.
func runLab(s streams, path string, args []string) error {
	argv := append([]string{labArgv0}, args...)
	if execLab != nil && s.In == os.Stdin && fileOf(s.Out) == os.Stdout && fileOf(s.Err) == os.Stderr {
		err := execLab(path, argv, os.Environ())
		return fmt.Errorf("run %s: %w", path, err) // still here: nothing ran
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runLabChild(s, path, argv, sigs)
}

// runLabChild runs the lab and forwards the signals that arrive on sigs
// until it exits. Not exec.CommandContext: a cancelled context (breakglass
// was interrupted) is the lab's to handle, through the signal it also got.
func runLabChild(s streams, path string, argv []string, sigs <-chan os.Signal) error {
	// The lab writes to breakglass's own files where they are files (its
	// terminal, so that it can tell it is one), and its failed writes are
	// its own.
	cmd := &exec.Cmd{Path: path, Args: argv, Stdin: s.In, Stdout: unwatched(s.Out), Stderr: unwatched(s.Err)}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig) // it may have exited meanwhile
		case err := <-done:
			var exit *exec.ExitError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &exit) && exit.ExitCode() >= 0:
				return labExited(exit.ExitCode())
			case errors.As(err, &exit):
				// Killed by a signal: the shell's convention, 128+N.
				if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return labExited(128 + int(ws.Signal()))
				}
				return labExited(int(failure.Unexpected))
			default:
				return fmt.Errorf("run %s: %w", path, err)
			}
		}
	}
}
