package runbooks

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/closest"
)

// The file format, as yaml.v3 types. Load walks the parsed yaml.Node tree by
// hand (for messages with the exact line of each problem) and then decodes
// the same bytes into these types with KnownFields(true) as a backstop. The
// walker takes its lists of known keys from these tags, so there is one
// definition of the format.
type fileRunbook struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Metadata   fileMetadata `yaml:"metadata"`
	Spec       fileSpec     `yaml:"spec"`
}

type fileMetadata struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

type fileSpec struct {
	Steps []fileStep `yaml:"steps"`
}

type fileStep struct {
	Name        string    `yaml:"name"`
	Action      string    `yaml:"action"`
	Description string    `yaml:"description"`
	Confirm     *bool     `yaml:"confirm"`
	Optional    bool      `yaml:"optional"`
	With        yaml.Node `yaml:"with"`
}

var (
	runbookKeys  = keysOf(fileRunbook{})
	metadataKeys = keysOf(fileMetadata{})
	specKeys     = keysOf(fileSpec{})
	stepKeys     = keysOf(fileStep{})
)

func keysOf(v any) []string {
	t := reflect.TypeOf(v)
	out := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		out = append(out, yamlName(t.Field(i)))
	}
	return out
}

type loader struct{ source string }

func (l *loader) errAt(n *yaml.Node, format string, args ...any) *LoadError {
	e := &LoadError{Source: l.source, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

func (e *LoadError) hint(h ...string) *LoadError {
	for _, s := range h {
		if s != "" {
			e.hints = append(e.hints, s)
		}
	}
	return e
}

var exampleHint = "breakglass runbook show webhook-deadlock shows a valid runbook"

func (l *loader) load(data []byte) (*Runbook, error) {
	if len(data) > maxFileSize {
		return nil, &LoadError{Source: l.source, Msg: fmt.Sprintf("larger than %d bytes: not a runbook", maxFileSize)}
	}
	root, err := l.parse(data)
	if err != nil {
		return nil, err
	}
	if err := l.noAliases(root); err != nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		// Only the kind of thing found, never its text: a file given by
		// mistake may hold a secret.
		return nil, l.errAt(root, "a runbook is a mapping with apiVersion, kind, metadata and spec, got %s (not shown)", describeKind(root)).hint(exampleHint)
	}
	m, err := l.mapping(root, "the runbook")
	if err != nil {
		return nil, err
	}

	// Identity first: a file that is not a runbook at all (a Kubernetes
	// manifest, a talosconfig) should say so rather than list unknown fields.
	rb := &Runbook{}
	if rb.APIVersion, err = l.identity(m, "apiVersion", APIVersion); err != nil {
		return nil, err
	}
	if rb.Kind, err = l.identity(m, "kind", KindRunbook); err != nil {
		return nil, err
	}
	if err := l.known(m, "the runbook", runbookKeys); err != nil {
		return nil, err
	}
	metaNode := m.vals["metadata"]
	if metaNode == nil || isNull(metaNode) {
		return nil, l.errAt(m.at("metadata", root), "missing metadata: a runbook needs metadata.name").hint(exampleHint)
	}
	if rb.Metadata, err = l.metadata(metaNode); err != nil {
		return nil, err
	}
	specNode := m.vals["spec"]
	if specNode == nil || isNull(specNode) {
		return nil, l.errAt(m.at("spec", root), "missing spec: a runbook needs spec.steps").hint(exampleHint)
	}
	if rb.Spec.Steps, err = l.steps(specNode); err != nil {
		return nil, err
	}
	if err := l.sequence(rb); err != nil {
		return nil, err
	}
	if err := l.backstop(data); err != nil {
		return nil, err
	}
	return rb, nil
}

var yamlLineErr = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parse reads exactly one YAML document. A panic in the parser on hostile
// input becomes an error: a bad file must never take the tool down mid-incident.
func (l *loader) parse(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, &LoadError{Source: l.source, Msg: fmt.Sprintf("cannot parse YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, l.empty()
		}
		return nil, l.yamlError(data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, l.yamlError(data, err)
	default:
		at := &next
		if len(next.Content) > 0 {
			at = next.Content[0]
		}
		return nil, l.errAt(at, "a second YAML document: a file holds exactly one runbook")
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, l.empty()
	}
	return doc.Content[0], nil
}

func (l *loader) empty() error {
	return (&LoadError{Source: l.source, Msg: "empty: no runbook in it"}).hint(exampleHint)
}

func (l *loader) yamlError(data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineErr.FindStringSubmatch(err.Error()); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			return (&LoadError{Source: l.source, Line: problemLine(data, n, m[2]), Msg: "invalid YAML: " + m[2]}).hint(exampleHint)
		}
	}
	return (&LoadError{Source: l.source, Msg: "invalid YAML: " + msg}).hint(exampleHint)
}

// problemLine finds the line a YAML syntax error is on. For parser errors
// yaml.v3 reports the line where the enclosing construct starts (a badly
// indented key on line 10 is reported on line 6); the first prefix of the
// file, cut at a line end, that fails with the same message ends on the line
// to look at. Runbooks are small; large inputs keep yaml's line.
func problemLine(data []byte, reported int, msg string) int {
	if len(data) > 64<<10 {
		return reported
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	end := 0
	for i, line := range lines {
		end += len(line)
		if i+1 < reported {
			continue
		}
		if i+1 > reported+200 {
			break
		}
		var n yaml.Node
		err := parsePrefix(data[:end], &n)
		if err != nil && strings.HasSuffix(err.Error(), ": "+msg) {
			return i + 1
		}
	}
	return reported
}

func parsePrefix(data []byte, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return yaml.Unmarshal(data, n)
}

// noAliases refuses anchors' aliases anywhere: a runbook is short enough to
// write out, and every value then has one line to point at.
func (l *loader) noAliases(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		return l.errAt(n, "YAML aliases (*%s) are not supported in runbooks: write the value out", n.Value)
	}
	for _, c := range n.Content {
		if err := l.noAliases(c); err != nil {
			return err
		}
	}
	return nil
}

// mapping is a YAML mapping's keys, checked for duplicates.
type mapping struct {
	node *yaml.Node
	keys []*yaml.Node
	key  map[string]*yaml.Node
	vals map[string]*yaml.Node
}

// at is the node to blame for key: its key node, or fallback when absent.
func (m *mapping) at(key string, fallback *yaml.Node) *yaml.Node {
	if k := m.key[key]; k != nil {
		return k
	}
	return fallback
}

func (l *loader) mapping(n *yaml.Node, where string) (*mapping, error) {
	if n.Kind != yaml.MappingNode {
		return nil, l.errAt(n, "%s: want a mapping, got %s", where, describe(n))
	}
	m := &mapping{node: n, key: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			if k.ShortTag() == "!!merge" {
				return nil, l.errAt(k, "%s: merge keys (<<) are not supported in runbooks", where)
			}
			return nil, l.errAt(k, "%s: a key must be a string, got %s", where, describe(k))
		}
		if first := m.key[k.Value]; first != nil {
			return nil, l.errAt(k, "%s: %s given twice (first at line %d)", where, k.Value, first.Line)
		}
		m.keys = append(m.keys, k)
		m.key[k.Value] = k
		m.vals[k.Value] = v
	}
	return m, nil
}

// mappingOf reads n as a mapping that may hold only the known keys.
func (l *loader) mappingOf(n *yaml.Node, where string, known []string) (*mapping, error) {
	m, err := l.mapping(n, where)
	if err != nil {
		return nil, err
	}
	return m, l.known(m, where, known)
}

func (l *loader) known(m *mapping, where string, known []string) error {
	for _, k := range m.keys {
		if slices.Contains(known, k.Value) {
			continue
		}
		e := l.errAt(k, "unknown field %q in %s", k.Value, where)
		if s := closest.Typo(k.Value, known); s != "" {
			e.hint("did you mean " + s + "?")
		}
		if len(known) == 0 {
			return e
		}
		return e.hint(fmt.Sprintf("%s takes: %s", where, strings.Join(known, ", ")))
	}
	return nil
}

func (l *loader) identity(m *mapping, key, want string) (string, error) {
	start := "a runbook starts with apiVersion: " + APIVersion + " and kind: " + KindRunbook
	v := m.vals[key]
	if v == nil || isNull(v) {
		return "", l.errAt(m.at(key, m.node), "missing %s (want %s)", key, want).hint(start)
	}
	s, err := l.str(v, key)
	if err != nil {
		return "", err
	}
	if s == want {
		return s, nil
	}
	if key == "apiVersion" && strings.HasPrefix(s, "breakglass.dev/") {
		return "", l.errAt(v, "unsupported apiVersion %q: this breakglass reads %s", s, want).
			hint("a runbook written for another breakglass version may need a newer or older breakglass")
	}
	return "", l.errAt(v, "%s is %q: this is not a breakglass runbook (want %s)", key, s, want).hint(start)
}

func (l *loader) metadata(n *yaml.Node) (Metadata, error) {
	var md Metadata
	m, err := l.mappingOf(n, "metadata", metadataKeys)
	if err != nil {
		return md, err
	}
	nn := m.vals["name"]
	if nn == nil || isNull(nn) {
		return md, l.errAt(m.at("name", n), "missing metadata.name").hint("name the runbook, e.g. name: my-webhook-deadlock")
	}
	if md.Name, err = l.str(nn, "metadata.name"); err != nil {
		return md, err
	}
	if !ValidName(md.Name) {
		return md, l.errAt(nn, "metadata.name %q is not a valid name (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)", md.Name)
	}
	if dn := m.vals["description"]; dn != nil && !isNull(dn) {
		if md.Description, err = l.text(dn, "metadata.description"); err != nil {
			return md, err
		}
	}
	return md, nil
}

func (l *loader) steps(n *yaml.Node) ([]Step, error) {
	m, err := l.mappingOf(n, "spec", specKeys)
	if err != nil {
		return nil, err
	}
	sn := m.vals["steps"]
	if sn == nil || isNull(sn) {
		return nil, l.errAt(m.at("steps", n), "no steps: a runbook needs at least one step").hint(exampleHint)
	}
	if sn.Kind != yaml.SequenceNode {
		return nil, l.errAt(sn, "spec.steps: want a list of steps, got %s", describe(sn))
	}
	if len(sn.Content) == 0 {
		return nil, l.errAt(sn, "spec.steps is empty: a runbook needs at least one step").hint(exampleHint)
	}
	steps := make([]Step, 0, len(sn.Content))
	first := map[string]int{}
	for i, item := range sn.Content {
		s, nameNode, err := l.step(item, i)
		if err != nil {
			return nil, err
		}
		if line, dup := first[s.Name]; dup {
			return nil, l.errAt(nameNode, "duplicate step name %q (first at line %d)", s.Name, line).
				hint("step names must be unique within a runbook: rename one of them")
		}
		first[s.Name] = nameNode.Line
		steps = append(steps, s)
	}
	return steps, nil
}

func (l *loader) step(n *yaml.Node, i int) (Step, *yaml.Node, error) {
	s := Step{Line: n.Line}
	where := fmt.Sprintf("step %d", i+1)
	m, err := l.mapping(n, where)
	if err != nil {
		return s, nil, err
	}
	nn := m.vals["name"]
	if nn == nil || isNull(nn) {
		return s, nil, l.errAt(m.at("name", n), "%s: missing name", where).hint("give every step a name, e.g. name: disable")
	}
	if s.Name, err = l.str(nn, where+": name"); err != nil {
		return s, nil, err
	}
	if !ValidName(s.Name) {
		return s, nil, l.errAt(nn, "%s: name %q is not a valid step name (lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit)", where, s.Name)
	}
	where = fmt.Sprintf("step %q", s.Name)
	if err := l.known(m, where, stepKeys); err != nil {
		return s, nil, err
	}

	an := m.vals["action"]
	if an == nil || isNull(an) {
		return s, nil, l.errAt(m.at("action", n), "%s: missing action", where).hint("actions: " + strings.Join(actionNames(), ", "))
	}
	name, err := l.str(an, where+": action")
	if err != nil {
		return s, nil, err
	}
	a := lookupAction(Action(name))
	if a == nil {
		e := l.errAt(an, "%s: unknown action %q", where, name)
		if c := closest.Typo(name, actionNames()); c != "" {
			e.hint("did you mean " + c + "?")
		}
		return s, nil, e.hint("actions: " + strings.Join(actionNames(), ", "))
	}
	s.Action = a.Name

	if dn := m.vals["description"]; dn != nil && !isNull(dn) {
		if s.Description, err = l.text(dn, where+": description"); err != nil {
			return s, nil, err
		}
	}
	s.Confirm = a.ChangesCluster
	if cn := m.vals["confirm"]; cn != nil && !isNull(cn) {
		if s.Confirm, err = l.boolean(cn, where+": confirm"); err != nil {
			return s, nil, err
		}
		if !s.Confirm && a.ChangesCluster {
			return s, nil, l.errAt(cn, "%s: confirm: false is not allowed: %s changes the cluster, and breakglass always asks before that", where, a.Name).
				hint("remove confirm; for unattended runs pass --yes on the command line")
		}
	}
	if on := m.vals["optional"]; on != nil && !isNull(on) {
		if s.Optional, err = l.boolean(on, where+": optional"); err != nil {
			return s, nil, err
		}
	}

	s.Params = a.newParams()
	wn := m.vals["with"]
	if wn != nil && len(a.params) == 0 {
		return s, nil, l.errAt(m.key["with"], "%s: action %s takes no parameters: remove with", where, a.Name)
	}
	var wm *mapping
	if wn != nil && !isNull(wn) {
		if wm, err = l.params(wn, a, s.Params, where); err != nil {
			return s, nil, err
		}
	}
	if fe := s.Params.check(); len(fe) > 0 {
		at := n
		if wn != nil {
			at = m.key["with"]
		}
		if wm != nil {
			if v := wm.vals[fe[0].field]; v != nil {
				at = v
				if fe[0].index >= 0 && v.Kind == yaml.SequenceNode && fe[0].index < len(v.Content) {
					at = v.Content[fe[0].index]
				}
			}
		}
		return s, nil, l.errAt(at, "%s: %s: %s", where, fe[0].field, fe[0].msg).hint(fe[0].hint)
	}
	return s, nn, nil
}

// params decodes a step's `with` into the action's parameter struct: keys
// checked against its yaml tags, each value's YAML type checked against the
// field's, then decoded by yaml.v3. Absent or null values keep their default.
func (l *loader) params(n *yaml.Node, a *ActionInfo, p Params, where string) (*mapping, error) {
	m, err := l.mapping(n, where+": with")
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(p).Elem()
	var names []string
	for i := 0; i < v.NumField(); i++ {
		names = append(names, yamlName(v.Type().Field(i)))
	}
	if err := l.known(m, fmt.Sprintf("the with of %s (action %s)", where, a.Name), names); err != nil {
		return nil, err
	}
	for _, k := range m.keys {
		vn := m.vals[k.Value]
		if isNull(vn) {
			continue
		}
		f := fieldByTag(v, k.Value)
		what := where + ": " + k.Value
		switch f.Addr().Interface().(type) {
		case *Duration:
			if err := vn.Decode(f.Addr().Interface()); err != nil {
				return nil, l.errAt(vn, "%s: %v", what, err).hint("durations have a unit: 90s, 5m, 1h30m")
			}
			continue
		}
		switch f.Kind() {
		case reflect.String:
			s, err := l.str(vn, what)
			if err != nil {
				return nil, err
			}
			f.SetString(s)
		case reflect.Int:
			x, err := l.integer(vn, what)
			if err != nil {
				return nil, err
			}
			f.SetInt(int64(x))
		case reflect.Bool:
			b, err := l.boolean(vn, what)
			if err != nil {
				return nil, err
			}
			f.SetBool(b)
		case reflect.Slice:
			if vn.Kind != yaml.SequenceNode {
				e := l.errAt(vn, "%s: want a list of strings, got %s", what, describe(vn))
				if vn.Kind == yaml.ScalarNode {
					e.hint(fmt.Sprintf("a list, even of one: %s: [%s]", k.Value, vn.Value))
				}
				return nil, e
			}
			list := make([]string, 0, len(vn.Content))
			for j, item := range vn.Content {
				s, err := l.str(item, fmt.Sprintf("%s[%d]", what, j))
				if err != nil {
					return nil, err
				}
				list = append(list, s)
			}
			f.Set(reflect.ValueOf(list))
		default:
			return nil, l.errAt(vn, "%s: cannot decode a %s", what, f.Type())
		}
	}
	return m, nil
}

// sequence checks the runbook as a whole.
func (l *loader) sequence(rb *Runbook) error {
	steps := rb.Spec.Steps
	for i, s := range steps {
		p, ok := s.Params.(*AdmissionDisableParams)
		if !ok || p.RevertAfter != 0 {
			continue
		}
		restored := slices.ContainsFunc(steps[i+1:], func(t Step) bool { return t.Action == ActionAdmissionRestore })
		if !restored {
			return (&LoadError{Source: l.source, Line: s.Line,
				Msg: fmt.Sprintf("step %q disables %s but no admission.restore step follows: the plugins would stay off", s.Name, strings.Join(p.Plugins, ", "))}).
				hint("add a step with action: admission.restore after it, or set revertAfter so the nodes revert by themselves")
		}
	}
	return nil
}

// backstop decodes data with yaml.v3's own strict mode. The walker above is
// stricter and should have refused anything this refuses; this guards
// against the two drifting apart.
func (l *loader) backstop(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f fileRunbook
	if err := dec.Decode(&f); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			return l.yamlError(data, errors.New("yaml: "+te.Errors[0]))
		}
		return l.yamlError(data, err)
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func (l *loader) str(n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		e := l.errAt(n, "%s: want a string, got %s", what, describe(n))
		if n.Kind == yaml.ScalarNode && !isNull(n) {
			e.hint(fmt.Sprintf("quote it to mean the string: %q", n.Value))
		}
		return "", e
	}
	var s string
	if err := n.Decode(&s); err != nil {
		return "", l.errAt(n, "%s: %v", what, err)
	}
	return s, nil
}

func (l *loader) boolean(n *yaml.Node, what string) (bool, error) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		return false, l.errAt(n, "%s: want true or false, got %s", what, describe(n))
	}
	if err := n.Decode(&b); err != nil {
		return false, l.errAt(n, "%s: want true or false, got %s", what, describe(n))
	}
	return b, nil
}

func (l *loader) integer(n *yaml.Node, what string) (int, error) {
	var x int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, l.errAt(n, "%s: want an integer, got %s", what, describe(n))
	}
	if err := n.Decode(&x); err != nil {
		return 0, l.errAt(n, "%s: %s is out of range", what, n.Value)
	}
	return x, nil
}

// text reads a description: a string printed to a terminal, so it may not
// carry control characters or bidirectional overrides that would make the
// screen say something other than the file.
func (l *loader) text(n *yaml.Node, what string) (string, error) {
	s, err := l.str(n, what)
	if err != nil {
		return "", err
	}
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > maxDescription {
		return "", l.errAt(n, "%s: longer than %d characters", what, maxDescription)
	}
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\n' && r != '\t') || unicode.Is(unicode.Bidi_Control, r) {
			return "", l.errAt(n, "%s: contains the control character %U", what, r)
		}
	}
	return s, nil
}

// describeKind says what kind of value n is, without its text.
func describeKind(n *yaml.Node) string {
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return describe(n)
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing (null)"
	case "!!str":
		return fmt.Sprintf("the string %q", v)
	case "!!int":
		return "the integer " + v
	case "!!float":
		return "the number " + v
	case "!!bool":
		return "the boolean " + v
	}
	return fmt.Sprintf("%s %q", n.ShortTag(), v)
}
