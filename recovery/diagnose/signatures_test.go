package diagnose

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// readLines reads a log excerpt. Excerpts marked "real" in their name's
// table entry are tails of logs written by the real kube-apiserver v1.34.4
// binary (see testdata/capture); the others are written from the messages
// in the Kubernetes sources, in the same klog format.
func readLines(t testing.TB, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "logs", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// counts matches every line and counts "signature subject" pairs.
func counts(lines []string) map[string]int {
	out := map[string]int{}
	for _, l := range lines {
		for _, m := range MatchLine(l) {
			out[strings.TrimSpace(m.ID+" "+m.Subject)]++
		}
	}
	return out
}

func TestMatchLogExcerpts(t *testing.T) {
	tests := []struct {
		file string
		real bool
		want map[string]int // every signature seen, with its count; nothing else may match
	}{
		{"upgrade-deadlock.log", true, map[string]int{
			"webhook-failing-closed validate.kyverno.svc-fail": 40,
			"default-servicecidr":                              10,
		}},
		{"priority-classes-fatal.log", true, map[string]int{
			"webhook-failing-closed validate.kyverno.svc-fail":                  21,
			"default-servicecidr":                                               10,
			"poststarthook-failed scheduling/bootstrap-system-priority-classes": 1,
		}},
		{"rbac-bootstrap-fatal.log", true, map[string]int{
			"webhook-failing-closed validate.kyverno.svc-fail": 39,
			"poststarthook-failed rbac/bootstrap-roles":        1,
		}},
		{"plugins-overlapped.log", true, map[string]int{
			"admission-plugins-overlapped ValidatingAdmissionWebhook": 1,
		}},
		{"etcd-down.log", true, map[string]int{
			"etcd-unreachable 127.0.0.1:35509":               11,
			"etcd-storage-timeout context deadline exceeded": 1,
		}},
		{"etcd-x509.log", true, map[string]int{
			"etcd-certificate 127.0.0.1:43817":               11,
			"etcd-storage-timeout context deadline exceeded": 1,
		}},
		{"healthy-start.log", true, map[string]int{}},
		{"webhook-denied.log", false, map[string]int{
			"webhook-denied validate.gatekeeper.sh": 3,
			"default-servicecidr":                   2,
		}},
		{"policy-denied.log", false, map[string]int{
			"policy-denied require-team-label": 2,
			"default-servicecidr":              2,
		}},
		{"webhook-failing-open.log", false, map[string]int{
			"webhook-failing-open validate.kyverno.svc-ignore": 1,
		}},
		{"client-cert-expired.log", false, map[string]int{
			"certificate certificate has expired or is not yet valid: current time 2026-11-29T22:54:05Z is after 2026-11-01T00:00:00Z, verifying certificate SN=217193640201634947114812201355218925013, SKID=, AKID=5E:2F:91:0A:C4:77:12:9B:E1:3D:40:58:0F:AA:61:52:7C:39:0E:84 failed: x509: certificate has expired or is not yet valid: current time 2026-11-29T22:54:05Z is after 2026-11-01T00:00:00Z]": 1,
			"certificate certificate has expired or is not yet valid: current time 2026-11-29T22:54:06Z is after 2026-11-01T00:00:00Z, verifying certificate SN=217193640201634947114812201355218925013, SKID=, AKID=5E:2F:91:0A:C4:77:12:9B:E1:3D:40:58:0F:AA:61:52:7C:39:0E:84 failed: x509: certificate has expired or is not yet valid: current time 2026-11-29T22:54:06Z is after 2026-11-01T00:00:00Z]": 1,
		}},
		{"webhook-x509.log", false, map[string]int{
			"webhook-failing-closed validate.kyverno.svc-fail": 1,
			"default-servicecidr":                              1,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got := counts(readLines(t, tt.file))
			if !equalCounts(got, tt.want) {
				t.Errorf("matches:\n got %s\nwant %s", fmtCounts(got), fmtCounts(tt.want))
			}
		})
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func fmtCounts(m map[string]int) string {
	var keys []string
	for k, v := range m {
		keys = append(keys, k+"="+itoa(v))
	}
	sort.Strings(keys)
	return "{" + strings.Join(keys, ", ") + "}"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for n > 0 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}

func TestMatchLine(t *testing.T) {
	tests := []struct {
		name, line string
		want       []Match
	}{
		{
			"webhook name is taken from escaped quotes in a structured value",
			`E1129 22:43:00.914089   29423 autoregister_controller.go:198] "Unhandled Error" err="v1.resource.k8s.io failed with : Internal error occurred: failed calling webhook \"validate.kyverno.svc-fail\": failed to call webhook: Post \"https://127.0.0.1:46679/validate/fail?timeout=10s\": dial tcp 127.0.0.1:46679: connect: connection refused" logger="UnhandledError"`,
			[]Match{{ID: "webhook-failing-closed", Subject: "validate.kyverno.svc-fail"}},
		},
		{
			"a post-start hook killed by a webhook shows both",
			`F1129 22:41:49.772507   26842 hooks.go:204] PostStartHook "scheduling/bootstrap-system-priority-classes" failed: unable to add default system priority classes: Internal error occurred: failed calling webhook "validate.kyverno.svc-fail": failed to call webhook: Post "https://127.0.0.1:44457/validate/fail?timeout=10s": dial tcp 127.0.0.1:44457: connect: connection refused`,
			[]Match{{ID: "webhook-failing-closed", Subject: "validate.kyverno.svc-fail"}, {ID: "poststarthook-failed", Subject: "scheduling/bootstrap-system-priority-classes"}},
		},
		{
			"a mutating webhook fails closed the same way",
			`W1129 22:57:03.100200      44 dispatcher.go:201] Failed calling webhook, failing closed mutate.kyverno.svc-fail: failed calling webhook "mutate.kyverno.svc-fail": failed to call webhook: Post "https://127.0.0.1:9443/mutate/fail?timeout=10s": context deadline exceeded`,
			[]Match{{ID: "webhook-failing-closed", Subject: "mutate.kyverno.svc-fail"}},
		},
		{
			"the bare error logged next to failing open is no refusal",
			`E1129 22:53:11.010391      52 dispatcher.go:218] "Unhandled Error" err="failed calling webhook \"validate.kyverno.svc-ignore\": failed to call webhook: Post \"https://127.0.0.1:9443/validate/ignore?timeout=10s\": context deadline exceeded" logger="UnhandledError"`,
			nil,
		},
		{
			// logged on every lab node while kube-apiserver starts, restarts or stops
			"a handshake cancelled by kube-apiserver itself is no certificate failure",
			`W1201 05:41:54.390762   26862 logging.go:55] [core] [Channel #7 SubChannel #9]grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.12:2379", ServerName: "127.0.0.12:2379", BalancerAttributes: {"<%!p(pickfirstleaf.managedByPickfirstKeyType={})>": "<%!p(bool=true)>" }}. Err: connection error: desc = "transport: authentication handshake failed: context canceled"`,
			nil,
		},
		{
			"a handshake refused for its certificate is one",
			`W1201 05:41:54.390762   26862 logging.go:55] [core] [Channel #7 SubChannel #9]grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.12:2379", ServerName: "127.0.0.12:2379", BalancerAttributes: {"<%!p(pickfirstleaf.managedByPickfirstKeyType={})>": "<%!p(bool=true)>" }}. Err: connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`,
			[]Match{{ID: "etcd-certificate", Subject: "127.0.0.12:2379"}},
		},
		{
			"a policy without binding",
			`E1129 22:52:40.131671      38 system_namespaces_controller.go:82] "Unhandled Error" err="unable to create required kubernetes system Namespace kube-system: namespaces \"kube-system\" is forbidden: ValidatingAdmissionPolicy 'no-system' denied request: failed expression: false" logger="UnhandledError"`,
			[]Match{{ID: "policy-denied", Subject: "no-system"}},
		},
		{
			"a policy with its binding",
			`E1129 22:52:40.131671      38 system_namespaces_controller.go:82] "Unhandled Error" err="unable to create required kubernetes system Namespace kube-system: namespaces \"kube-system\" is forbidden: ValidatingAdmissionPolicy 'require-team-label' with binding 'require-team-label-binding' denied request: failed expression: false" logger="UnhandledError"`,
			[]Match{{ID: "policy-denied", Subject: "require-team-label", Detail: "require-team-label-binding"}},
		},
		{
			"grpc dropping a spare etcd dial is noise",
			`W1129 22:43:00.099813   29423 logging.go:55] [core] [Channel #1 SubChannel #3]grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.1:38115", ServerName: "127.0.0.1:38115", }. Err: connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:38115: operation was canceled"`,
			nil,
		},
		{
			"the dual-stack update message is no creation failure",
			`I1129 22:58:00.000001      12 default_servicecidr_controller.go:120] The default ServiceCIDR can not be updated from 10.96.0.0/12 to dual stack [10.96.0.0/12 fd00::/108] : forbidden`,
			nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MatchLine(tt.line)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("match %d: got %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestMatchReadyz(t *testing.T) {
	// The failing checks of the real v1.34.4 during the deadlock.
	body, err := os.ReadFile(filepath.Join("testdata", "readyz-deadlock.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(l, "[-]"); ok {
			name, _, _ := strings.Cut(rest, " ")
			m := MatchReadyzCheck(name)
			got = append(got, m.ID+" "+m.Subject)
		}
	}
	want := []string{
		"readyz-ip-repair start-service-ip-repair-controllers",
		"readyz-rbac-bootstrap rbac/bootstrap-roles",
		"readyz-service-cidr start-kubernetes-service-cidr-controller",
		"readyz-autoregister autoregister-completion",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if m := MatchReadyzCheck("poststarthook/something-new"); m.ID != "readyz-failing" || m.Subject != "poststarthook/something-new" {
		t.Errorf("unknown check: %+v", m)
	}
}

func TestLineKeyIgnoresTimeAndPID(t *testing.T) {
	a := `W1129 22:43:28.818338   29423 dispatcher.go:217] Failed calling webhook, failing closed x: boom`
	b := `W1129 22:44:01.000001    1845 dispatcher.go:217] Failed calling webhook, failing closed x: boom`
	c := `E1129 22:44:01.000001    1845 dispatcher.go:217] Failed calling webhook, failing closed x: boom`
	if lineKey(a) != lineKey(b) {
		t.Errorf("%q != %q", lineKey(a), lineKey(b))
	}
	if lineKey(a) == lineKey(c) {
		t.Errorf("severity must count: %q", lineKey(c))
	}
	if lineKey("no header") != "no header" {
		t.Error("a line without klog header is its own key")
	}
}

func TestSignatureTableIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Signatures {
		if s.ID == "" || s.Pattern == nil || s.Meaning == "" || s.Class == "" || (s.Source != SourceLog && s.Source != SourceReadyz) {
			t.Errorf("incomplete signature %+v", s)
		}
		if s.Source == SourceLog && len(s.Literals) == 0 {
			t.Errorf("log signature %s has no literals", s.ID)
		}
		if seen[s.ID] {
			t.Errorf("duplicate id %s", s.ID)
		}
		seen[s.ID] = true
	}
}
