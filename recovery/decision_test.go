package recovery

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func webhookRunbookSteps() []Step {
	return []Step{
		{Name: "preflight", Params: &runbooks.PreflightParams{}},
		{Name: "diagnose", Params: &runbooks.DiagnoseParams{TailLines: 200}},
		{Name: "disable", Params: &runbooks.AdmissionDisableParams{Plugins: []string{"ValidatingAdmissionWebhook"}}},
		{Name: "delete-webhook", Params: &runbooks.EtcdDeleteParams{Kind: "validating"}, Optional: true},
		{Name: "restore", Params: &runbooks.AdmissionRestoreParams{}},
	}
}

// The lab's Kyverno-like deadlock as diagnose reports it: the mutating
// webhook in the log, the validating one found by the audit of etcd.
func kyvernoReport() *diagnose.Report {
	return &diagnose.Report{
		Verdict:  diagnose.AdmissionDeadlock,
		Findings: []diagnose.Finding{{Signature: "webhook-failing-closed", Class: diagnose.ClassAdmission, Subject: "mutate.kyverno.svc-fail"}},
		Plugins: []diagnose.PluginNeed{
			{Plugin: "ValidatingAdmissionWebhook", Why: "ValidatingWebhookConfiguration kyverno-resource-validating-webhook-cfg fails closed on start-up writes too"},
			{Plugin: "MutatingAdmissionWebhook", Why: `webhook "mutate.kyverno.svc-fail" refuses start-up writes (log)`},
		},
		Runbook: "mutating-webhook-deadlock",
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name      string
		report    *diagnose.Report
		opts      RecoverOptions
		plugins   []string
		err       error  // errNothingToRecover, or a *NotDeadlockError when verdict is set
		verdict   string // of the NotDeadlockError
		hint      string // in its first hint
		reasons   []string
		warnings  []string
		noWarning bool
	}{
		{
			name:      "the diagnosis adds the plugin the runbook lacks, and says why",
			report:    kyvernoReport(),
			opts:      RecoverOptions{Runbook: "webhook-deadlock", Steps: webhookRunbookSteps()},
			plugins:   []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"},
			reasons:   []string{"MutatingAdmissionWebhook: webhook \"mutate.kyverno.svc-fail\" refuses start-up writes", "ValidatingAdmissionWebhook: ValidatingWebhookConfiguration kyverno-resource-validating-webhook-cfg", "the diagnosis names runbook mutating-webhook-deadlock"},
			noWarning: true,
		},
		{
			name: "a policy deadlock: only the policy's plugin, the runbook's default stays on",
			report: &diagnose.Report{Verdict: diagnose.AdmissionDeadlock, Runbook: "policy-deadlock", Suspected: true,
				Plugins:  []diagnose.PluginNeed{{Plugin: "MutatingAdmissionPolicy", Why: "MutatingAdmissionPolicy add-team-label (binding add-team-label-binding) rejects start-up writes (audit of etcd)"}},
				Evidence: &diagnose.Evidence{Etcd: diagnose.EtcdEvidence{Asked: true, Objects: []diagnose.AdmissionObject{{Kind: "MutatingAdmissionPolicy", Name: "add-team-label", Encoding: "protobuf"}}}}},
			opts:      RecoverOptions{Runbook: "webhook-deadlock", Steps: webhookRunbookSteps()},
			plugins:   []string{"MutatingAdmissionPolicy"},
			reasons:   []string{"ValidatingAdmissionWebhook (the runbook's default) stays on: the diagnosis finds nothing it would bypass", "MutatingAdmissionPolicy: MutatingAdmissionPolicy add-team-label"},
			noWarning: true,
		},
		{
			name: "the same, but etcd holds an encrypted object the diagnosis cannot read: the runbook's own too",
			report: &diagnose.Report{Verdict: diagnose.AdmissionDeadlock, Runbook: "policy-deadlock",
				Plugins:  []diagnose.PluginNeed{{Plugin: "MutatingAdmissionPolicy", Why: "log"}},
				Evidence: &diagnose.Evidence{Etcd: diagnose.EtcdEvidence{Asked: true, Objects: []diagnose.AdmissionObject{{Kind: "ValidatingWebhookConfiguration", Name: "x", Encoding: "encrypted"}}}}},
			opts:    RecoverOptions{Runbook: "webhook-deadlock", Steps: webhookRunbookSteps()},
			plugins: []string{"ValidatingAdmissionWebhook", "MutatingAdmissionPolicy"},
			reasons: []string{"ValidatingAdmissionWebhook: the runbook's own"},
		},
		{
			name:     "explicit --plugins win, with a warning when the diagnosis says they are not enough",
			report:   kyvernoReport(),
			opts:     RecoverOptions{Runbook: "webhook-deadlock", Steps: webhookRunbookSteps(), PluginsExplicit: true},
			plugins:  []string{"ValidatingAdmissionWebhook"},
			warnings: []string{"the diagnosis says MutatingAdmissionWebhook must be off too", "may stay down"},
		},
		{
			name:     "an explicit --runbook other than the diagnosis's is warned about",
			report:   kyvernoReport(),
			opts:     RecoverOptions{Runbook: "webhook-deadlock", Steps: webhookRunbookSteps(), RunbookExplicit: true},
			plugins:  []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"},
			warnings: []string{"--runbook webhook-deadlock given; the diagnosis names mutating-webhook-deadlock"},
		},
		{
			name:   "runbook apiserver-flags on an admission deadlock: stop, naming the diagnosis's runbook",
			report: kyvernoReport(),
			opts: RecoverOptions{Runbook: "apiserver-flags", RunbookExplicit: true, Steps: []Step{
				{Name: "diagnose", Params: &runbooks.DiagnoseParams{}},
				{Name: "remove-flags", Params: &runbooks.ExtraArgsRemoveParams{}},
			}},
			verdict: "admission-deadlock",
			hint:    "the diagnosis picks mutating-webhook-deadlock",
		},
		{
			name: "an admission runbook on refused flags: stop, naming apiserver-flags",
			report: &diagnose.Report{Verdict: diagnose.FlagsRefused, Runbook: diagnose.FlagsRunbook, Summary: "kube-apiserver refuses --cloud-provider",
				Flags: []diagnose.RefusedFlag{{Flag: "cloud-provider", Refusal: "unknown flag: --cloud-provider", Nodes: []string{"127.0.0.11"}}}},
			opts:    RecoverOptions{Runbook: "webhook-deadlock", RunbookExplicit: true, Steps: webhookRunbookSteps()},
			verdict: "flags-refused",
			hint:    "the diagnosis picks apiserver-flags",
		},
		{
			name:   "healthy: nothing to recover",
			report: &diagnose.Report{Verdict: diagnose.Healthy},
			opts:   RecoverOptions{Steps: webhookRunbookSteps()},
			err:    errNothingToRecover,
		},
		{
			name:    "another failure: stop with its verdict",
			report:  &diagnose.Report{Verdict: diagnose.OtherFailure, Summary: "kube-apiserver is not ready: bad flag", Next: []string{"breakglass admission status"}},
			opts:    RecoverOptions{Steps: webhookRunbookSteps()},
			verdict: "other-failure",
		},
		{
			name:    "cannot tell, and no positive evidence: stop",
			report:  &diagnose.Report{Verdict: diagnose.Unknown, Summary: "readiness could not be checked"},
			opts:    RecoverOptions{Steps: webhookRunbookSteps()},
			verdict: "unknown",
		},
		{
			name:     "cannot tell, but --plugins given: go on, saying why",
			report:   &diagnose.Report{Verdict: diagnose.Unknown, Summary: "readiness could not be checked"},
			opts:     RecoverOptions{Steps: webhookRunbookSteps(), PluginsExplicit: true},
			plugins:  []string{"ValidatingAdmissionWebhook"},
			warnings: []string{"readiness could not be checked: going on because --plugins was given"},
		},
		{
			name: "cannot tell, but start-up is stuck and etcd holds a policy: go on with its plugin",
			report: &diagnose.Report{Verdict: diagnose.Unknown, Suspected: true,
				Plugins: []diagnose.PluginNeed{{Plugin: "ValidatingAdmissionPolicy", Why: "suspected, start-up is stuck at start-kubernetes-service-cidr-controller: ValidatingAdmissionPolicy deny-servicecidr is in etcd"}}},
			opts:     RecoverOptions{Steps: webhookRunbookSteps()},
			plugins:  []string{"ValidatingAdmissionWebhook", "ValidatingAdmissionPolicy"},
			reasons:  []string{"ValidatingAdmissionPolicy: suspected"},
			warnings: []string{"going on because start-up is stuck and etcd holds admission objects that can block it"},
		},
		{
			name: "cannot tell, but the log shows admission refusing: go on with the diagnosis's plugins",
			report: &diagnose.Report{Verdict: diagnose.Unknown, Findings: kyvernoReport().Findings,
				Plugins: []diagnose.PluginNeed{{Plugin: "MutatingAdmissionWebhook", Why: "log"}}},
			opts:     RecoverOptions{Steps: webhookRunbookSteps()},
			plugins:  []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"},
			warnings: []string{"going on because the log shows admission refusing writes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := decide(tt.report, tt.opts)
			var nd *NotDeadlockError
			switch {
			case tt.err != nil:
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				return
			case tt.verdict != "":
				if !errors.As(err, &nd) || string(nd.Verdict) != tt.verdict {
					t.Fatalf("err %v, want a stop with verdict %s", err, tt.verdict)
				}
				if len(nd.Hints()) == 0 {
					t.Fatalf("a stop names no next command")
				}
				if !strings.Contains(nd.Hints()[0], tt.hint) || !strings.Contains(nd.Error(), "nothing was changed") {
					t.Errorf("stop %q, first hint %q, want %q in it", nd.Error(), nd.Hints()[0], tt.hint)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if !slices.Equal(d.Plugins, tt.plugins) {
				t.Errorf("plugins %v, want %v", d.Plugins, tt.plugins)
			}
			all := strings.Join(d.Reasons, "\n")
			for _, r := range tt.reasons {
				if !strings.Contains(all, r) {
					t.Errorf("reasons lack %q:\n%s", r, all)
				}
			}
			warns := strings.Join(d.Warnings, "\n")
			for _, w := range tt.warnings {
				if !strings.Contains(warns, w) {
					t.Errorf("warnings lack %q:\n%s", w, warns)
				}
			}
			if tt.noWarning && warns != "" {
				t.Errorf("unexpected warnings:\n%s", warns)
			}
			if out := d.Render(); !strings.Contains(out, "disable "+strings.Join(tt.plugins, ",")) {
				t.Errorf("rendered plan:\n%s", out)
			}
		})
	}
}

// A resumed run follows the decision journaled with the first run's
// diagnose step, through the journal's JSON.
func TestDecisionFromJournal(t *testing.T) {
	d, err := decide(kyvernoReport(), RecoverOptions{Runbook: "webhook-deadlock", Steps: webhookRunbookSteps()})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(Entry{Kind: "end", Step: "diagnose", Action: "diagnose", Outcome: OutcomeOK, Data: journalData(&DiagnoseResult{Verdict: "admission-deadlock", Decision: d})})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	resumed := &run{entries: []Entry{{Kind: "begin", Step: "diagnose", Action: "diagnose"}, e}}
	got := resumed.decision()
	if got == nil || !slices.Equal(got.Plugins, d.Plugins) || len(got.Reasons) != len(d.Reasons) || got.Type != "admission-deadlock" {
		t.Fatalf("decision read back %+v, want %+v", got, d)
	}
	failed := &run{entries: []Entry{{Kind: "end", Step: "diagnose", Action: "diagnose", Outcome: OutcomeFailed}}}
	if failed.decision() != nil {
		t.Errorf("a failed diagnose decided something")
	}
}

func TestWithRequestedDeletes(t *testing.T) {
	steps, err := withRequestedDeletes(webhookRunbookSteps(), []string{"kyverno-resource-mutating-webhook-cfg"}, "", "webhook-deadlock")
	if err != nil {
		t.Fatal(err)
	}
	del, params := steps[3], steps[3].Params.(*runbooks.EtcdDeleteParams)
	if params.Kind != "all" || del.Optional || !del.Requested || !slices.Equal(params.Names, []string{"kyverno-resource-mutating-webhook-cfg"}) {
		t.Errorf("delete step %+v", del)
	}
	runbook := webhookRunbookSteps()
	if _, err := withRequestedDeletes(runbook, []string{"x"}, "", "webhook-deadlock"); err != nil {
		t.Fatal(err)
	}
	if orig := runbook[3]; !orig.Optional || orig.Params.(*runbooks.EtcdDeleteParams).Kind != "validating" || len(orig.Params.(*runbooks.EtcdDeleteParams).Names) != 0 {
		t.Errorf("the runbook's own steps were changed: %+v", orig)
	}
	steps, err = withRequestedDeletes(webhookRunbookSteps(), []string{"mutating/x"}, "", "webhook-deadlock")
	if err != nil || steps[3].Params.(*runbooks.EtcdDeleteParams).Kind != "mutating" {
		t.Errorf("KIND/NAME: %+v, %v", steps[3], err)
	}
	for _, bad := range []struct {
		names []string
		kind  string
		want  string
	}{
		{[]string{"Not_A_Name"}, "", "is not a Kubernetes object name"},
		{[]string{"x"}, "sideways", "unknown --kind"},
		{[]string{"mutating/x"}, "validating", "--kind says validating"},
	} {
		if _, err := withRequestedDeletes(webhookRunbookSteps(), bad.names, bad.kind, "webhook-deadlock"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v --kind %q: err %v, want %q", bad.names, bad.kind, err, bad.want)
		}
	}
	noDelete := []Step{{Name: "disable", Params: &runbooks.AdmissionDisableParams{}}}
	if _, err := withRequestedDeletes(noDelete, []string{"x"}, "", "custom"); err == nil || !errors.Is(err, failure.BadInput) {
		t.Errorf("runbook without etcd.delete: %v", err)
	}
}
