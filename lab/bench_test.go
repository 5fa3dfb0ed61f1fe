package lab

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkRecovery rehearses the incident and its recovery on 1 and 3
// nodes and reports breakglass's time against kube-apiserver's own
// restart-to-ready time (the floor). One iteration takes 30-60s:
//
//	go test -run '^$' -bench Recovery -benchtime 1x ./lab/
func BenchmarkRecovery(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			bin := needBinaries(b)
			var reps []*Rehearsal
			for i := 0; i < b.N; i++ {
				rep, err := Rehearse(context.Background(), RehearseOptions{Nodes: nodes, Dir: b.TempDir(), KubeBinDir: bin})
				if err != nil {
					b.Fatal(err)
				}
				reps = append(reps, rep)
			}
			var dFloor, dOver, dRatio, rFloor, rOver, rRatio, notice, wall float64
			for _, r := range reps {
				dFloor += r.Disable.Floor.Seconds()
				dOver += float64(r.Disable.Overhead.Milliseconds())
				dRatio += r.Disable.Ratio
				rFloor += r.Restore.Floor.Seconds()
				rOver += float64(r.Restore.Overhead.Milliseconds())
				rRatio += r.Restore.Ratio
				notice += float64(max(r.Disable.Notice, r.Restore.Notice).Milliseconds())
				wall += r.Wall.Seconds()
			}
			n := float64(len(reps))
			b.ReportMetric(dFloor/n, "disable-floor-s")
			b.ReportMetric(dOver/n, "disable-overhead-ms")
			b.ReportMetric(dRatio/n, "disable-ratio")
			b.ReportMetric(rFloor/n, "restore-floor-s")
			b.ReportMetric(rOver/n, "restore-overhead-ms")
			b.ReportMetric(rRatio/n, "restore-ratio")
			b.ReportMetric(notice/n, "notice-max-ms")
			b.ReportMetric(wall/n, "rehearsal-s")
			b.ReportMetric(0, "ns/op")
			var out testWriter = testWriter{b}
			PrintBench(out, reps)
		})
	}
}
