package diagnose

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// Evidence builders for the verdict table.

func node(ip string, logs []string, pod *Pod, rz *Readyz) NodeEvidence {
	ne := NodeEvidence{Node: ip, NodeName: "cp-" + ip[len(ip)-1:], Pod: pod, Logs: logs, LogLinesRead: len(logs)}
	if rz != nil {
		rz.Node = ip
		ne.Readyz = rz
	}
	return ne
}

var (
	crashLoop  = &Pod{Found: true, Running: false, Restarts: 7, WaitingReason: "CrashLoopBackOff"}
	runningPod = &Pod{Found: true, Running: true, Restarts: 4}
	readyPod   = &Pod{Found: true, Running: true, Ready: true}
	readyzOK   = func() *Readyz { return &Readyz{Ready: true} }
	refused    = func() *Readyz { return &Readyz{Error: "connect: connection refused"} }
	stuck      = func() *Readyz {
		return &Readyz{FailingChecks: []string{"poststarthook/start-service-ip-repair-controllers", "poststarthook/rbac/bootstrap-roles", "poststarthook/start-kubernetes-service-cidr-controller", "autoregister-completion"}}
	}
)

func kyvernoEtcd() EtcdEvidence {
	return EtcdEvidence{Asked: true, Endpoints: []string{"https://127.0.0.11:2379"}, Revision: 42, Objects: []AdmissionObject{
		{Kind: "ValidatingWebhookConfiguration", Name: "kyverno-resource-validating-webhook-cfg", Key: "/registry/validatingwebhookconfigurations/kyverno-resource-validating-webhook-cfg", Encoding: "protobuf",
			Webhooks: []WebhookBrief{{Name: "validate.kyverno.svc-fail", FailurePolicy: "Fail", Target: "https://127.0.0.1:9443/validate/fail", Rules: 1}, {Name: "validate.kyverno.svc-ignore", FailurePolicy: "Ignore", Target: "https://127.0.0.1:9443/validate/ignore", Rules: 1}}},
		{Kind: "MutatingWebhookConfiguration", Name: "kyverno-resource-mutating-webhook-cfg", Key: "/registry/mutatingwebhookconfigurations/kyverno-resource-mutating-webhook-cfg", Encoding: "protobuf",
			Webhooks: []WebhookBrief{{Name: "mutate.kyverno.svc-fail", FailurePolicy: "Fail", Target: "https://127.0.0.1:9443/mutate/fail", Rules: 1}}},
		{Kind: "ValidatingAdmissionPolicy", Name: "require-team-label", Key: "/registry/validatingadmissionpolicies/require-team-label", Encoding: "protobuf", Failure: "Fail"},
		{Kind: "ValidatingAdmissionPolicyBinding", Name: "require-team-label-binding", Key: "/registry/validatingadmissionpolicybindings/require-team-label-binding", Encoding: "protobuf", Policy: "require-team-label"},
	}}
}

func TestAnalyzeVerdicts(t *testing.T) {
	deadlockLogs := readLines(t, "upgrade-deadlock.log")
	rbacFatal := readLines(t, "rbac-bootstrap-fatal.log")
	healthy := readLines(t, "healthy-start.log")
	mutating := []string{
		`W1129 22:57:03.100200      44 dispatcher.go:201] Failed calling webhook, failing closed mutate.kyverno.svc-fail: failed calling webhook "mutate.kyverno.svc-fail": failed to call webhook: Post "https://127.0.0.1:9443/mutate/fail?timeout=10s": context deadline exceeded`,
		`I1129 22:57:03.100900      44 event.go:389] "Event occurred" object="" fieldPath="" kind="ServiceCIDR" apiVersion="networking.k8s.io/v1" type="Warning" reason="KubernetesDefaultServiceCIDRError" message="The default ServiceCIDR can not be created"`,
	}
	twice := kyvernoEtcd()
	twice.Objects = append(twice.Objects, AdmissionObject{Kind: "ValidatingWebhookConfiguration", Name: "kyverno-copy", Key: "/registry/validatingwebhookconfigurations/kyverno-copy",
		Webhooks: []WebhookBrief{{Name: "validate.kyverno.svc-fail", FailurePolicy: "Fail", Target: "https://127.0.0.1:9444/validate/fail"}}})

	tests := []struct {
		name        string
		ev          Evidence
		verdict     Verdict
		culprits    []string // kind/name/webhook/plugin
		next        []string
		summaryHas  []string
		firstSig    string // first finding's signature
		notesHave   []string
		notesAbsent []string
	}{
		{
			name: "the incident, three nodes, etcd read",
			ev: Evidence{HealthAsked: true, Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", deadlockLogs, runningPod, stuck()),
				node("127.0.0.12", deadlockLogs, runningPod, stuck()),
				node("127.0.0.13", deadlockLogs, runningPod, stuck()),
			}},
			verdict:    AdmissionDeadlock,
			culprits:   []string{"ValidatingWebhookConfiguration/kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail/ValidatingAdmissionWebhook"},
			next:       []string{"breakglass recover --delete kyverno-resource-validating-webhook-cfg", "breakglass admission disable --plugins ValidatingAdmissionWebhook"},
			summaryHas: []string{`webhook "validate.kyverno.svc-fail" of ValidatingWebhookConfiguration kyverno-resource-validating-webhook-cfg`, "all 3 nodes", "the default ServiceCIDR", "rbac/bootstrap-roles", "autoregister-completion"},
			firstSig:   "webhook-failing-closed",
		},
		{
			name: "the incident without etcd: the webhook is named, its configuration is not",
			ev: Evidence{Etcd: EtcdEvidence{Asked: true, Error: "etcd unreachable: https://127.0.0.11:2379: connection refused"}, Nodes: []NodeEvidence{
				node("127.0.0.11", deadlockLogs, runningPod, nil),
			}},
			verdict:   AdmissionDeadlock,
			culprits:  []string{"//validate.kyverno.svc-fail/"},
			next:      []string{"breakglass admission disable --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook"},
			firstSig:  "webhook-failing-closed",
			notesHave: []string{"etcd was not read, so the configuration holding the webhook is not named"},
		},
		{
			name: "kind exclusions are not enough: rbac/bootstrap-roles kills it, crash loop",
			ev: Evidence{HealthAsked: true, Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", rbacFatal, crashLoop, refused()),
			}},
			verdict:    AdmissionDeadlock,
			culprits:   []string{"ValidatingWebhookConfiguration/kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail/ValidatingAdmissionWebhook"},
			next:       []string{"breakglass recover --delete kyverno-resource-validating-webhook-cfg", "breakglass admission disable --plugins ValidatingAdmissionWebhook"},
			summaryHas: []string{`PostStartHook rbac/bootstrap-roles (exits)`, "node 127.0.0.11"},
			firstSig:   "webhook-failing-closed",
		},
		{
			name: "a mutating webhook: its own plugin",
			ev: Evidence{Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", mutating, runningPod, nil),
			}},
			verdict:  AdmissionDeadlock,
			culprits: []string{"MutatingWebhookConfiguration/kyverno-resource-mutating-webhook-cfg/mutate.kyverno.svc-fail/MutatingAdmissionWebhook"},
			next:     []string{"breakglass recover --runbook mutating-webhook-deadlock --delete kyverno-resource-mutating-webhook-cfg", "breakglass admission disable --plugins MutatingAdmissionWebhook"},
		},
		{
			name: "a policy denies the start-up writes",
			ev: Evidence{Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", readLines(t, "policy-denied.log"), runningPod, nil),
			}},
			verdict:    AdmissionDeadlock,
			culprits:   []string{"ValidatingAdmissionPolicy/require-team-label//ValidatingAdmissionPolicy"},
			next:       []string{"breakglass recover --runbook policy-deadlock --delete require-team-label-binding", "breakglass admission disable --plugins ValidatingAdmissionPolicy"},
			summaryHas: []string{"ValidatingAdmissionPolicy require-team-label (binding require-team-label-binding)"},
		},
		{
			name: "a validating and a mutating webhook both fail closed",
			ev: Evidence{Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", append(append([]string{}, deadlockLogs...), mutating...), runningPod, nil),
			}},
			verdict: AdmissionDeadlock,
			culprits: []string{
				"ValidatingWebhookConfiguration/kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail/ValidatingAdmissionWebhook",
				"MutatingWebhookConfiguration/kyverno-resource-mutating-webhook-cfg/mutate.kyverno.svc-fail/MutatingAdmissionWebhook",
			},
			next: []string{
				"breakglass recover --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook --delete kyverno-resource-validating-webhook-cfg",
				"breakglass etcd delete --kind mutating kyverno-resource-mutating-webhook-cfg",
				"breakglass admission disable --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook",
			},
		},
		{
			name: "the same webhook name in two configurations: nothing to delete blindly",
			ev: Evidence{Etcd: twice, Nodes: []NodeEvidence{
				node("127.0.0.11", deadlockLogs, runningPod, nil),
			}},
			verdict: AdmissionDeadlock,
			culprits: []string{
				"ValidatingWebhookConfiguration/kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail/ValidatingAdmissionWebhook",
				"ValidatingWebhookConfiguration/kyverno-copy/validate.kyverno.svc-fail/ValidatingAdmissionWebhook",
			},
			next:      []string{"breakglass admission disable --plugins ValidatingAdmissionWebhook"},
			notesHave: []string{`webhook name "validate.kyverno.svc-fail" appears in several configurations`},
		},
		{
			name: "plugins overlapped: refuses to start",
			ev: Evidence{Nodes: []NodeEvidence{
				node("127.0.0.11", readLines(t, "plugins-overlapped.log"), crashLoop, nil),
			}},
			verdict:    OtherFailure,
			next:       []string{"breakglass admission status"},
			summaryHas: []string{"enable-admission-plugins", "(ValidatingAdmissionWebhook)"},
			firstSig:   "admission-plugins-overlapped",
		},
		{
			name: "plugins overlapped in the rendered flags, before any log line",
			ev: Evidence{Nodes: []NodeEvidence{
				func() NodeEvidence {
					ne := node("127.0.0.11", nil, crashLoop, nil)
					ne.EnabledPlugins = []string{"NodeRestriction", "ValidatingAdmissionWebhook"}
					ne.DisabledPlugins = []string{"ValidatingAdmissionWebhook"}
					return ne
				}(),
			}},
			verdict:    OtherFailure,
			next:       []string{"breakglass admission status"},
			summaryHas: []string{"(ValidatingAdmissionWebhook)"},
			firstSig:   "admission-plugins-overlapped",
		},
		{
			name: "etcd refuses kube-apiserver's certificate",
			ev: Evidence{Nodes: []NodeEvidence{
				node("127.0.0.11", readLines(t, "etcd-x509.log"), crashLoop, refused()),
			}},
			verdict:    OtherFailure,
			next:       []string{"talosctl -n 127.0.0.11 logs etcd --tail 50", "talosctl -n 127.0.0.11 service etcd"},
			summaryHas: []string{"certificates", "127.0.0.1:43817"},
			firstSig:   "etcd-certificate",
		},
		{
			name: "etcd down",
			ev: Evidence{Nodes: []NodeEvidence{
				node("127.0.0.11", readLines(t, "etcd-down.log"), crashLoop, nil),
			}},
			verdict:  OtherFailure,
			next:     []string{"talosctl -n 127.0.0.11 service etcd"},
			firstSig: "etcd-unreachable",
		},
		{
			name: "healthy",
			ev: Evidence{HealthAsked: true, Nodes: []NodeEvidence{
				node("127.0.0.11", healthy, readyPod, readyzOK()),
				node("127.0.0.12", healthy, readyPod, readyzOK()),
			}},
			verdict:    Healthy,
			summaryHas: []string{"ready on all 2 nodes"},
		},
		{
			name: "ready now, old webhook failures in the log: no deadlock",
			ev: Evidence{HealthAsked: true, Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", deadlockLogs, readyPod, readyzOK()),
			}},
			verdict:   Healthy,
			notesHave: []string{"admission failures were logged, but kube-apiserver is ready"},
		},
		{
			name: "a webhook failing open is no failure",
			ev: Evidence{Nodes: []NodeEvidence{
				node("127.0.0.11", readLines(t, "webhook-failing-open.log"), readyPod, readyzOK()),
			}},
			verdict:  Healthy,
			firstSig: "webhook-failing-open",
		},
		{
			name: "one node unreadable: never healthy",
			ev: Evidence{Nodes: []NodeEvidence{
				node("127.0.0.11", healthy, readyPod, readyzOK()),
				{Node: "127.0.0.12", Errors: []string{"node 127.0.0.12: read node name: unreachable: connection refused"}},
			}},
			verdict:    Unknown,
			next:       []string{"talosctl -n 127.0.0.12 version"},
			summaryHas: []string{"could not read", "127.0.0.12", "connection refused"},
		},
		{
			name: "not ready, nothing known in the log: say so, point at suspects",
			ev: Evidence{HealthAsked: true, Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", healthy, runningPod, stuck()),
			}},
			verdict:    Unknown,
			next:       []string{"talosctl -n 127.0.0.11 logs -k kube-system/kube-apiserver-cp-1:kube-apiserver --tail 1000"},
			summaryHas: []string{"no known cause", "start-up is stuck at start-kubernetes-service-cidr-controller"},
			notesHave:  []string{"fail-closed webhooks in etcd that could block start-up: ValidatingWebhookConfiguration kyverno-resource-validating-webhook-cfg"},
		},
		{
			name: "one node deadlocked, one unreadable: the verdict stands, the other node is named",
			ev: Evidence{Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", deadlockLogs, runningPod, nil),
				{Node: "127.0.0.12", Errors: []string{"node 127.0.0.12: read node name: unreachable: connection refused"}},
			}},
			verdict:   AdmissionDeadlock,
			culprits:  []string{"ValidatingWebhookConfiguration/kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail/ValidatingAdmissionWebhook"},
			next:      []string{"breakglass recover --delete kyverno-resource-validating-webhook-cfg", "breakglass admission disable --plugins ValidatingAdmissionWebhook", "talosctl -n 127.0.0.12 version"},
			notesHave: []string{"node 127.0.0.12 could not be read: node 127.0.0.12: read node name: unreachable"},
		},
		{
			name: "disabled plugins are worth a note",
			ev: Evidence{Nodes: []NodeEvidence{
				func() NodeEvidence {
					ne := node("127.0.0.11", healthy, readyPod, readyzOK())
					ne.DisabledPlugins = []string{"ValidatingAdmissionWebhook"}
					return ne
				}(),
			}},
			verdict:   Healthy,
			notesHave: []string{"--disable-admission-plugins=ValidatingAdmissionWebhook", "breakglass admission restore"},
		},
		{
			// Talos sets no probes on kube-apiserver: its pod is Ready whenever
			// the container runs, deadlocked or not.
			name: "a Ready pod without /readyz is never healthy",
			ev: Evidence{HealthAsked: true, HealthError: "os:operator cannot fetch the admin kubeconfig", Nodes: []NodeEvidence{
				node("127.0.0.11", healthy, readyPod, nil),
				node("127.0.0.12", healthy, readyPod, refused()),
			}},
			verdict:    Unknown,
			next:       []string{"breakglass apiserver wait --timeout 30s   # asks /readyz with the cluster's admin credentials (needs os:admin)"},
			summaryHas: []string{"readiness could not be checked", "a running pod proves nothing", "os:operator cannot fetch"},
			notesHave:  []string{"node 127.0.0.12: /readyz could not be asked: connect: connection refused"},
		},
		{
			name: "a Ready pod without /readyz, the deadlock in its log: deadlock",
			ev: Evidence{Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{
				node("127.0.0.11", deadlockLogs, readyPod, nil),
			}},
			verdict:  AdmissionDeadlock,
			culprits: []string{"ValidatingWebhookConfiguration/kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail/ValidatingAdmissionWebhook"},
			next:     []string{"breakglass recover --delete kyverno-resource-validating-webhook-cfg", "breakglass admission disable --plugins ValidatingAdmissionWebhook"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := tt.ev
			r := Analyze(&ev, Options{})
			if r.Verdict != tt.verdict {
				t.Fatalf("verdict %s, want %s\nsummary: %s", r.Verdict, tt.verdict, r.Summary)
			}
			var cs []string
			for _, c := range r.Culprits {
				cs = append(cs, c.Kind+"/"+c.Name+"/"+c.Webhook+"/"+c.Plugin)
			}
			if strings.Join(cs, "\n") != strings.Join(tt.culprits, "\n") {
				t.Errorf("culprits:\n%s\nwant\n%s", strings.Join(cs, "\n"), strings.Join(tt.culprits, "\n"))
			}
			if strings.Join(r.Next, "\n") != strings.Join(tt.next, "\n") {
				t.Errorf("next:\n%s\nwant\n%s", strings.Join(r.Next, "\n"), strings.Join(tt.next, "\n"))
			}
			for _, s := range tt.summaryHas {
				if !strings.Contains(r.Summary, s) {
					t.Errorf("summary lacks %q: %s", s, r.Summary)
				}
			}
			if tt.firstSig != "" && (len(r.Findings) == 0 || r.Findings[0].Signature != tt.firstSig) {
				t.Errorf("first finding %v, want %s", r.Findings, tt.firstSig)
			}
			notes := strings.Join(r.Notes, "\n")
			for _, s := range tt.notesHave {
				if !strings.Contains(notes, s) {
					t.Errorf("notes lack %q:\n%s", s, notes)
				}
			}
		})
	}
}

// Evidence is short: identical lines once with a count and the nodes
// they came from, at most MaxLines distinct lines, the most frequent first.
func TestFindingEvidenceIsDeduplicated(t *testing.T) {
	logs := readLines(t, "upgrade-deadlock.log")
	ev := Evidence{Nodes: []NodeEvidence{node("127.0.0.11", logs, runningPod, nil), node("127.0.0.12", logs, runningPod, nil)}}
	r := Analyze(&ev, Options{MaxLines: 2})
	f := r.Findings[0]
	if f.Signature != "webhook-failing-closed" || f.Count != 80 {
		t.Fatalf("first finding %s count %d, want webhook-failing-closed 80 (40 lines on each of 2 nodes)", f.Signature, f.Count)
	}
	if len(f.Lines) != 2 {
		t.Fatalf("%d evidence lines, want 2: %+v", len(f.Lines), f.Lines)
	}
	// The dispatcher line repeats 25 times in the excerpt, with different time stamps.
	if l := f.Lines[0]; l.Count != 50 || strings.Join(l.Nodes, ",") != "127.0.0.11,127.0.0.12" || !strings.Contains(l.Text, "dispatcher.go:217] Failed calling webhook, failing closed") {
		t.Errorf("most frequent line: %dx on %v: %s", l.Count, l.Nodes, l.Text)
	}
	if strings.Join(f.Nodes, ",") != "127.0.0.11,127.0.0.12" {
		t.Errorf("nodes %v", f.Nodes)
	}
	// grpc numbers every connection attempt; the same failure is one line.
	r = Analyze(&Evidence{Nodes: []NodeEvidence{node("127.0.0.11", readLines(t, "etcd-x509.log"), crashLoop, nil)}}, Options{})
	if f := r.Findings[0]; f.Signature != "etcd-certificate" || len(f.Lines) != 1 || f.Lines[0].Count != 11 {
		t.Errorf("etcd certificate evidence: %+v", f)
	}
}

func TestReportJSONFieldNames(t *testing.T) {
	ev := Evidence{HealthAsked: true, Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{node("127.0.0.11", readLines(t, "upgrade-deadlock.log"), runningPod, stuck())}}
	b, err := json.Marshal(Analyze(&ev, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"verdict", "summary", "culprits", "findings", "next", "evidence"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	if m["verdict"] != "admission-deadlock" {
		t.Errorf("verdict %v", m["verdict"])
	}
	c := m["culprits"].([]any)[0].(map[string]any)
	for k, want := range map[string]any{"kind": "ValidatingWebhookConfiguration", "name": "kyverno-resource-validating-webhook-cfg", "webhook": "validate.kyverno.svc-fail", "plugin": "ValidatingAdmissionWebhook", "foundInEtcd": true, "failurePolicy": "Fail"} {
		if c[k] != want {
			t.Errorf("culprit %s = %v, want %v", k, c[k], want)
		}
	}
	n := m["evidence"].(map[string]any)["nodes"].([]any)[0].(map[string]any)
	if _, ok := n["Logs"]; ok {
		t.Error("raw log lines must not be in the JSON")
	}
	if n["logLinesRead"] != float64(60) {
		t.Errorf("logLinesRead %v", n["logLinesRead"])
	}
	f := m["findings"].([]any)[0].(map[string]any)
	for _, k := range []string{"signature", "class", "subject", "meaning", "nodes", "count", "lines"} {
		if _, ok := f[k]; !ok {
			t.Errorf("finding has no %q", k)
		}
	}
}

func TestWriteText(t *testing.T) {
	ev := Evidence{HealthAsked: true, Etcd: kyvernoEtcd(), Nodes: []NodeEvidence{node("127.0.0.11", readLines(t, "upgrade-deadlock.log"), runningPod, stuck())}}
	var b bytes.Buffer
	if err := WriteText(&b, Analyze(&ev, Options{})); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{
		"verdict: admission-deadlock\n",
		"culprit: ValidatingWebhookConfiguration kyverno-resource-validating-webhook-cfg\n",
		"  webhook validate.kyverno.svc-fail, failurePolicy Fail, https://127.0.0.1:9443/validate/fail\n",
		"  127.0.0.11 (cp-1): not ready; pod running, 4 restarts; readyz failing poststarthook/start-service-ip-repair-controllers",
		"  [webhook-failing-closed] validate.kyverno.svc-fail: ",
		"    25x on 127.0.0.11: W1129 22:43:28.818338   29423 dispatcher.go:217] Failed calling webhook, failing closed",
		"\nnext:\n  breakglass recover --delete kyverno-resource-validating-webhook-cfg\n  breakglass admission disable --plugins ValidatingAdmissionWebhook\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if !strings.HasSuffix(out, "ValidatingAdmissionWebhook\n") {
		t.Errorf("the next command must come last:\n%s", out)
	}
}

// The lab's Kyverno-like setup: the log names only the mutating webhook
// (it runs first), but the validating one blocks start-up too; the next
// command must turn both plugins off, or the API server stays down.
func TestAnalyzeWebhookNotInLogYet(t *testing.T) {
	logs := []string{
		`W1129 22:57:03.100200      44 dispatcher.go:201] Failed calling webhook, failing closed mutate.kyverno.svc-fail: failed calling webhook "mutate.kyverno.svc-fail": failed to call webhook: Post "https://127.0.0.1:9443/mutate/fail?timeout=10s": context deadline exceeded`,
		`I1129 22:57:03.100900      44 event.go:389] "Event occurred" object="" fieldPath="" kind="ServiceCIDR" apiVersion="networking.k8s.io/v1" type="Warning" reason="KubernetesDefaultServiceCIDRError" message="The default ServiceCIDR can not be created"`,
	}
	ee := kyvernoEtcd()
	for i := range ee.Objects {
		if strings.HasPrefix(ee.Objects[i].Kind, "ValidatingWebhook") || strings.HasPrefix(ee.Objects[i].Kind, "MutatingWebhook") {
			ee.Objects[i].StartupRisk = "deadlock"
		}
	}
	r := Analyze(&Evidence{HealthAsked: true, Etcd: ee, Nodes: []NodeEvidence{node("127.0.0.11", logs, runningPod, stuck())}}, Options{})
	if r.Verdict != AdmissionDeadlock {
		t.Fatalf("verdict %s: %s", r.Verdict, r.Summary)
	}
	want := "breakglass recover --runbook mutating-webhook-deadlock --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook --delete kyverno-resource-mutating-webhook-cfg"
	if len(r.Next) == 0 || r.Next[0] != want {
		t.Errorf("next %q, want first %q", r.Next, want)
	}
	if !slices.Contains(r.Next, "breakglass admission disable --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook") {
		t.Errorf("next %q lacks the disable of both plugins", r.Next)
	}
	found := false
	for _, n := range r.Notes {
		found = found || strings.Contains(n, "kyverno-resource-validating-webhook-cfg is not in the log yet")
	}
	if !found {
		t.Errorf("notes %q do not name the validating configuration", r.Notes)
	}
}
