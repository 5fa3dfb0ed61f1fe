package lab

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/startupwrites"
)

// The recording webhook answers allowed and keeps one entry per distinct
// request, reduced to what the model is checked on.
func TestRecordingWebhook(t *testing.T) {
	pki, err := newRecordPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := startRecordingWebhook(pki)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	cfg, _ := json.Marshal(h.configuration())
	for _, want := range []string{`"url":"https://127.0.0.1:`, `"failurePolicy":"Ignore"`, `"matchPolicy":"Exact"`, `"resources":["*/*"]`} {
		if !bytes.Contains(cfg, []byte(want)) {
			t.Errorf("configuration lacks %s: %s", want, cfg)
		}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	send := func(name string) {
		t.Helper()
		obj := []byte(`{"apiVersion":"networking.k8s.io/v1","kind":"ServiceCIDR","metadata":{"name":"` + name + `","labels":{"a":"b"}}}`)
		opts := []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"fm"}`)
		review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create, Name: name,
				Kind:     metav1.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "ServiceCIDR"},
				Resource: metav1.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"},
				UserInfo: authenticationv1.UserInfo{Username: audit.APIServerUser, Groups: audit.APIServerGroups},
				Object:   runtime.RawExtension{Raw: obj}, Options: runtime.RawExtension{Raw: opts}}}
		body, _ := json.Marshal(review)
		resp, err := client.Post("https://"+h.addr+"/review", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil || !out.Response.Allowed || out.Response.UID != "u1" {
			t.Fatalf("answer: %v %+v", err, out.Response)
		}
	}
	send("kubernetes")
	send("kubernetes")
	send("other")
	got := h.requests()
	if len(got) != 2 {
		t.Fatalf("recorded %d distinct requests, want 2: %+v", len(got), got)
	}
	o := got[0]
	if o.Operation != "CREATE" || o.Group != "networking.k8s.io" || o.Resource != "servicecidrs" || o.Kind != "ServiceCIDR" ||
		o.Name != "kubernetes" || o.Labels["a"] != "b" || o.Options != "CreateOptions" || o.FieldManager != "fm" || o.Username != audit.APIServerUser {
		t.Errorf("observed %+v", o)
	}
	var buf bytes.Buffer
	if err := (&Recording{Requests: got}).WriteJSONL(&buf); err != nil || strings.Count(buf.String(), "\n") != 2 {
		t.Errorf("jsonl: %v %q", err, buf.String())
	}
	h.reset()
	if len(h.requests()) != 0 {
		t.Error("reset kept requests")
	}
}

// minor is "1.NN" of "v1.NN.P".
func minor(v string) string {
	m, err := audit.NormalizeVersion(v)
	if err != nil {
		panic(err)
	}
	return m
}

// Each upgrade pair recorded live from the real binaries: what the target
// sends itself must be what internal/startupwrites holds for that pair
// (its fatal writes, one by one: the audit judges them), and in the
// audit's catalogue. A binary that writes otherwise than its file says
// fails here; `go run ./lab/recordstartup` records it again.
func TestStartupRecordings(t *testing.T) {
	t.Parallel() // beside the other lab tests (parallel_test.go)
	var versions []string
	for _, p := range RecordedUpgrades {
		versions = append(versions, p[0], p[1])
	}
	dir := needBinaries(t, versions...)
	start := time.Now()
	t.Cleanup(func() { t.Logf("all pairs recorded in %s", time.Since(start).Round(time.Second)) })
	for _, p := range RecordedUpgrades {
		from, to := p[0], p[1]
		t.Run(minor(from)+"-to-"+minor(to), func(t *testing.T) {
			t.Parallel()
			var log bytes.Buffer
			rec, err := RecordStartup(context.Background(), RecordOptions{BinDir: dir, From: from, To: to,
				Window: 25 * time.Second, Quiet: 8 * time.Second, Dir: t.TempDir(), Log: &log})
			if err != nil {
				t.Fatalf("record: %v\n%s", err, tail(log.String(), 30))
			}
			t.Logf("%s -> %s: %d distinct requests, ready after %s, last new one after %s, recorded %s, %d puts (%d bytes) in etcd",
				from, to, len(rec.Requests), rec.Ready.Round(time.Millisecond), rec.LastNew.Round(time.Millisecond), rec.Recorded.Round(time.Millisecond), rec.EtcdPuts, rec.EtcdBytes)
			if rec.Ready == 0 {
				t.Errorf("%s never became ready\n%s", to, tail(log.String(), 30))
			}
			if len(rec.Requests) == 0 || rec.EtcdPuts == 0 {
				t.Fatalf("nothing recorded (%d requests, %d puts): the webhook was not called", len(rec.Requests), rec.EtcdPuts)
			}
			model, err := audit.ModelledStartupRequests(minor(from), minor(to))
			if err != nil {
				t.Fatal(err)
			}
			for _, problem := range audit.Uncovered(model, rec.Requests) {
				t.Errorf("not in the catalogue for %s -> %s: %s", minor(from), minor(to), problem)
			}
			kept, ok := startupwrites.For(minorNumber(from), minorNumber(to))
			if !ok {
				t.Fatalf("internal/startupwrites holds no recording of %s -> %s: %s", from, to, RecordStartupCommand)
			}
			if kept.From != from || kept.To != to {
				t.Fatalf("internal/startupwrites holds %s -> %s for %s -> %s: %s", kept.From, kept.To, from, to, RecordStartupCommand)
			}
			live, held := fatalWrites(t, model, rec.Requests), fatalWrites(t, model, kept.Writes)
			for w := range live {
				if !held[w] {
					t.Errorf("%s sends %s, which %s does not hold: %s", to, w, kept.FileName(), RecordStartupCommand)
				}
			}
			for w := range held {
				if !live[w] {
					t.Errorf("%s holds %s, which %s no longer sends: %s", kept.FileName(), w, to, RecordStartupCommand)
				}
			}
		})
	}
}

// fatalWrites are the writes whose refusal stops start-up, by request
// (operation, resource, namespace and name).
func fatalWrites(t *testing.T, model []audit.StartupRequest, ws []audit.ObservedRequest) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, w := range ws {
		for _, m := range model {
			if m.Operation == w.Operation && m.Group == w.Group && m.Resource == w.Resource && m.Subresource == w.SubResource && m.Fatal {
				out[w.String()] = true
			}
		}
	}
	return out
}

// minorNumber is 34 of "v1.34.4".
func minorNumber(v string) int {
	m, err := minorOf(":" + v)
	if err != nil {
		panic(err)
	}
	return m
}

func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
