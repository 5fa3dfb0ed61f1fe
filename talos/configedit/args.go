package configedit

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// validatePlugins checks plugin names and drops duplicates, keeping the order.
// Admission plugin names are CamelCase words (ValidatingAdmissionWebhook, NodeRestriction): an upper-case
// letter, then letters and digits. Unknown plugins are allowed when they look like that.
func validatePlugins(plugins []string) ([]string, error) {
	if len(plugins) == 0 {
		return nil, fmt.Errorf("%w: no plugin named", ErrInvalidPlugin)
	}

	out := make([]string, 0, len(plugins))

	for _, p := range plugins {
		if !apiserverargs.ValidPluginName(p) {
			return nil, fmt.Errorf("%w: %q (letters and digits, starting with an upper-case letter)", ErrInvalidPlugin, p)
		}

		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}

	return out, nil
}

// argValue is the meaning of one extraArgs key.
type argValue struct {
	present bool
	null    bool // written as null or ~ (Talos reads it as an empty string)
	list    bool
	str     string   // string form, as written (after YAML unquoting)
	items   []string // list form
}

// args is the meaning of the part of the config this package cares about.
type args struct {
	hasAPIServer, hasExtraArgs bool
	disable, enable            argValue
}

func (v argValue) form() Form {
	switch {
	case !v.present:
		return FormAbsent
	case v.list:
		return FormList
	default:
		return FormString
	}
}

// plugins lists the plugin names in the value: comma-separated parts of the string, or of every list item.
func (v argValue) plugins() []string {
	var out []string

	parts := v.items
	if !v.list {
		parts = []string{v.str}
	}

	for _, item := range parts {
		for p := range strings.SplitSeq(item, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}

	return out
}

func (v argValue) pluginList() PluginList {
	return PluginList{Form: v.form(), Plugins: v.plugins()}
}

func (v argValue) equal(o argValue) bool {
	if v.present != o.present || v.list != o.list || v.null != o.null {
		return false
	}

	if v.list {
		return slices.Equal(v.items, o.items)
	}

	return v.str == o.str
}

// sameMeaning is equal up to what Talos cannot tell apart: null and the empty string.
func (v argValue) sameMeaning(o argValue) bool {
	if v.null || o.null {
		return v.present == o.present && !v.list && !o.list && v.str == "" && o.str == ""
	}

	return v.equal(o)
}

// withPlugins adds the plugins not yet in v after the existing ones, keeping the form. A new key is a
// comma-joined string, which every Talos version accepts.
func (v argValue) withPlugins(plugins []string) (argValue, []string) {
	have := v.plugins()

	var added []string

	for _, p := range plugins {
		if !slices.Contains(have, p) {
			added = append(added, p)
		}
	}

	if len(added) == 0 {
		return v, nil
	}

	switch {
	case !v.present:
		return argValue{present: true, str: strings.Join(added, ",")}, added
	case v.list:
		return argValue{present: true, list: true, items: append(slices.Clone(v.items), added...)}, added
	}

	// Follow the way the value is written: "A, B" gets ", C", "A,B" gets ",C".
	sep := ","
	if strings.Contains(v.str, ", ") {
		sep = ", "
	}

	s := strings.TrimRight(v.str, " ")
	if strings.TrimSpace(s) == "" {
		s = strings.Join(added, sep)
	} else {
		s = strings.TrimRight(s, ",") + sep + strings.Join(added, sep)
	}

	return argValue{present: true, str: s}, added
}

// withoutPlugins removes the plugins from v; the key goes when nothing is left.
func (v argValue) withoutPlugins(plugins []string) (argValue, []string) {
	have := v.plugins()

	var removed []string

	for _, p := range plugins {
		if slices.Contains(have, p) {
			removed = append(removed, p)
		}
	}

	if len(removed) == 0 {
		return v, nil
	}

	if !v.list {
		s := dropParts(v.str, removed)
		if s == "" {
			return argValue{}, removed
		}

		return argValue{present: true, str: s}, removed
	}

	var items []string

	for _, item := range v.items {
		if s := dropParts(item, removed); s != "" {
			items = append(items, s)
		} else if strings.TrimSpace(item) == "" {
			items = append(items, item) // an empty item is not ours to remove
		}
	}

	if len(items) == 0 {
		return argValue{}, removed
	}

	return argValue{present: true, list: true, items: items}, removed
}

// dropParts removes the named plugins from a comma-joined string, keeping the other parts as written.
// An item that is exactly a plugin name stays untouched when it is not removed.
func dropParts(s string, removed []string) string {
	parts := strings.Split(s, ",")
	kept := parts[:0:0]
	changed := false

	for _, p := range parts {
		if slices.Contains(removed, strings.TrimSpace(p)) {
			changed = true

			continue
		}

		kept = append(kept, p)
	}

	if !changed {
		return s
	}

	out := strings.TrimSpace(strings.Join(kept, ","))
	if strings.Trim(out, ", ") == "" {
		return ""
	}

	return out
}

// decodeDocs parses every YAML document in config.
func decodeDocs(config []byte) (_ []*yaml.Node, err error) {
	// yaml.v3 has panicked on malformed input before; the machinery loader guards against it too.
	defer recoverYAML(&err)

	dec := yaml.NewDecoder(strings.NewReader(string(config)))

	var docs []*yaml.Node

	for {
		var n yaml.Node

		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}

		if err != nil {
			return nil, fmt.Errorf("parse machine config: %w", err)
		}

		docs = append(docs, &n)
	}
}

// v1alpha1Doc returns the root mapping of the v1alpha1 document: a document without kind that has a
// cluster or machine section or says version: v1alpha1.
func v1alpha1Doc(docs []*yaml.Node) (int, *yaml.Node, error) {
	idx := -1

	for i, d := range docs {
		if d.Kind != yaml.DocumentNode || len(d.Content) != 1 || d.Content[0].Kind != yaml.MappingNode {
			continue
		}

		m := d.Content[0]
		if _, k := yamlnode.Get(m, "kind"); k != nil {
			continue
		}

		_, cluster := yamlnode.Get(m, "cluster")
		_, machine := yamlnode.Get(m, "machine")
		_, version := yamlnode.Get(m, "version")

		if cluster == nil && machine == nil && (version == nil || version.Value != "v1alpha1") {
			continue
		}

		if idx >= 0 {
			return 0, nil, fmt.Errorf("config has two v1alpha1 documents")
		}

		idx = i
	}

	if idx < 0 {
		return 0, nil, ErrNoClusterConfig
	}

	return idx, docs[idx].Content[0], nil
}

// readArgs reads the meaning of the two keys, resolving anchors and aliases as a loader would.
func readArgs(config []byte) (args, error) {
	doc, err := v1alpha1Map(config)
	if err != nil {
		return args{}, err
	}

	return argsOf(doc)
}

// v1alpha1Root is the root mapping of config's v1alpha1 document.
func v1alpha1Root(config []byte) (*yaml.Node, error) {
	docs, err := decodeDocs(config)
	if err != nil {
		return nil, err
	}

	_, root, err := v1alpha1Doc(docs)

	return root, err
}

// v1alpha1Map is config's v1alpha1 document decoded, anchors and aliases resolved as a loader would.
func v1alpha1Map(config []byte) (map[string]any, error) {
	root, err := v1alpha1Root(config)
	if err != nil {
		return nil, err
	}

	var doc map[string]any
	if err := decodeNode(root, &doc); err != nil {
		return nil, fmt.Errorf("decode v1alpha1 document: %w", err)
	}

	return doc, nil
}

// readArg reads the meaning of one extraArgs key.
func readArg(config []byte, key string) (argValue, error) {
	extra, _, _, err := readExtraArgs(config)
	if err != nil || extra == nil {
		return argValue{}, err
	}

	return argValueOf(extra, key)
}

// readExtraArgs reads cluster.apiServer.extraArgs of the v1alpha1 document (nil when there is none),
// and whether apiServer and extraArgs are there at all.
func readExtraArgs(config []byte) (extra map[string]any, hasAPIServer, hasExtraArgs bool, err error) {
	doc, err := v1alpha1Map(config)
	if err != nil {
		return nil, false, false, err
	}

	return extraArgsOf(doc)
}

// extraArgsOf is cluster.apiServer.extraArgs of a decoded v1alpha1 document (nil when there is
// none), and whether apiServer and extraArgs are there at all, each perhaps null.
func extraArgsOf(doc map[string]any) (extra map[string]any, hasAPIServer, hasExtraArgs bool, err error) {
	cluster, ok := doc["cluster"].(map[string]any)
	if !ok {
		return nil, false, false, ErrNoClusterConfig
	}

	apiServerV, ok := cluster["apiServer"]
	if !ok || apiServerV == nil {
		return nil, ok, false, nil
	}

	apiServer, ok := apiServerV.(map[string]any)
	if !ok {
		return nil, true, false, fmt.Errorf("cluster.apiServer is not a mapping")
	}

	extraV, ok := apiServer["extraArgs"]
	if !ok || extraV == nil {
		return nil, true, ok, nil
	}

	if extra, ok = extraV.(map[string]any); !ok {
		return nil, true, true, fmt.Errorf("cluster.apiServer.extraArgs is not a mapping")
	}

	return extra, true, true, nil
}

func argsOf(doc map[string]any) (args, error) {
	var (
		a     args
		extra map[string]any
		err   error
	)

	extra, a.hasAPIServer, a.hasExtraArgs, err = extraArgsOf(doc)
	if err != nil || extra == nil {
		return a, err
	}

	if a.disable, err = argValueOf(extra, KeyDisable); err != nil {
		return a, err
	}

	if a.enable, err = argValueOf(extra, KeyEnable); err != nil {
		return a, err
	}

	return a, nil
}

func argValueOf(extra map[string]any, key string) (argValue, error) {
	raw, ok := extra[key]
	if !ok {
		return argValue{}, nil
	}

	switch v := raw.(type) {
	case nil:
		return argValue{present: true, null: true}, nil
	case string:
		return argValue{present: true, str: v}, nil
	case []any:
		items := make([]string, 0, len(v))

		for _, it := range v {
			s, ok := it.(string)
			if !ok {
				return argValue{}, fmt.Errorf("%w: %s has an item of type %T", ErrBadValue, key, it)
			}

			items = append(items, s)
		}

		return argValue{present: true, list: true, items: items}, nil
	default:
		return argValue{}, fmt.Errorf("%w: %s is a %T", ErrBadValue, key, raw)
	}
}

// mappingIn is parent[key] when it is a mapping; otherwise a new empty one put there when create
// says so, else nil.
func mappingIn(parent map[string]any, key string, create bool) map[string]any {
	m, _ := parent[key].(map[string]any)
	if m == nil && create {
		m = map[string]any{}
		parent[key] = m
	}

	return m
}

// setArg writes the meaning of one key into a decoded document (for checking an edit).
func setArg(doc map[string]any, key string, v argValue) {
	// Removing a key makes no section; setting one makes those it needs.
	apiServer := mappingIn(mappingIn(doc, "cluster", true), "apiServer", v.present)
	if apiServer == nil {
		return
	}

	extra := mappingIn(apiServer, "extraArgs", v.present)
	if extra == nil {
		return
	}

	switch {
	case !v.present:
		delete(extra, key)
	case v.null:
		extra[key] = nil
	case v.list:
		items := make([]any, len(v.items))
		for i, s := range v.items {
			items[i] = s
		}

		extra[key] = items
	default:
		extra[key] = v.str
	}
}

func recoverYAML(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("parse machine config: %v", p)
	}
}

// decodeNode is node.Decode that turns a panic into an error.
func decodeNode(n *yaml.Node, v any) (err error) {
	defer recoverYAML(&err)

	return n.Decode(v)
}

// unmarshal is yaml.Unmarshal that turns a panic into an error.
func unmarshal(b []byte, v any) (err error) {
	defer recoverYAML(&err)

	return yaml.Unmarshal(b, v)
}
