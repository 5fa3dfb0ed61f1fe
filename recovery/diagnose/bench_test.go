package diagnose

import "testing"

// BenchmarkAnalyze matches and concludes over what diagnose reads from a
// three-node cluster in the incident with --tail 2000: 6000 real log lines.
func BenchmarkAnalyze(b *testing.B) {
	excerpt := readLines(b, "upgrade-deadlock.log")
	var logs []string
	for len(logs) < 2000 {
		logs = append(logs, excerpt...)
	}
	logs = logs[:2000]
	ev := &Evidence{Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
		node("127.0.0.11", logs, runningPod, stuck()),
		node("127.0.0.12", logs, runningPod, stuck()),
		node("127.0.0.13", logs, runningPod, stuck()),
	}}
	b.ReportAllocs()
	for b.Loop() {
		if r := Analyze(ev, Options{}); r.Verdict != AdmissionDeadlock {
			b.Fatal(r.Verdict)
		}
	}
}
