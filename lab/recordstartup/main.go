// Command recordstartup records what each upgrade's target kube-apiserver
// writes at its first start on the data of the version before it, from the
// lab's real binaries, into internal/startupwrites/recorded/FROM-to-TO.json
// (see internal/startupwrites for the method):
//
//	go run ./lab/recordstartup                      # every pair of lab.RecordedUpgrades
//	go run ./lab/recordstartup v1.35.4-to-v1.36.3   # just these
//
// The binaries come from `make kube-apiserver` ($BREAKGLASS_KUBE_BIN_DIR,
// else the user's cache). About 40 s a pair, two pairs at a time.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/lab"
	"github.com/breakglass-dev/breakglass/lab/internal/recordcmd"
)

func main() {
	recordcmd.Main("internal/startupwrites/recorded", "directory of the recordings", "pairs recorded at once", run)
}

func run(ctx context.Context, out string, workers int, only []string) error {
	var dir string
	var pairs [][2]string
	for _, p := range lab.RecordedUpgrades {
		if len(only) > 0 && !slices.Contains(only, p[0]+"-to-"+p[1]) {
			continue
		}
		var err error
		if dir, err = lab.Binaries(ctx, "", log.Writer(), p[0], p[1]); err != nil {
			return err
		}
		pairs = append(pairs, p)
	}
	if len(pairs) == 0 {
		return fmt.Errorf("no pair named %v (pairs: %v)", only, lab.RecordedUpgrades)
	}
	date := time.Now().UTC().Format("2006-01-02")
	sem := make(chan struct{}, max(workers, 1))
	errs := make([]error, len(pairs))
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = recordPair(ctx, dir, out, date, p[0], p[1])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func recordPair(ctx context.Context, binDir, out, date, from, to string) error {
	start := time.Now()
	tmp, err := os.MkdirTemp("", "recordstartup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logf, err := os.Create(filepath.Join(tmp, "log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	rec, err := lab.RecordStartup(ctx, lab.RecordOptions{BinDir: binDir, From: from, To: to,
		Window: 25 * time.Second, Quiet: 8 * time.Second, Dir: tmp, Log: logf})
	if err != nil {
		return fmt.Errorf("%s -> %s: %w", from, to, err)
	}
	if rec.Ready == 0 {
		return fmt.Errorf("%s -> %s: %s never became ready (its log: %s)", from, to, to, logf.Name())
	}
	sw := rec.StartupWrites(date)
	data, err := sw.Encode()
	if err != nil {
		return err
	}
	path := filepath.Join(out, sw.FileName())
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	log.Printf("%s -> %s: %d distinct writes, %d puts (%d bytes) in etcd, ready after %s -> %s (%s)",
		from, to, len(sw.Writes), sw.EtcdPuts, sw.EtcdBytes, sw.ReadyAfter, path, time.Since(start).Round(time.Second))
	return nil
}
