package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/webhooks"
)

// Kind tells validating from mutating webhooks.
type Kind string

const (
	Validating Kind = kinds.Validating
	Mutating   Kind = kinds.Mutating
)

const (
	admissionGroupVersion = "admissionregistration.k8s.io/v1"
	kindValidating        = kinds.ValidatingWebhookConfiguration
	kindMutating          = kinds.MutatingWebhookConfiguration
)

// Configuration is one admission object: a webhook configuration
// (Validating or Mutating is set), or an admission policy, a policy
// binding or a param object a binding may name (Policy is set).
type Configuration struct {
	Kind       Kind
	Validating *admissionregistrationv1.ValidatingWebhookConfiguration
	Mutating   *admissionregistrationv1.MutatingWebhookConfiguration
	Policy     *Policy

	// Where it came from, so that Fix can patch the same documents.
	src  *source
	doc  int // index of the YAML document in src
	item int // index in the List's items, -1 when the document is the object
}

// Name is the configuration's metadata.name.
func (c Configuration) Name() string {
	switch {
	case c.Validating != nil:
		return c.Validating.Name
	case c.Mutating != nil:
		return c.Mutating.Name
	case c.Policy != nil:
		return c.Policy.Name
	}
	return ""
}

// TypeName is the Kubernetes kind of the configuration.
func (c Configuration) TypeName() string {
	if c.Policy != nil {
		return c.Policy.Kind
	}
	if c.Kind == Mutating {
		return kindMutating
	}
	return kindValidating
}

func (c Configuration) webhooks() []*webhook {
	var out []*webhook
	switch {
	case c.Validating != nil:
		for i, w := range c.Validating.Webhooks {
			out = append(out, newWebhook(c.Name(), Validating, i, webhooks.FromValidating(w)))
		}
	case c.Mutating != nil:
		for i, w := range c.Mutating.Webhooks {
			out = append(out, newWebhook(c.Name(), Mutating, i, webhooks.FromMutating(w)))
		}
	}
	return out
}

// source holds the parsed YAML documents of one input, for Fix.
type source struct {
	name string
	docs []*yaml.Node
	json bool // the input was JSON: Fix writes it back as block YAML
}

// ParseWebhookConfigurations reads webhook configurations from YAML or JSON:
// one or many documents, each a ValidatingWebhookConfiguration, a
// MutatingWebhookConfiguration (admissionregistration.k8s.io/v1) or a List
// of them (kind List or *List). Other kinds are skipped, so a whole rendered
// chart can be fed in. Webhook configurations are decoded strictly.
func ParseWebhookConfigurations(data []byte) ([]Configuration, error) {
	return ParseNamed("", data)
}

// ParseNamed is ParseWebhookConfigurations with a source name for errors.
func ParseNamed(name string, data []byte) ([]Configuration, error) {
	src := &source{name: name, json: looksLikeJSON(data)}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []Configuration
	for i := 0; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &ParseError{Source: name, Document: i + 1, Err: err, Syntax: true}
		}
		src.docs = append(src.docs, &n)
		cfgs, err := decodeDocument(src, i, &n)
		if err != nil {
			return nil, &ParseError{Source: name, Document: i + 1, Err: err}
		}
		out = append(out, cfgs...)
	}
	return out, nil
}

func looksLikeJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

type typeMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

func decodeDocument(src *source, doc int, n *yaml.Node) ([]Configuration, error) {
	if n.Kind == 0 || (n.Kind == yaml.DocumentNode && len(n.Content) == 0) {
		return nil, nil // empty document (comments only)
	}
	var v interface{}
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cannot convert to JSON: %w", err)
	}
	if _, isArray := v.([]interface{}); isArray {
		// A bare array of objects (jq output): read it like a List.
		raw, err = json.Marshal(map[string]interface{}{"kind": "List", "items": v})
		if err != nil {
			return nil, err
		}
	}
	var tm typeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if tm.Kind == "List" || (len(tm.Kind) > 4 && tm.Kind[len(tm.Kind)-4:] == "List") {
		var out []Configuration
		for i, item := range tm.Items {
			c, ok, err := decodeObject(withListType(item, tm))
			if err != nil {
				return nil, fmt.Errorf("items[%d]: %w", i, err)
			}
			if ok {
				c.src, c.doc, c.item = src, doc, i
				out = append(out, c)
			}
		}
		return out, nil
	}
	c, ok, err := decodeObject(raw)
	if err != nil || !ok {
		return nil, err
	}
	c.src, c.doc, c.item = src, doc, -1
	return []Configuration{c}, nil
}

func decodeObject(raw []byte) (Configuration, bool, error) {
	var tm typeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return Configuration{}, false, err
	}
	if tm.Kind != kindValidating && tm.Kind != kindMutating {
		return decodePolicy(tm, raw)
	}
	if tm.APIVersion != admissionGroupVersion {
		return Configuration{}, false, fmt.Errorf("%s has apiVersion %q: only %s is served by Kubernetes 1.22 and later", tm.Kind, tm.APIVersion, admissionGroupVersion)
	}
	if tm.Kind == kindValidating {
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := sigsyaml.UnmarshalStrict(raw, &v); err != nil {
			return Configuration{}, false, fmt.Errorf("%s: %w", tm.Kind, err)
		}
		return Configuration{Kind: Validating, Validating: &v}, true, nil
	}
	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := sigsyaml.UnmarshalStrict(raw, &m); err != nil {
		return Configuration{}, false, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return Configuration{Kind: Mutating, Mutating: &m}, true, nil
}

// FromObjects wraps already-decoded objects (for example from etcd):
// *ValidatingWebhookConfiguration, *MutatingWebhookConfiguration and their
// List types. Other objects are an error.
func FromObjects(objs ...runtime.Object) ([]Configuration, error) {
	var out []Configuration
	add := func(c Configuration) {
		c.item = -1
		out = append(out, c)
	}
	for i, o := range objs {
		switch v := o.(type) {
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			add(Configuration{Kind: Validating, Validating: v.DeepCopy()})
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			add(Configuration{Kind: Mutating, Mutating: v.DeepCopy()})
		case *admissionregistrationv1.ValidatingWebhookConfigurationList:
			for j := range v.Items {
				add(Configuration{Kind: Validating, Validating: v.Items[j].DeepCopy()})
			}
		case *admissionregistrationv1.MutatingWebhookConfigurationList:
			for j := range v.Items {
				add(Configuration{Kind: Mutating, Mutating: v.Items[j].DeepCopy()})
			}
		default:
			c, ok, err := policyFromObject(o)
			if err != nil || !ok {
				return nil, fmt.Errorf("audit: object %d is %T, not a webhook configuration or admission policy: %w", i+1, o, ErrInvalidInput)
			}
			out = append(out, c)
		}
	}
	return out, nil
}
