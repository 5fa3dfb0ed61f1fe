package diagnose

import (
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

func fullSpace() *SpaceEvidence {
	return &SpaceEvidence{
		Members: []MemberSpace{
			{MemberID: 0xa1, Node: "127.0.0.11", Leader: true, DBSize: 2 << 30, DBSizeInUse: 1900 << 20, Quota: 2 << 30, Revision: 812345},
			{MemberID: 0xb2, Node: "127.0.0.12", DBSize: 1 << 30, DBSizeInUse: 1 << 29},
		},
		Alarms: []etcd.Alarm{{MemberID: 0xa1, Type: etcd.AlarmNoSpace}},
	}
}

// A full etcd is the verdict whatever else kube-apiserver logs: nothing
// starts until etcd has room, and restarting kube-apiserver (an admission
// recovery) would make things worse.
func TestAnalyzeFullEtcd(t *testing.T) {
	nospaceLine := `E1203 10:00:00.000000       1 controller.go:145] "Unhandled Error" err="etcdserver: mvcc: database space exceeded"`
	deadlock := readLines(t, "upgrade-deadlock.log")
	// The real v1.34.4 (testdata/capture -only nospace): its readyz fails
	// the same checks as in the admission deadlock; its log tells them apart.
	restart, running := readLines(t, "etcd-nospace-restart.log"), readLines(t, "etcd-nospace-running.log")
	tests := []struct {
		name    string
		ev      Evidence
		verdict Verdict
		says    []string
	}{
		{"alarm, kube-apiserver stuck", Evidence{Nodes: []NodeEvidence{node("127.0.0.11", deadlock, runningPod, stuck())}, Space: fullSpace(), Etcd: kyvernoEtcd()},
			EtcdNoSpace, []string{"alarm NOSPACE on member a1", "database 2.0 GiB, 1.9 GiB in use, quota 2.0 GiB (100%), revision 812345", "not ready on node 127.0.0.11"}},
		{"alarm, kube-apiserver still ready", Evidence{Nodes: []NodeEvidence{node("127.0.0.11", nil, readyPod, readyzOK())}, Space: fullSpace()},
			EtcdNoSpace, []string{"still answers, but any restart"}},
		{"no alarm read, the log says it", Evidence{Nodes: []NodeEvidence{node("127.0.0.11", []string{nospaceLine}, runningPod, stuck())}},
			EtcdNoSpace, []string{"its alarms could not be read", "no member's size could be read"}},
		{"v1.34.4 restarted on a full etcd, alarms unread", Evidence{Nodes: []NodeEvidence{node("127.0.0.11", restart, crashLoop, refused()), node("127.0.0.12", restart, runningPod, stuck())}},
			EtcdNoSpace, []string{"its alarms could not be read", "not ready on all 2 nodes"}},
		{"v1.34.4 running when etcd fills, alarm read", Evidence{Nodes: []NodeEvidence{node("127.0.0.11", running, readyPod, readyzOK())}, Space: fullSpace()},
			EtcdNoSpace, []string{"still answers"}},
		{"the log line on a ready node, no alarm: not full now", Evidence{Nodes: []NodeEvidence{node("127.0.0.11", []string{nospaceLine}, readyPod, readyzOK())}, Space: &SpaceEvidence{}},
			Healthy, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Analyze(&tc.ev, Options{})
			if r.Verdict != tc.verdict {
				t.Fatalf("verdict %s (%s), want %s", r.Verdict, r.Summary, tc.verdict)
			}
			if tc.verdict != EtcdNoSpace {
				return
			}
			for _, s := range tc.says {
				if !strings.Contains(r.Summary, s) {
					t.Errorf("summary %q does not say %q", r.Summary, s)
				}
			}
			if r.Runbook != NoSpaceRunbook || r.Verdict.Category() != failure.DiagnoseNoSpace || len(r.Culprits) != 0 {
				t.Errorf("runbook %q, category %d, culprits %v", r.Runbook, r.Verdict.Category(), r.Culprits)
			}
			if len(r.Next) == 0 || !strings.HasPrefix(r.Next[0], "breakglass recover") {
				t.Errorf("next %q, want breakglass recover first", r.Next)
			}
			text := Brief(r)
			if r.Evidence.Space != nil && len(r.Evidence.Space.Members) > 0 && !strings.Contains(text, "a1 on 127.0.0.11 (leader): database 2.0 GiB") {
				t.Errorf("the brief does not list the members:\n%s", text)
			}
		})
	}
}
