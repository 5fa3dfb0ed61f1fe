package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/jsonpath"
	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// replayObject is one object the replay installs, as JSON-ready data.
type replayObject struct {
	APIVersion, Kind, Namespace, Name string
	Source                            string // file, for messages
	Data                              map[string]any
}

func (o replayObject) key() string { return o.Kind + "/" + o.Namespace + "/" + o.Name }

// installOrder ranks kinds so that nothing installed is refused by what
// was installed before it: namespaces and param kinds first, then the
// params, then policies and their bindings, the webhook configurations last
// (admission objects themselves are never sent to webhooks or policies).
var installOrder = map[string]int{
	"Namespace":                          0,
	"CustomResourceDefinition":           1,
	"ConfigMap":                          2,
	"Secret":                             2,
	"ValidatingAdmissionPolicy":          4,
	"MutatingAdmissionPolicy":            4,
	"ValidatingAdmissionPolicyBinding":   5,
	"MutatingAdmissionPolicyBinding":     5,
	kinds.ValidatingWebhookConfiguration: 6,
	kinds.MutatingWebhookConfiguration:   6,
}

const rankCustomResource = 3

// parseReplayObjects reads the sources' documents (Lists unrolled) and
// keeps what the replay installs: admission objects, and the namespaces,
// ConfigMaps, Secrets, CRDs and custom resources their params may be.
// Anything else (a whole rendered chart may be fed in) is left out.
func parseReplayObjects(sources []ReplaySource) ([]replayObject, error) {
	var out []replayObject
	crdKinds := map[string]bool{} // group/Kind defined by a CRD of the input
	for _, src := range sources {
		dec := yaml.NewDecoder(bytes.NewReader(src.Data))
		for doc := 1; ; doc++ {
			var v map[string]any
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, failure.Input("pass Kubernetes manifests (YAML or JSON documents)", "%s: document %d: %v", src.Name, doc, err)
			}
			items := []map[string]any{v}
			if k, _ := v["kind"].(string); k == "List" || strings.HasSuffix(k, "List") {
				items = nil
				list, _ := v["items"].([]any)
				for _, it := range list {
					if m, ok := it.(map[string]any); ok {
						items = append(items, m)
					}
				}
			}
			for _, it := range items {
				o, err := newReplayObject(src.Name, doc, it)
				if err != nil {
					return nil, err
				}
				if o.Kind == "CustomResourceDefinition" {
					group, _ := jsonpath.Get(o.Data, "spec", "group").(string)
					kind, _ := jsonpath.Get(o.Data, "spec", "names", "kind").(string)
					crdKinds[group+"/"+kind] = true
				}
				out = append(out, o)
			}
		}
	}
	kept := out[:0]
	for _, o := range out {
		group, _, _ := strings.Cut(o.APIVersion, "/")
		if !strings.Contains(o.APIVersion, "/") {
			group = ""
		}
		if _, ok := installOrder[o.Kind]; ok || crdKinds[group+"/"+o.Kind] {
			kept = append(kept, o)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return rank(kept[i]) < rank(kept[j]) })
	return kept, nil
}

func rank(o replayObject) int {
	if r, ok := installOrder[o.Kind]; ok {
		return r
	}
	return rankCustomResource
}

func newReplayObject(source string, doc int, m map[string]any) (replayObject, error) {
	o := replayObject{Source: source, Data: m}
	o.APIVersion, _ = m["apiVersion"].(string)
	o.Kind, _ = m["kind"].(string)
	o.Name, _ = jsonpath.Get(m, "metadata", "name").(string)
	o.Namespace, _ = jsonpath.Get(m, "metadata", "namespace").(string)
	if o.APIVersion == "" || o.Kind == "" || o.Name == "" {
		return o, failure.Input("every object needs apiVersion, kind and metadata.name", "%s: document %d: an object without apiVersion, kind or metadata.name", source, doc)
	}
	// What the API server sets itself must not be sent back.
	if md, ok := m["metadata"].(map[string]any); ok {
		for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp"} {
			delete(md, f)
		}
	}
	delete(m, "status")
	return o, nil
}

// auditConfigurations parses the sources the way `breakglass audit -f` does.
func auditConfigurations(sources []ReplaySource) ([]audit.Configuration, error) {
	var cfgs []audit.Configuration
	for _, src := range sources {
		parsed, err := audit.ParseNamed(src.Name, src.Data)
		if err != nil {
			return nil, err
		}
		cfgs = append(cfgs, parsed...)
	}
	return cfgs, nil
}

// installReplayObjects creates the objects through kube-apiserver, every
// webhook's clientConfig first rewritten to closedURL: the replay never
// dials what the objects name (a service or a URL elsewhere).
func installReplayObjects(ctx context.Context, kube *KubeClient, objs []replayObject, closedURL string, installed map[string]int) error {
	plurals := map[string]crdResource{}
	for _, o := range objs {
		if o.Kind == kinds.ValidatingWebhookConfiguration || o.Kind == kinds.MutatingWebhookConfiguration {
			pointAtClosedPort(o, closedURL)
		}
		path, err := createPath(o, plurals)
		if err != nil {
			return err
		}
		err = kube.Do(ctx, "POST", path, o.Data, nil)
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Code == 409 && o.Kind == "Namespace" {
			err = nil // default, kube-system: there already
		}
		if err != nil {
			return fmt.Errorf("replay: installing %s %s (from %s): %w", o.Kind, o.Name, o.Source, err)
		}
		installed[o.Kind]++
		if o.Kind == "CustomResourceDefinition" {
			r, err := waitEstablished(ctx, kube, o)
			if err != nil {
				return err
			}
			plurals[r.group+"/"+r.kind] = r
		}
	}
	return nil
}

// pointAtClosedPort rewrites every webhook's clientConfig to a URL on the
// closed loopback port (the caBundle is kept; nothing answers anyway).
func pointAtClosedPort(o replayObject, closedURL string) {
	hooks, _ := o.Data["webhooks"].([]any)
	for _, h := range hooks {
		w, ok := h.(map[string]any)
		if !ok {
			continue
		}
		cc, _ := w["clientConfig"].(map[string]any)
		if cc == nil {
			cc = map[string]any{}
		}
		delete(cc, "service")
		name, _ := w["name"].(string)
		cc["url"] = closedURL + "/" + url.PathEscape(o.Name) + "/" + url.PathEscape(name)
		w["clientConfig"] = cc
	}
}

// crdResource is where the custom resources of an installed CRD live.
type crdResource struct {
	group, version, kind, plural string
	namespaced                   bool
}

// createPath is the collection an object is POSTed to.
func createPath(o replayObject, crds map[string]crdResource) (string, error) {
	prefix := "/apis/" + o.APIVersion
	if !strings.Contains(o.APIVersion, "/") {
		prefix = "/api/" + o.APIVersion
	}
	ns := o.Namespace
	if ns == "" {
		ns = "default"
	}
	switch o.Kind {
	case "Namespace":
		return prefix + "/namespaces", nil
	case "ConfigMap", "Secret":
		return prefix + "/namespaces/" + url.PathEscape(ns) + "/" + strings.ToLower(o.Kind) + "s", nil
	case "CustomResourceDefinition":
		return prefix + "/customresourcedefinitions", nil
	}
	if _, ok := installOrder[o.Kind]; ok {
		// admissionregistration.k8s.io kinds: the regular English plural
		// of the lower-case kind (...policy -> ...policies)
		plural := strings.ToLower(o.Kind)
		if p, ok := strings.CutSuffix(plural, "y"); ok {
			plural = p + "ies"
		} else {
			plural += "s"
		}
		return prefix + "/" + plural, nil
	}
	group, _, _ := strings.Cut(o.APIVersion, "/")
	r, ok := crds[group+"/"+o.Kind]
	if !ok {
		return "", failure.Input("put the CustomResourceDefinition before its objects, in the same input", "%s %s (from %s): no CustomResourceDefinition for its kind was installed", o.Kind, o.Name, o.Source)
	}
	if r.namespaced {
		return prefix + "/namespaces/" + url.PathEscape(ns) + "/" + r.plural, nil
	}
	return prefix + "/" + r.plural, nil
}

// waitEstablished waits until kube-apiserver serves the CRD's resource.
func waitEstablished(ctx context.Context, kube *KubeClient, o replayObject) (crdResource, error) {
	r := crdResource{kind: fmt.Sprint(jsonpath.Get(o.Data, "spec", "names", "kind")), plural: fmt.Sprint(jsonpath.Get(o.Data, "spec", "names", "plural")),
		group: fmt.Sprint(jsonpath.Get(o.Data, "spec", "group")), namespaced: jsonpath.Get(o.Data, "spec", "scope") == "Namespaced"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var crd struct {
			Status struct {
				Conditions []struct{ Type, Status string } `json:"conditions"`
			} `json:"status"`
		}
		if err := kube.Do(ctx, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+url.PathEscape(o.Name), nil, &crd); err == nil {
			for _, c := range crd.Status.Conditions {
				if c.Type == "Established" && c.Status == "True" {
					return r, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("replay: CustomResourceDefinition %s not established within 30s", o.Name)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// webhookOwners maps each webhook's name to its configuration.
func webhookOwners(objs []replayObject) map[string]Refusal {
	out := map[string]Refusal{}
	for _, o := range objs {
		hooks, _ := o.Data["webhooks"].([]any)
		for _, h := range hooks {
			w, _ := h.(map[string]any)
			name, _ := w["name"].(string)
			if _, seen := out[name]; !seen && name != "" {
				out[name] = Refusal{Kind: o.Kind, Configuration: o.Name, Webhook: name}
			}
		}
	}
	return out
}

// applyAuditFix is the input with the fix `breakglass audit --fix` prints
// applied: each object the fix rewrites replaced by its fixed form.
func applyAuditFix(ctx context.Context, objs []replayObject, cfgs []audit.Configuration, opts ReplayOptions) ([]replayObject, []audit.Configuration, error) {
	plan, err := audit.PlanFixContext(ctx, cfgs, audit.FixStyle{Exclusion: opts.FixStyle, Format: audit.FormatManifest, Audit: auditOptions(opts)})
	if err != nil {
		return nil, nil, err
	}
	manifest, err := plan.Render()
	if err != nil {
		return nil, nil, err
	}
	fixed, err := parseReplayObjects([]ReplaySource{{Name: "the fix", Data: manifest}})
	if err != nil {
		return nil, nil, err
	}
	byKey := map[string]replayObject{}
	for _, o := range fixed {
		byKey[o.key()] = o
	}
	out := make([]replayObject, len(objs))
	for i, o := range objs {
		if f, ok := byKey[o.key()]; ok {
			o = f
		} else {
			o = deepCopyObject(o)
		}
		out[i] = o
	}
	return out, plan.Patched(), nil
}

// deepCopyObject copies an object's data, so that a run's rewrites do not
// reach the next run.
func deepCopyObject(o replayObject) replayObject {
	b, _ := json.Marshal(o.Data)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	o.Data = m
	return o
}
