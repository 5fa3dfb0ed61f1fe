// Command recordargs records what each lab kube-apiserver binary accepts on
// its command line (flags, feature gates, --runtime-config group versions)
// into internal/apiserverargs/recorded/VERSION.json, asking the binaries
// themselves (see internal/apiserverargs for the method):
//
//	go run ./lab/recordargs                      # every binary the lab builds that is present
//	go run ./lab/recordargs v1.35.4 v1.36.3      # just these
//
// Candidate names are the union of every present binary's --help and of the
// k8s.io sources of every lab version in the module cache ($GOMODCACHE,
// where building the binaries put them). About a minute per binary on 2 cores.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/lab"
	"github.com/breakglass-dev/breakglass/lab/internal/recordcmd"
)

func main() {
	recordcmd.Main("internal/apiserverargs/recorded", "directory of the records", "binaries run at once", run)
}

func run(ctx context.Context, out string, workers int, only []string) error {
	modCache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	var dir string
	var present []string
	var helps []*lab.KubeHelp
	var sets []lab.ArgCandidates
	for _, v := range lab.Versions {
		if dir, err = lab.Binaries(ctx, "", log.Writer(), v); err != nil {
			log.Printf("%s: skipped: %v", v, err)
			continue
		}
		present = append(present, v)
		h, err := lab.ReadKubeHelp(ctx, filepath.Join(dir, v, "kube-apiserver"))
		if err != nil {
			return err
		}
		helps = append(helps, h)
		srcDirs := lab.KubeSourceDirs(strings.TrimSpace(string(modCache)), v)
		s, err := lab.SourceCandidates(srcDirs)
		if err != nil {
			return err
		}
		log.Printf("%s: --help lists %d flags, %d gates; its sources (%d module directories) name %d flags, %d gates, %d group versions",
			v, len(h.Flags), len(h.Gates), len(srcDirs), len(s.Flags), len(s.Gates), len(s.GroupVersions))
		sets = append(sets, s)
	}
	cands := lab.UnionCandidates(sets, helps)
	log.Printf("candidates: %d flags, %d gates, %d group versions", len(cands.Flags), len(cands.Gates), len(cands.GroupVersions))
	for _, v := range present {
		if len(only) > 0 && !slices.Contains(only, v) {
			continue
		}
		start := time.Now()
		last := time.Now()
		b, err := lab.RecordArgs(ctx, lab.RecordArgsOptions{Bin: filepath.Join(dir, v, "kube-apiserver"), Version: v, Candidates: cands, Workers: workers,
			Progress: func(done, total int) {
				if time.Since(last) > 10*time.Second {
					last = time.Now()
					log.Printf("%s: %d/%d", v, done, total)
				}
			}})
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		data, err := b.Encode()
		if err != nil {
			return err
		}
		path := filepath.Join(out, v+".json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		log.Printf("%s: %d flags, %d gates, %d group versions -> %s (%s)", v, len(b.Flags), len(b.Gates), len(b.GroupVersions), path, time.Since(start).Round(time.Second))
	}
	return nil
}
