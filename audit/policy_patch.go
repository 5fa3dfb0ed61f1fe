package audit

import (
	"fmt"
	"reflect"
	"strings"
)

// The model knows an object's apiVersion, kind, name, namespace, labels and
// annotations (StartupRequest.object); a patch anywhere else is undecided.
var knownMetadata = map[string]bool{"name": true, "namespace": true, "labels": true, "annotations": true}

func knownPath(tokens []string) bool {
	switch {
	case len(tokens) == 1:
		return tokens[0] == "apiVersion" || tokens[0] == "kind"
	case len(tokens) >= 2 && tokens[0] == "metadata":
		return knownMetadata[tokens[1]]
	}
	return false
}

// pointer splits an RFC 6901 JSON pointer.
func pointer(p string) ([]string, bool) {
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(s)
	}
	return parts, true
}

// applyJSONPatch applies the patch operations a JSONPatch expression
// produced (RFC 6902, as k8s.io/apiserver's mutating policies do with
// gopkg.in/evanphx/json-patch) to the modelled object. err is the failure
// Kubernetes would hit; undecided says why it cannot be told.
func applyPolicyPatch(obj map[string]interface{}, v interface{}, r StartupRequest) (map[string]interface{}, error, string) {
	ops, ok := v.([]interface{})
	if !ok {
		return nil, nil, "the expression does not produce a list of JSONPatch"
	}
	doc := copyJSON(obj).(map[string]interface{})
	for _, o := range ops {
		op, ok := o.(map[string]interface{})
		if !ok {
			return nil, nil, "the expression does not produce a list of JSONPatch"
		}
		kind, _ := op["op"].(string)
		path, _ := op["path"].(string)
		tokens, ok := pointer(path)
		if !ok {
			return nil, fmt.Errorf("%s operation: invalid path %q", kind, path), ""
		}
		if !knownPath(tokens) {
			return nil, nil, fmt.Sprintf("%s %s touches fields of %s the audit does not model", kind, path, r.Kind)
		}
		missing := func(p string) error {
			return fmt.Errorf("%s operation does not apply: doc is missing path: %q", kind, p)
		}
		switch kind {
		case "add":
			parent, ok := lookup(doc, tokens[:len(tokens)-1])
			m, isMap := parent.(map[string]interface{})
			if !ok || !isMap {
				return nil, missing(path), ""
			}
			m[tokens[len(tokens)-1]] = copyJSON(op["value"])
		case "remove", "replace", "test":
			parent, _ := lookup(doc, tokens[:len(tokens)-1])
			m, isMap := parent.(map[string]interface{})
			cur, exists := m[tokens[len(tokens)-1]]
			if !isMap || !exists {
				return nil, missing(path), ""
			}
			switch kind {
			case "remove":
				delete(m, tokens[len(tokens)-1])
			case "replace":
				m[tokens[len(tokens)-1]] = copyJSON(op["value"])
			case "test":
				if !reflect.DeepEqual(cur, op["value"]) {
					return nil, fmt.Errorf("test operation for path %q failed, expected %v, got %v", path, op["value"], cur), ""
				}
			}
		default: // copy, move: rare in policies
			return nil, nil, kind + " operations are not modelled"
		}
	}
	return doc, nil, ""
}

// applyConfiguration merges what an ApplyConfiguration expression built:
// a merge creates missing maps, so labels and annotations always apply;
// anything else depends on the schema, which the model does not know.
func applyConfiguration(obj map[string]interface{}, v interface{}) (map[string]interface{}, string) {
	cfg, ok := v.(map[string]interface{})
	if !ok {
		return nil, "the expression does not produce an Object"
	}
	doc := copyJSON(obj).(map[string]interface{})
	for k, val := range cfg {
		md, isMap := val.(map[string]interface{})
		if k != "metadata" || !isMap {
			return nil, "it sets " + k + ", which the audit does not model"
		}
		for mk, mv := range md {
			entries, ok := mv.(map[string]interface{})
			if !ok || (mk != "labels" && mk != "annotations") {
				return nil, "it sets metadata." + mk + ", which the audit does not model"
			}
			meta := doc["metadata"].(map[string]interface{})
			dst, _ := meta[mk].(map[string]interface{})
			if dst == nil {
				dst = map[string]interface{}{}
				meta[mk] = dst
			}
			for ek, ev := range entries {
				if _, isString := ev.(string); !isString {
					return nil, "it sets metadata." + mk + "." + ek + " to a value that is not a string"
				}
				dst[ek] = ev
			}
		}
	}
	return doc, ""
}

func lookup(doc interface{}, tokens []string) (interface{}, bool) {
	cur := doc
	for _, t := range tokens {
		m, ok := cur.(map[string]interface{})
		if !ok {
			return nil, false
		}
		if cur, ok = m[t]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func copyJSON(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(x))
		for k, e := range x {
			out[k] = copyJSON(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, e := range x {
			out[i] = copyJSON(e)
		}
		return out
	}
	return v
}
