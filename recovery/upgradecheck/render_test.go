package upgradecheck

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/internal/golden"
)

// sampleFleet is two clusters: one no-go on admission and etcd's room,
// one that could not be reached.
func sampleFleet() *Fleet {
	start := time.Date(2026, 12, 4, 9, 30, 0, 0, time.UTC)
	prod := &Report{Cluster: "prod", Nodes: []string{"10.5.0.2", "10.5.0.3", "10.5.0.4"}, From: "1.33", To: "1.34", Started: start, Elapsed: 8300 * time.Millisecond,
		Checks: []Check{
			{ID: CheckAccess, Verdict: Go, Summary: "3 node(s) answered (3 control plane(s)); etcd reached with a client certificate"},
			{ID: CheckUpgradePath, Verdict: Go, Summary: "1.33 -> 1.34: one minor, as talosctl upgrade-k8s requires"},
			{ID: CheckAdmission, Verdict: NoGo, Summary: "1 webhook or policy would stop kube-apiserver 1.34's start (webhook backends assumed down, as when they run in the cluster): kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail",
				Evidence: []string{"deadlock: kyverno-resource-validating-webhook-cfg/validate.kyverno.svc-fail (failurePolicy Fail): UPDATE rbac.authorization.k8s.io/v1 clusterroles system:monitoring | <x>"},
				Fix:      []string{"breakglass --context prod audit --from-etcd --fix --from 1.33 --to 1.34 > fixed.yaml (adds the matchCondition request.userInfo.username != 'system:apiserver' to each), then kubectl apply -f fixed.yaml"}},
			{ID: CheckEtcdSpace, Verdict: NoGo, Summary: "member 1 (cp-1) has less room under its quota than the upgrade needs (2.0 MiB)",
				Fix: []string{"compact and defragment (frees about 3.5 MiB): breakglass --context prod recover (runbook etcd-nospace)"}},
			{ID: CheckRollbackPoint, Verdict: Warn, Summary: "no rollback point: no etcd snapshot taken now or named", Fix: []string{"take one: --snapshot FILE"}},
			{ID: CheckAPIServerFlags, Verdict: Go, Summary: "kube-apiserver v1.34.4 accepts every extraArgs key"},
		}}
	prod.finish(false)
	lost := &Report{Cluster: "lost", To: "1.34", Started: start, Elapsed: 4 * time.Second, Checks: []Check{
		{ID: CheckAccess, Verdict: NoGo, Summary: "the Talos API did not answer for any node (10.9.0.2)", Evidence: []string{"node 10.9.0.2: unreachable"}},
		{ID: CheckUpgradePath, Verdict: NoGo, NotChecked: true, Summary: "not checked: the cluster's Talos API was not reached"},
		{ID: CheckAdmission, Verdict: NoGo, NotChecked: true, Summary: "not checked: the cluster's Talos API was not reached"},
	}}
	lost.finish(false)
	return &Fleet{Clusters: []*Report{prod, lost}, Verdict: NoGo, To: "1.34", Elapsed: 8400 * time.Millisecond}
}

func TestRenderGolden(t *testing.T) {
	fl := sampleFleet()
	var text, verbose, junit, markdown bytes.Buffer
	if err := WriteText(&text, fl, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteText(&verbose, fl, TextOptions{Verbose: true, Width: 100}); err != nil {
		t.Fatal(err)
	}
	if err := WriteJUnit(&junit, fl); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&markdown, fl); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/golden/fleet.txt", text.Bytes())
	golden.Check(t, "testdata/golden/fleet-verbose.txt", verbose.Bytes())
	golden.Check(t, "testdata/golden/fleet.junit.xml", junit.Bytes())
	golden.Check(t, "testdata/golden/fleet.md", markdown.Bytes())
	for _, line := range strings.Split(verbose.String(), "\n") {
		if strings.HasPrefix(line, "no-go") || strings.HasPrefix(line, "warn") || strings.HasPrefix(line, "go ") {
			if n := len([]rune(line)); n > 100 {
				t.Errorf("a summary line of %d columns at width 100: %q", n, line)
			}
		}
	}
	// The not-checked checks of the unreachable cluster are said once.
	if strings.Count(text.String(), "not checked: the cluster's Talos API was not reached") != 1 {
		t.Errorf("not-checked lines repeated:\n%s", text.String())
	}
}

// The JUnit output parses; each check is a test case, each no-go a
// failure (a check not run an error); warnings pass unless strict.
func TestJUnitParses(t *testing.T) {
	fl := sampleFleet()
	var b bytes.Buffer
	if err := WriteJUnit(&b, fl); err != nil {
		t.Fatal(err)
	}
	var got junitSuites
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	cases, failures, errs := 0, 0, 0
	for _, r := range fl.Clusters {
		cases += len(r.Checks)
		for _, c := range r.Checks {
			switch {
			case c.NotChecked:
				errs++
			case c.Verdict == NoGo:
				failures++
			}
		}
	}
	if got.Tests != cases || got.Failures != failures || got.Errors != errs || len(got.Suites) != 2 || got.Suites[0].Cases[0].Failure == nil {
		t.Errorf("tests %d/%d, failures %d/%d, errors %d/%d, suites %d", got.Tests, cases, got.Failures, failures, got.Errors, errs, len(got.Suites))
	}
	for _, c := range got.Suites[0].Cases {
		if c.Name == CheckRollbackPoint && (c.Failure != nil || c.SystemOut == nil || !strings.HasPrefix(c.SystemOut.Text, "warn: ")) {
			t.Errorf("a warning is not a failure: %+v", c)
		}
	}
	fl.Clusters[0].Strict = true
	b.Reset()
	if err := WriteJUnit(&b, fl); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil || got.Failures != failures+1 {
		t.Errorf("strict: %v, failures %d", err, got.Failures)
	}
}

func TestJSONParses(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, sampleFleet()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Verdict  string `json:"verdict"`
		Clusters []struct {
			Cluster string `json:"cluster"`
			Verdict string `json:"verdict"`
			Checks  []struct {
				ID, Verdict, Summary string
				NotChecked           bool `json:"notChecked"`
			} `json:"checks"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Verdict != "no-go" || len(got.Clusters) != 2 || got.Clusters[0].Checks[0].Verdict != "no-go" || !got.Clusters[1].Checks[1].NotChecked {
		t.Errorf("%+v", got)
	}
}
