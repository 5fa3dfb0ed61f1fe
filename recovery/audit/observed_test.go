package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// observedRequest is one admission request recorded from a real
// kube-apiserver (see testdata/observed/README.md).
type observedRequest struct {
	Operation    string              `json:"operation"`
	Group        string              `json:"group"`
	Version      string              `json:"version"`
	Resource     string              `json:"resource"`
	SubResource  string              `json:"subResource"`
	Kind         string              `json:"kind"`
	Namespace    string              `json:"namespace"`
	Name         string              `json:"name"`
	Username     string              `json:"username"`
	Groups       []string            `json:"groups"`
	Extra        map[string][]string `json:"extra"`
	Labels       map[string]string   `json:"labels"`
	Options      string              `json:"options"`
	FieldManager string              `json:"fieldManager"`
}

func readObserved(t *testing.T, name string) []observedRequest {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "observed", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []observedRequest
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o observedRequest
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// modelFor finds the modelled requests of the same class as an observed one.
func modelFor(reqs []StartupRequest, o observedRequest) []StartupRequest {
	var out []StartupRequest
	for _, r := range reqs {
		if r.Operation == o.Operation && r.Group == o.Group && r.Version == o.Version && r.Resource == o.Resource &&
			r.Subresource == o.SubResource && r.Kind == o.Kind && (r.Namespace == "") == (o.Namespace == "") {
			out = append(out, r)
		}
	}
	return out
}

// Every admission request a real kube-apiserver sent itself while starting
// is in the model, with the same identity, scope, options and labels.
func TestModelCoversObservedRequests(t *testing.T) {
	reqs, err := StartupRequests("1.34")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"upgrade-1.32.13-to-1.34.4.jsonl", "fresh-1.34.4.jsonl", "restart-1.34.4.jsonl"} {
		obs := readObserved(t, file)
		if len(obs) == 0 {
			t.Fatalf("%s: empty", file)
		}
		for _, o := range obs {
			what := file + ": " + o.Operation + " " + o.Group + "/" + o.Version + " " + o.Resource + "/" + o.SubResource + " " + o.Namespace + "/" + o.Name
			if o.Username != APIServerUser || !reflect.DeepEqual(o.Groups, APIServerGroups) || len(o.Extra) != 0 {
				t.Errorf("%s: sent as %s %v %v", what, o.Username, o.Groups, o.Extra)
			}
			ms := modelFor(reqs, o)
			if len(ms) == 0 {
				t.Errorf("%s: not modelled", what)
				continue
			}
			wantOpts := map[string]string{"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[o.Operation]
			if o.Options != wantOpts {
				t.Errorf("%s: options %s", what, o.Options)
			}
			nsOK, fmOK, labelsOK := false, false, false
			for _, m := range ms {
				if m.Namespace == o.Namespace {
					nsOK = true
				}
				if m.fieldManager == o.FieldManager {
					fmOK = true
				}
				// Same label keys; RBAC roles may carry one aggregation label more.
				extra := map[string]string{}
				for k, v := range o.Labels {
					if _, ok := m.labels[k]; !ok {
						extra[k] = v
					}
				}
				onlyAggregation := true
				for k := range extra {
					if !strings.HasPrefix(k, "rbac.authorization.k8s.io/aggregate-to-") {
						onlyAggregation = false
					}
				}
				missing := false
				for k := range m.labels {
					if _, ok := o.Labels[k]; !ok {
						missing = true
					}
				}
				if !missing && onlyAggregation {
					labelsOK = true
				}
			}
			if !nsOK {
				t.Errorf("%s: no modelled request in namespace %q", what, o.Namespace)
			}
			if !fmOK {
				t.Errorf("%s: field manager %q not modelled", what, o.FieldManager)
			}
			if !labelsOK {
				t.Errorf("%s: labels %v not modelled (model: %v)", what, keys(o.Labels), keys(ms[0].labels))
			}
			if o.Resource == "namespaces" && o.Namespace != o.Name {
				t.Errorf("%s: a Namespace's namespace attribute is its name", what)
			}
		}
	}
}

// The hooks the upgrade's writes feed are the ones the lab saw failing
// (DESIGN.md), plus APF for its deletes; a restart of the same version
// writes nothing fatal.
func TestObservedFatalWrites(t *testing.T) {
	reqs, _ := StartupRequests("1.34")
	hooks := func(file string) map[string]bool {
		h := map[string]bool{}
		for _, o := range readObserved(t, file) {
			for _, m := range modelFor(reqs, o) {
				if m.Fatal {
					h[m.Hook] = true
				}
			}
		}
		return h
	}
	up := hooks("upgrade-1.32.13-to-1.34.4.jsonl")
	for _, h := range []string{hookServiceCIDR, hookIPRepair, hookRBAC, hookAutoreg, hookAPF} {
		if !up[h] {
			t.Errorf("upgrade: no observed write for %s", h)
		}
	}
	if h := hooks("restart-1.34.4.jsonl"); len(h) != 0 {
		t.Errorf("restart: fatal hooks %v", h)
	}
}
