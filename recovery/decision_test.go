package recovery

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
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
			if !slices.Equal(admissionOf(d).Plugins, tt.plugins) {
				t.Errorf("plugins %v, want %v", admissionOf(d).Plugins, tt.plugins)
			}
			// The decision fills the disable step the run follows; the
			// runbook's step is left as it was.
			for _, s := range d.follow(tt.opts.Steps) {
				if p, ok := s.Params.(*runbooks.AdmissionDisableParams); ok && !slices.Equal(p.Plugins, tt.plugins) {
					t.Errorf("step %s disables %v, want %v", s.Name, p.Plugins, tt.plugins)
				}
			}
			if p := tt.opts.Steps[2].Params.(*runbooks.AdmissionDisableParams); !slices.Equal(p.Plugins, []string{"ValidatingAdmissionWebhook"}) && !tt.opts.PluginsExplicit {
				t.Errorf("the runbook's disable step was changed: %v", p.Plugins)
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
	if got == nil || !slices.Equal(admissionOf(got).Plugins, admissionOf(d).Plugins) || len(got.Reasons) != len(d.Reasons) || got.Type != "admission-deadlock" {
		t.Fatalf("decision read back %+v, want %+v", got, d)
	}
	failed := &run{entries: []Entry{{Kind: "end", Step: "diagnose", Action: "diagnose", Outcome: OutcomeFailed}}}
	if failed.decision() != nil {
		t.Errorf("a failed diagnose decided something")
	}
	// A journal from before types were journaled, whose diagnosis fixed
	// nothing: no decision to follow.
	empty := &run{entries: []Entry{{Kind: "end", Step: "diagnose", Action: "diagnose", Outcome: OutcomeOK, Data: json.RawMessage(`{"verdict":"admission-deadlock","decision":{"verdict":"admission-deadlock","plugins":null}}`)}}}
	if d := empty.decision(); d != nil {
		t.Errorf("an old journal's empty decision read as %+v", d)
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

// stepParams are the parameters of the step of that name (nil: none).
func stepParams[P Params](t *testing.T, steps []Step, name string) P {
	t.Helper()
	var zero P
	for _, s := range steps {
		if s.Name == name {
			p, ok := s.Params.(P)
			if !ok {
				t.Fatalf("step %s has parameters %T", name, s.Params)
			}
			return p
		}
	}
	t.Fatalf("no step %s in %v", name, stepNames(append([]Step{{Name: "diagnose", Params: &runbooks.DiagnoseParams{}}}, steps...), runbooks.ActionDiagnose))
	return zero
}

// Journals written before each type owned its decision (by main's code,
// testdata/decision-v1: the decision's plugins, flags, lost and source
// beside its verdict) still resume: the decision reads back whole, and the
// steps after diagnose get, as parameters, what those steps read from the
// shared decision then. Its JSON is the same but for "plugins": null, no
// longer written for the types that decide no plugins.
func TestDecisionOfJournalsBeforeTypesOwnedIt(t *testing.T) {
	tests := []struct {
		file  string
		check func(t *testing.T, steps []Step)
	}{
		{"admission-deadlock.jsonl", func(t *testing.T, steps []Step) {
			both := []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}
			if p := stepParams[*runbooks.AdmissionDisableParams](t, steps, "disable"); !slices.Equal(p.Plugins, both) {
				t.Errorf("disable turns off %v, want %v", p.Plugins, both)
			}
			if p := stepParams[*runbooks.APIServerWaitParams](t, steps, "wait-apiserver"); !slices.Equal(p.Disabled, both) {
				t.Errorf("the wait watches for a deadlock %v do not end, want %v", p.Disabled, both)
			}
			for _, s := range steps {
				if s.Name == "disable" || s.Name == "restore" || s.Name == "verify" {
					if !strings.Contains(s.Description, "In this run the plugins are ValidatingAdmissionWebhook,MutatingAdmissionWebhook, as the diagnosis decided (the runbook names ValidatingAdmissionWebhook).") {
						t.Errorf("step %s: %s", s.Name, s.Description)
					}
				}
			}
		}},
		{"apiserver-flags.jsonl", func(t *testing.T, steps []Step) {
			if len(steps) != 2 || steps[0].Name != "remove-flags" || steps[1].Name != "wait-apiserver" {
				t.Fatalf("steps after diagnose %v, want apiserver-flags's", stepNames(append([]Step{{Name: "diagnose", Params: &runbooks.DiagnoseParams{}}}, steps...), runbooks.ActionDiagnose))
			}
			want := []string{"feature-gates:MultiCIDRServiceAllocator", "cloud-provider"}
			if p := stepParams[*runbooks.ExtraArgsRemoveParams](t, steps, "remove-flags"); !slices.Equal(p.Flags, want) {
				t.Errorf("remove-flags takes out %v, want %v", p.Flags, want)
			}
			if p := stepParams[*runbooks.APIServerWaitParams](t, steps, "wait-apiserver"); len(p.Disabled) != 0 {
				t.Errorf("the wait of a flags run watches plugins %v", p.Disabled)
			}
		}},
		{"etcd-member-lost.jsonl", func(t *testing.T, steps []Step) {
			want := []LostMember{{Node: "10.5.0.3", MemberID: "8e9e05c52164694d", Why: "its data was wiped"}, {Node: "10.5.0.9", MemberID: "91bc3c398fb3c146", Why: "its node is gone for good (--nodes-gone) and does not answer", Gone: true}}
			if p := stepParams[*runbooks.EtcdMemberRemoveParams](t, steps, "remove-member"); !slices.Equal(p.Lost, want) {
				t.Errorf("remove-member removes %+v, want %+v", p.Lost, want)
			}
			if p := stepParams[*runbooks.EtcdResetParams](t, steps, "reset-node"); !slices.Equal(p.Lost, want) || p.Nodes != runbooks.ResetLost {
				t.Errorf("reset-node: %+v, want the lost %+v", p, want)
			}
		}},
		{"etcd-quorum-lost.jsonl", func(t *testing.T, steps []Step) {
			if p := stepParams[*runbooks.EtcdCopyParams](t, steps, "copy"); p.From != "10.5.0.4" {
				t.Errorf("the copy comes from %q, want 10.5.0.4", p.From)
			}
			if p := stepParams[*runbooks.EtcdBootstrapParams](t, steps, "bootstrap"); p.From != "10.5.0.4" {
				t.Errorf("bootstrap on %q, want 10.5.0.4", p.From)
			}
			if p := stepParams[*runbooks.EtcdResetParams](t, steps, "reset-nodes"); p.Nodes != runbooks.ResetAll {
				t.Errorf("reset: %+v", p)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			entries, err := ReadJournal(filepath.Join("testdata", "decision-v1", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var opts RecoverOptions
			if err := json.Unmarshal(entries[0].Meta.Options, &opts); err != nil {
				t.Fatal(err)
			}
			journaled := slices.Clone(opts.Steps)
			r := &run{entries: entries, opts: opts}
			d := r.decision()
			if d == nil || d.Of == nil || d.incidentType() == nil {
				t.Fatalf("decision %+v", d)
			}
			steps := d.follow(opts.Steps)
			i := slices.IndexFunc(steps, func(s Step) bool { return s.Name == "diagnose" })
			if i < 0 || !slices.EqualFunc(steps[:i+1], journaled[:i+1], func(a, b Step) bool { return a.Name == b.Name }) {
				t.Fatalf("the steps up to diagnose changed: %+v", steps)
			}
			tt.check(t, steps[i+1:])
			// The journal's own steps, and the decision's, are left as they were.
			again, _ := json.Marshal(journaled)
			before, _ := json.Marshal(opts.Steps)
			if string(again) != string(before) {
				t.Errorf("following the decision changed the journaled steps")
			}

			// The decision's JSON, read and written again, is the one the
			// journal holds, but for "plugins": null.
			var old map[string]json.RawMessage
			if err := json.Unmarshal(entries[len(entries)-1].Data, &old); err != nil {
				t.Fatal(err)
			}
			var was map[string]any
			if err := json.Unmarshal(old["decision"], &was); err != nil {
				t.Fatal(err)
			}
			if was["plugins"] == nil {
				delete(was, "plugins")
			}
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			var now map[string]any
			if err := json.Unmarshal(b, &now); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(was, now) {
				t.Errorf("decision JSON\n was %s\n now %s", old["decision"], b)
			}
		})
	}
}

// No step reads the decision: each reads its parameters (which the
// decision filled) and earlier results. A step file that names the
// decision, its type's own value, or how the loop reads it fails here.
func TestNoStepReadsTheDecision(t *testing.T) {
	files, err := filepath.Glob("step_*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("step files: %v %v", files, err)
	}
	banned := map[string]bool{"decision": true, "Decision": true, "Decided": true, "decided": true, "Of": true}
	for _, own := range incidentTypes {
		if own.Decided != nil {
			banned[reflect.TypeOf(own.Decided()).Elem().Name()] = true
		}
	}
	fset := token.NewFileSet()
	// And every function of the package that takes a decision (a type's
	// helpers, as admissionOf).
	all, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range all {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			fields := fn.Type.Params.List
			if fn.Recv != nil {
				fields = append(fields, fn.Recv.List...)
			}
			for _, field := range fields {
				if star, ok := field.Type.(*ast.StarExpr); ok {
					if id, ok := star.X.(*ast.Ident); ok && id.Name == "Decision" {
						banned[fn.Name.Name] = true
					}
				}
			}
		}
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "step_diagnose.go" { // the step that makes it
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && (banned[id.Name] || strings.HasSuffix(id.Name, "Decision")) {
				t.Errorf("%s: %s reads the decision; give the step a parameter the decision fills (Decided.Fill)", fset.Position(id.Pos()), id.Name)
			}
			return true
		})
	}
}

// -o json readers of recover, resume and revert keep their fields: the
// decision's plugins, flags, lost and source are where they were
// (decision.plugins, ...), and read back into the type's own value.
func TestDecisionJSONKeepsItsFields(t *testing.T) {
	admission, err := decide(kyvernoReport(), RecoverOptions{Runbook: "webhook-deadlock", Steps: webhookRunbookSteps()})
	if err != nil {
		t.Fatal(err)
	}
	lost := []LostMember{{Node: "10.5.0.3", MemberID: "8e9e05c52164694d", Why: "its data was wiped"}}
	tests := []struct {
		d    *Decision
		want string // the decision's fields of the type, as JSON
	}{
		{admission, `"plugins":["ValidatingAdmissionWebhook","MutatingAdmissionWebhook"]`},
		{&Decision{Verdict: "flags-refused", Type: "apiserver-flags", Of: &FlagsDecision{Flags: []string{"cloud-provider"}}}, `"flags":["cloud-provider"]`},
		{&Decision{Verdict: "etcd-member-lost", Type: "etcd-member-lost", Of: &EtcdMembersDecision{Lost: lost, Source: "10.5.0.2"}},
			`"lost":[{"node":"10.5.0.3","memberID":"8e9e05c52164694d","why":"its data was wiped"}],"source":"10.5.0.2"`},
		{&Decision{Verdict: "etcd-quorum-lost", Type: "etcd-quorum-lost", Of: &EtcdMembersDecision{Source: "10.5.0.4"}}, `"source":"10.5.0.4"`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(&RecoverResult{Outcome: "completed", Decision: tt.d})
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Decision map[string]json.RawMessage `json:"decision"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte("{"+tt.want+"}"), &want); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if string(out.Decision[k]) != string(v) {
				t.Errorf("%s: decision.%s is %s, want %s (in %s)", tt.d.Type, k, out.Decision[k], v, b)
			}
		}
		if string(out.Decision["verdict"]) != `"`+tt.d.Verdict+`"` {
			t.Errorf("%s: decision.verdict %s", tt.d.Type, out.Decision["verdict"])
		}
		var back RecoverResult
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Decision == nil || !reflect.DeepEqual(back.Decision.Of, tt.d.Of) {
			t.Errorf("%s: read back %+v, want %+v", tt.d.Type, back.Decision, tt.d.Of)
		}
	}
	// No type's own field takes a shared field's name: the JSON would hold
	// it twice.
	shared := jsonNames(reflect.TypeOf(Decision{}))
	for _, it := range incidentTypes {
		if it.Decided == nil {
			continue
		}
		for _, n := range jsonNames(reflect.TypeOf(it.Decided()).Elem()) {
			if slices.Contains(shared, n) {
				t.Errorf("type %s decides %q, a field every decision has", it.Name, n)
			}
		}
	}
}

func jsonNames(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "-" && name != "" {
			out = append(out, name)
		}
	}
	return out
}
