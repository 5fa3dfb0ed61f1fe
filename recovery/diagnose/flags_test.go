package diagnose

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// The lines of the real binaries refusing their own flags
// (testdata/logs/flags-*.log, taken by testdata/capture), and the warnings
// of the minor before, matched exactly; nothing else in them matches.
func TestMatchRefusedFlagLogs(t *testing.T) {
	for _, tt := range []struct {
		file string
		want map[string]int
	}{
		{"flags-gate-locked.log", map[string]int{"feature-gate-refused MultiCIDRServiceAllocator": 1}},
		{"flags-gates-locked.log", map[string]int{"feature-gate-refused MultiCIDRServiceAllocator": 1, "feature-gate-refused ConsistentListFromCache": 1}},
		{"flags-gate-unknown.log", map[string]int{"feature-gate-unknown NoSuchGate": 1}},
		{"flags-flag-unknown.log", map[string]int{"flag-unknown cloud-provider": 1}},
		{"flags-runtime-config.log", map[string]int{"runtime-config-refused networking.k8s.io/v1alpha1": 1}},
		{"flags-group-unknown.log", map[string]int{"runtime-config-refused foo.example.com": 1}},
		{"flags-group-unknown-1.36.log", map[string]int{"runtime-config-refused foo.example.com/v1": 1}},
		{"flags-warning.log", map[string]int{"feature-gate-warning MultiCIDRServiceAllocator": 2, "etcd-unreachable 127.0.0.1:41743": 2}},
		{"flags-warning-1.37.log", map[string]int{"feature-gate-warning MultiCIDRServiceAllocator": 1, "etcd-unreachable 127.0.0.1:39599": 1}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			if got := counts(readLines(t, tt.file)); !equalCounts(got, tt.want) {
				t.Errorf("matches:\n got %s\nwant %s", fmtCounts(got), fmtCounts(tt.want))
			}
		})
	}
	// The value of a locked gate is the detail.
	ms := MatchLine(readLines(t, "flags-gate-locked.log")[0])
	if len(ms) != 1 || ms[0].Detail != "false" {
		t.Errorf("%+v", ms)
	}
}

// No flag signature on the healthy starts, shutdowns and other failures
// the real binaries logged.
func TestFlagSignaturesNoFalsePositives(t *testing.T) {
	for _, f := range []string{"healthy-start.log", "upgrade-deadlock.log", "priority-classes-fatal.log", "rbac-bootstrap-fatal.log",
		"plugins-overlapped.log", "etcd-down.log", "etcd-x509.log", "webhook-denied.log", "policy-denied.log", "webhook-failing-open.log",
		"client-cert-expired.log", "webhook-x509.log"} {
		for _, l := range readLines(t, f) {
			for _, m := range MatchLine(l) {
				for _, id := range append(flagSignatureIDs, "feature-gate-warning", "flag-deprecated") {
					if m.ID == id {
						t.Errorf("%s: %s matched %q", f, id, l)
					}
				}
			}
		}
	}
}

func flagsNode(ip string, logs []string, pod *Pod, flags map[string][]string) NodeEvidence {
	ne := node(ip, logs, pod, refused())
	ne.Image, ne.Flags = "registry.k8s.io/kube-apiserver:v1.34.4", flags
	return ne
}

func TestAnalyzeRefusedFlags(t *testing.T) {
	locked := readLines(t, "flags-gate-locked.log")
	gates := map[string][]string{"feature-gates": {"kube:MultiCIDRServiceAllocator=false"}, "etcd-servers": {"https://127.0.0.1:2379"}}
	t.Run("locked gate in the log, on both nodes", func(t *testing.T) {
		ev := &Evidence{HealthAsked: true, Nodes: []NodeEvidence{flagsNode("127.0.0.11", locked, crashLoop, gates), flagsNode("127.0.0.12", locked, crashLoop, gates)}}
		r := Analyze(ev, Options{})
		if r.Verdict != FlagsRefused || r.Verdict.Category() != failure.DiagnoseFlags || r.Runbook != FlagsRunbook {
			t.Fatalf("verdict %s (exit %d), runbook %q: %s", r.Verdict, r.Verdict.Category(), r.Runbook, r.Summary)
		}
		if len(r.Flags) != 1 {
			t.Fatalf("flags %+v", r.Flags)
		}
		f := r.Flags[0]
		if f.Flag != "feature-gates" || f.Item != "kube:MultiCIDRServiceAllocator=false" || f.Name != "MultiCIDRServiceAllocator" || f.Source != SourceLog ||
			f.Refusal != "cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true" || len(f.Nodes) != 2 {
			t.Errorf("refused flag %+v", f)
		}
		for _, s := range []string{"all 2 nodes", "CrashLoopBackOff, 7 restarts", "MultiCIDRServiceAllocator"} {
			if !strings.Contains(r.Summary, s) {
				t.Errorf("summary lacks %q: %s", s, r.Summary)
			}
		}
		if len(r.Next) == 0 || !strings.HasPrefix(r.Next[0], "breakglass recover") || !strings.Contains(strings.Join(r.Next, "\n"), "remove kube:MultiCIDRServiceAllocator=false from cluster.apiServer.extraArgs.feature-gates") {
			t.Errorf("next %v", r.Next)
		}
		if !strings.Contains(strings.Join(r.Notes, "\n"), "machine config, cluster.apiServer.extraArgs") || !strings.Contains(strings.Join(r.Notes, "\n"), "Omni template") {
			t.Errorf("notes %v", r.Notes)
		}
		var b strings.Builder
		if err := WriteText(&b, r); err != nil || !strings.Contains(b.String(), "refused flag: --feature-gates kube:MultiCIDRServiceAllocator=false on 127.0.0.11, 127.0.0.12 (log)") {
			t.Errorf("text: %v\n%s", err, b.String())
		}
		js, _ := json.Marshal(r)
		if !strings.Contains(string(js), `"verdict":"flags-refused"`) || !strings.Contains(string(js), `"flags":[{"flag":"feature-gates"`) {
			t.Errorf("json %s", js)
		}
	})
	t.Run("aggregated refusals", func(t *testing.T) {
		two := map[string][]string{"feature-gates": {"MultiCIDRServiceAllocator=false,ConsistentListFromCache=false"}}
		r := Analyze(&Evidence{Nodes: []NodeEvidence{flagsNode("127.0.0.11", readLines(t, "flags-gates-locked.log"), crashLoop, two)}}, Options{})
		if r.Verdict != FlagsRefused || len(r.Flags) != 2 {
			t.Fatalf("%s %+v", r.Verdict, r.Flags)
		}
	})
	t.Run("removed flag, no log: the pod's flags against the record", func(t *testing.T) {
		flags := map[string][]string{"cloud-provider": {"external"}, "secure-port": {"6443"}}
		r := Analyze(&Evidence{Nodes: []NodeEvidence{flagsNode("127.0.0.11", nil, crashLoop, flags)}}, Options{})
		if r.Verdict != FlagsRefused || len(r.Flags) != 1 || r.Flags[0].Flag != "cloud-provider" || r.Flags[0].Source != SourceFlags ||
			r.Flags[0].Refusal != "Error: unknown flag: --cloud-provider" {
			t.Fatalf("%s %+v", r.Verdict, r.Flags)
		}
		if !r.has("flag-unknown") {
			t.Errorf("findings %+v", r.Findings)
		}
	})
	t.Run("runtime-config", func(t *testing.T) {
		flags := map[string][]string{"runtime-config": {"api/all=true,networking.k8s.io/v1alpha1=true"}}
		r := Analyze(&Evidence{Nodes: []NodeEvidence{flagsNode("127.0.0.11", readLines(t, "flags-runtime-config.log"), crashLoop, flags)}}, Options{})
		if r.Verdict != FlagsRefused || len(r.Flags) != 1 || r.Flags[0].Item != "networking.k8s.io/v1alpha1=true" {
			t.Fatalf("%s %+v", r.Verdict, r.Flags)
		}
	})
	t.Run("ready, warning only: healthy", func(t *testing.T) {
		ne := flagsNode("127.0.0.11", readLines(t, "flags-warning.log")[:2], readyPod, gates)
		ne.Readyz = &Readyz{Node: ne.Node, Ready: true}
		ne.Image = "registry.k8s.io/kube-apiserver:v1.33.13"
		r := Analyze(&Evidence{HealthAsked: true, Nodes: []NodeEvidence{ne}}, Options{})
		if r.Verdict != Healthy || len(r.Flags) != 0 {
			t.Errorf("%s %+v", r.Verdict, r.Flags)
		}
	})
	t.Run("the admission deadlock is not taken for it", func(t *testing.T) {
		ne := flagsNode("127.0.0.11", readLines(t, "upgrade-deadlock.log"), runningPod, gates)
		ne.Readyz = stuck()
		ne.Flags = map[string][]string{"feature-gates": {"MutatingAdmissionPolicy=true"}}
		r := Analyze(&Evidence{HealthAsked: true, Nodes: []NodeEvidence{ne}}, Options{})
		if r.Verdict != AdmissionDeadlock || len(r.Flags) != 0 {
			t.Errorf("%s %+v", r.Verdict, r.Flags)
		}
	})
}
