package audit

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/startupwrites"
)

// ObservedRequest is one admission request recorded from a real
// kube-apiserver (internal/startupwrites, testdata/observed,
// lab.RecordStartup).
type ObservedRequest = startupwrites.Write

// modelFor finds the modelled requests of the same class as an observed one.
func modelFor(reqs []StartupRequest, o ObservedRequest) []StartupRequest {
	var out []StartupRequest
	for _, r := range reqs {
		if r.Operation == o.Operation && r.Group == o.Group && r.Version == o.Version && r.Resource == o.Resource &&
			r.Subresource == o.SubResource && r.Kind == o.Kind && (r.Namespace == "") == (o.Namespace == "") {
			out = append(out, r)
		}
	}
	return out
}

// Uncovered lists, one sentence each, the observed requests the model does
// not cover: same identity, operation, resource, scope, namespace, options,
// field manager and label keys (RBAC roles may carry one aggregation label
// more). Empty when the model covers them all.
func Uncovered(model []StartupRequest, observed []ObservedRequest) []string {
	var out []string
	for _, o := range observed {
		what := o.String()
		if o.Username != APIServerUser || !reflect.DeepEqual(o.Groups, APIServerGroups) || len(o.Extra) != 0 {
			out = append(out, fmt.Sprintf("%s: sent as %s %v %v", what, o.Username, o.Groups, o.Extra))
		}
		ms := modelFor(model, o)
		if len(ms) == 0 {
			out = append(out, what+": not modelled")
			continue
		}
		wantOpts := map[string]string{"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[o.Operation]
		if o.Options != wantOpts {
			out = append(out, fmt.Sprintf("%s: options %s", what, o.Options))
		}
		nsOK, fmOK, labelsOK := false, false, false
		for _, m := range ms {
			if m.Namespace == o.Namespace {
				nsOK = true
			}
			if m.fieldManager == o.FieldManager {
				fmOK = true
			}
			onlyAggregation := true
			for k := range o.Labels {
				if _, ok := m.labels[k]; !ok && !strings.HasPrefix(k, "rbac.authorization.k8s.io/aggregate-to-") {
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
			out = append(out, fmt.Sprintf("%s: no modelled request in namespace %q", what, o.Namespace))
		}
		if !fmOK {
			out = append(out, fmt.Sprintf("%s: field manager %q not modelled", what, o.FieldManager))
		}
		if !labelsOK {
			out = append(out, fmt.Sprintf("%s: labels %v not modelled (model: %v)", what, sortedKeys(o.Labels), sortedKeys(ms[0].labels)))
		}
		if o.Resource == "namespaces" && o.Namespace != o.Name {
			out = append(out, what+": a Namespace's namespace attribute is its name")
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
