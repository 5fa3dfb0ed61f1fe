package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// BenchmarkGuidedRecover runs the whole guided recovery as the on-call
// engineer would — `breakglass recover --yes` with both webhook plugins and
// --delete of the validating configuration, the real binary as a
// subprocess — against a freshly deadlocked lab on 1 and 3 nodes, and
// reports its wall time (start to exit) against the lab's floor:
// kube-apiserver's own restart-to-ready after the disable plus after the
// restore (slowest node each time). One iteration takes 30-60s:
//
//	go test -run '^$' -bench GuidedRecover -benchtime 1x ./lab/
func BenchmarkGuidedRecover(b *testing.B) {
	kubeBin := needBinaries(b)
	bin := buildBreakglassTB(b)
	var rows []string
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var wall, floor, ratio float64
			for i := 0; i < b.N; i++ {
				m := guidedOnce(b, bin, kubeBin, nodes)
				wall += m.wall.Seconds()
				floor += m.floor.Seconds()
				ratio += m.ratio()
				rows = append(rows, fmt.Sprintf("%-5d %9s %9s %9s %9s %9s  %.2f   %s", nodes, round(m.wall), round(m.floor),
					round(m.disableFloor), round(m.restoreFloor), round(m.wall-m.floor), m.ratio(), stepTimes(m)))
			}
			n := float64(b.N)
			b.ReportMetric(wall/n, "recover-s")
			b.ReportMetric(floor/n, "floor-s")
			b.ReportMetric(ratio/n, "ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Logf("\nnodes      wall     floor (disable   restore)  overhead  ratio  steps\n%s", strings.Join(rows, "\n"))
}

func guidedOnce(b *testing.B, bin, kubeBin string, nodes int) guidedMeasurement {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	l, err := Start(ctx, Options{Dir: dir, Nodes: nodes, KubeBinDir: kubeBin, Kubelet: DefaultKubelet()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if _, err := RunScenario(ctx, l, ScenarioKyvernoServiceCIDR, NewTimeline(io.Discard)); err != nil {
		b.Fatalf("scenario: %v", err)
	}
	cmd := exec.Command(bin, "--talosconfig", l.Talosconfig, "--state-dir", filepath.Join(dir, "state"),
		"recover", "--yes", "-o", "json", "--plugins", strings.Join(RecoveryPlugins, ","), "--delete", ValidatingWebhookConfig,
		"--etcd-endpoints", strings.Join(l.Etcd.Endpoints, ","))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err = runWithin(cmd, 5*time.Minute)
	wall := time.Since(t0)
	if err != nil {
		b.Fatalf("recover: %v\n%s", err, errb.String())
	}
	var res recovery.RecoverResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Outcome != "completed" {
		b.Fatalf("recover: outcome %q (%v)\n%s", res.Outcome, err, errb.String())
	}
	m, err := measureGuided(l, journalEntries(res.Journal), t0, wall)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// stepTimes lists the steps that are breakglass's own work (the rest is
// waiting on kube-apiserver).
func stepTimes(m guidedMeasurement) string {
	var parts []string
	for _, s := range []string{"preflight", "diagnose", "snapshot", "delete-webhook", "wait-webhook"} {
		parts = append(parts, fmt.Sprintf("%s %s", s, m.steps[s].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}
