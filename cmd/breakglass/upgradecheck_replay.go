package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery/upgradecheck"
)

// labReplayer hands the replay over to breakglass-lab, as `breakglass lab
// replay` does (the on-call binary links no lab): `breakglass-lab --output
// json replay --from A --to B -f OBJECTS -f EXTRAARGS --timeout T`, its
// answer read from standard output. The cluster's objects and flags go
// through two files in a private temporary directory, removed after (the
// admission objects and extraArgs hold no secret; the machine config,
// which does, is never written). One replay runs at a time: each starts
// two kube-apiservers on this machine.
func labReplayer(timeout time.Duration) upgradecheck.Replayer {
	var one sync.Mutex
	return func(ctx context.Context, req upgradecheck.ReplayRequest) (*upgradecheck.ReplayResult, error) {
		path, err := findLab()
		if err != nil {
			return nil, err
		}
		one.Lock()
		defer one.Unlock()
		dir, err := os.MkdirTemp("", "breakglass-replay-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		args := []string{"--output", "json", "replay", "--from", req.From, "--to", req.To}
		if req.Timeout > 0 {
			timeout = req.Timeout
		}
		args = append(args, "--timeout", timeout.String())
		for name, data := range map[string][]byte{"admission-objects.yaml": req.Objects, "extraargs.yaml": req.ExtraArgs} {
			if data == nil {
				continue
			}
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				return nil, err
			}
			args = append(args, "-f", p)
		}
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Args[0] = labArgv0
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) } // the lab stops cleanly on the first
		cmd.WaitDelay = 30 * time.Second
		err = cmd.Run()
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			return nil, fmt.Errorf("run %s: %w", path, err)
		}
		var res upgradecheck.ReplayResult
		if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil || res.Outcome == "" {
			return nil, &replayFailed{code: code, stderr: stderr.String()}
		}
		return &res, nil
	}
}

// replayFailed: the lab ran and said no verdict (a binary missing, an
// input it refused); its own words are the error.
type replayFailed struct {
	code   int
	stderr string
}

func (e *replayFailed) Error() string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(e.stderr), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "hint:") {
			lines = append(lines, termsafe.Text(l))
		}
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return fmt.Sprintf("%s exited %d: %s", labBinary, e.code, strings.Join(lines, " / "))
}

func (e *replayFailed) Hints() []string {
	var out []string
	for _, l := range strings.Split(e.stderr, "\n") {
		if h, ok := strings.CutPrefix(strings.TrimSpace(l), "hint: "); ok {
			out = append(out, termsafe.Text(h))
		}
	}
	return out
}

func (e *replayFailed) Unwrap() error {
	if e.code == int(failure.LabNoBinaries) {
		return failure.LabNoBinaries
	}
	return failure.Unexpected
}
