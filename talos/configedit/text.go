package configedit

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

const (
	layoutBlock = "block"
	layoutFlow  = "flow"
)

// text is a parsed config for the text edit: the bytes, where its lines start, and the yaml.v3 nodes of
// the path cluster.apiServer.extraArgs in the v1alpha1 document (nil where a key is missing).
type text struct {
	b     []byte
	lines []int // lines[i] is the offset where line i+1 starts

	clusterKey, cluster *yaml.Node
	apiKey, api         *yaml.Node
	extraKey, extra     *yaml.Node

	// apiNull and extraNull are the values of apiServer and extraArgs when they are null
	// ("apiServer:" with nothing, or ~ or null); api or extra is then nil.
	apiNull, extraNull *yaml.Node
}

// span is where a mapping entry is in the text.
type span struct {
	start, end        int // block: whole lines, end after the last newline; flow: key start to value end
	keyStart, keyEnd  int
	valStart, valEnd  int
	keyLine, lastLine int
	key, val          *yaml.Node
}

// withLF runs a text edit on a config with LF line ends. A config written with CRLF throughout is
// edited as LF and written back with CRLF; one with other carriage returns is refused.
func withLF(config []byte, edit func([]byte) ([]byte, error)) ([]byte, error) {
	crs := bytes.Count(config, []byte("\r"))
	if crs == 0 {
		return edit(config)
	}

	if crs != bytes.Count(config, []byte("\r\n")) || crs != bytes.Count(config, []byte("\n")) {
		return nil, refuse("config mixes line ends")
	}

	out, err := edit(bytes.ReplaceAll(config, []byte("\r\n"), []byte("\n")))
	if err != nil {
		return nil, err
	}

	out = bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n"))

	if err := loaderCheck(config, out); err != nil {
		return nil, err
	}

	return out, nil
}

func parseText(b []byte) (*text, error) {
	if bytes.IndexByte(b, '\r') >= 0 {
		return nil, refuse("config has carriage returns")
	}

	if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
		return nil, refuse("config starts with a byte order mark")
	}

	if !utf8.Valid(b) {
		return nil, refuse("config is not valid UTF-8")
	}

	root, err := v1alpha1Root(b)
	if err != nil {
		return nil, err
	}

	if err := noAnchors(root); err != nil {
		return nil, err
	}

	t := &text{b: b, lines: []int{0}}

	for i, c := range b {
		if c == '\n' {
			t.lines = append(t.lines, i+1)
		}
	}

	t.clusterKey, t.cluster = yamlnode.Get(root, "cluster")
	if t.cluster == nil {
		return nil, ErrNoClusterConfig
	}

	if err := plainPath(t.clusterKey, t.cluster, "cluster"); err != nil {
		return nil, err
	}

	if t.apiKey, t.api, t.apiNull, err = section(t.cluster, "apiServer", "cluster.apiServer"); err != nil {
		return nil, err
	}

	if t.api == nil {
		return t, nil
	}

	if t.extraKey, t.extra, t.extraNull, err = section(t.api, "extraArgs", "cluster.apiServer.extraArgs"); err != nil {
		return nil, err
	}

	if t.extra == nil {
		return t, nil
	}

	for _, n := range t.extra.Content {
		if n.Style&yaml.TaggedStyle != 0 {
			return nil, refuse("cluster.apiServer.extraArgs has a tagged node at line %d", n.Line)
		}
	}

	return t, nil
}

// section is the entry key of the mapping parent (at path): its key, and its value when that is a
// plain mapping, or null when it is null; all nil when the entry is not there.
func section(parent *yaml.Node, key, path string) (k, v, null *yaml.Node, err error) {
	k, v = yamlnode.Get(parent, key)
	if v == nil {
		return k, nil, nil, nil
	}

	if isNull(v) {
		return k, nil, v, nil
	}

	if err := plainPath(k, v, path); err != nil {
		return nil, nil, nil, err
	}

	return k, v, nil, nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Style&yaml.TaggedStyle == 0
}

// fillNull turns the null value of key (an entry of block mapping parent) into a block mapping written
// by r, and returns the text it removed after the colon (" ~", " null", or "" when nothing was written).
func (t *text) fillNull(parent, parentKey, key, val *yaml.Node, r renderer) ([]byte, string, error) {
	if parent.Style&yaml.FlowStyle != 0 {
		// {extraArgs: null} becomes {extraArgs: {...}}; the token is what comes back.
		if val.Value == "" {
			return nil, "", refuse("empty %s in a flow mapping at line %d", key.Value, key.Line)
		}

		if _, _, err := t.flowSpan(parent); err != nil {
			return nil, "", err
		}

		vs, ve, err := t.scalarSpan(val, true)
		if err != nil {
			return nil, "", err
		}

		return splice(t.b, vs, ve, "{"+r(layoutFlow, "", 0)+"}"), string(t.b[vs:ve]), nil
	}

	_, _, colon, err := t.keySpan(key, false)
	if err != nil {
		return nil, "", err
	}

	end := colon + 1

	if val.Value != "" {
		if val.Line != key.Line {
			return nil, "", refuse("null on the line after %s at line %d", key.Value, key.Line)
		}

		if _, end, err = t.scalarSpan(val, false); err != nil {
			return nil, "", err
		}
	}

	if !t.restOfLineOK(end) {
		return nil, "", refuse("unexpected text after %s at line %d", key.Value, key.Line)
	}

	next, err := t.lineNext(key.Line)
	if err != nil {
		return nil, "", err
	}

	step := indentStep(parent, parentKey)
	b := splice(t.b, next, next, r(layoutBlock, strings.Repeat(" ", key.Column-1+step), step))

	return splice(b, colon+1, end, ""), string(t.b[colon+1 : end]), nil
}

// noAnchors refuses anchors and aliases anywhere in the document: an edit could change what an
// alias elsewhere means.
func noAnchors(n *yaml.Node) error {
	if n.Anchor != "" || n.Kind == yaml.AliasNode {
		return refuse("anchor or alias at line %d", n.Line)
	}

	for _, c := range n.Content {
		if err := noAnchors(c); err != nil {
			return err
		}
	}

	return nil
}

// plainPath checks one step of the path: an untagged scalar key and an untagged mapping value.
func plainPath(k, v *yaml.Node, path string) error {
	if k.Style&yaml.TaggedStyle != 0 || v.Style&yaml.TaggedStyle != 0 {
		return refuse("%s is tagged", path)
	}

	if v.Kind != yaml.MappingNode {
		return refuse("%s is not a mapping (line %d)", path, v.Line)
	}

	return nil
}

// off converts a yaml.v3 position (1-based line, 1-based column in characters) to a byte offset.
func (t *text) off(line, col int) (int, error) {
	if line < 1 || line > len(t.lines) || col < 1 {
		return 0, refuse("position %d:%d out of range", line, col)
	}

	o := t.lines[line-1]
	for i := 1; i < col; i++ {
		if o >= len(t.b) || t.b[o] == '\n' {
			return 0, refuse("column %d past the end of line %d", col, line)
		}

		_, size := utf8.DecodeRune(t.b[o:])
		o += size
	}

	if o >= len(t.b) {
		return 0, refuse("position %d:%d at the end of the text", line, col)
	}

	return o, nil
}

func (t *text) nodeOff(n *yaml.Node) (int, error) { return t.off(n.Line, n.Column) }

// lineEnd is the offset of the newline ending line (or the end of the text).
func (t *text) lineEnd(line int) int {
	if line < len(t.lines) {
		return t.lines[line] - 1
	}

	return len(t.b)
}

// lineNext is the offset where the line after line starts; it refuses a last line without newline.
func (t *text) lineNext(line int) (int, error) {
	if line < len(t.lines) {
		return t.lines[line], nil
	}

	return 0, refuse("line %d does not end with a newline", line)
}

func (t *text) lineText(line int) string {
	return string(t.b[t.lines[line-1]:t.lineEnd(line)])
}

// restOfLineOK tells whether only blanks and an optional comment follow offset o on its line.
func (t *text) restOfLineOK(o int) bool {
	for o < len(t.b) && t.b[o] != '\n' {
		switch t.b[o] {
		case ' ', '\t':
			o++
		case '#':
			return o > 0 && (t.b[o-1] == ' ' || t.b[o-1] == '\t')
		default:
			return false
		}
	}

	return true
}

// lineIsCommentOrBlank tells whether a line holds nothing but blanks and maybe a comment.
func (t *text) lineIsCommentOrBlank(line int) bool {
	s := strings.TrimLeft(t.lineText(line), " \t")

	return s == "" || s[0] == '#'
}

func skipBlanks(b []byte, o int) int {
	for o < len(b) && (b[o] == ' ' || b[o] == '\t') {
		o++
	}

	return o
}

// quotedEnd is the offset after the closing quote of the one-line scalar n quoted with q that
// starts at start: in double quotes a backslash escapes the next byte, in single quotes two
// quotes are one.
func (t *text) quotedEnd(n *yaml.Node, start int, q byte) (int, error) {
	if t.b[start] != q {
		return 0, refuse("expected a %s quote at line %d", map[byte]string{'"': "double", '\'': "single"}[q], n.Line)
	}

	for end := start + 1; ; end++ {
		if end >= len(t.b) || t.b[end] == '\n' {
			return 0, refuse("multi-line quoted scalar at line %d", n.Line)
		}

		switch {
		case q == '"' && t.b[end] == '\\', q == '\'' && t.b[end] == q && end+1 < len(t.b) && t.b[end+1] == q:
			end++ // and the byte it escapes
		case t.b[end] == q:
			return end + 1, nil
		}
	}
}

// scalarSpan finds the end of a single-line scalar and checks that the text means node.Value.
func (t *text) scalarSpan(n *yaml.Node, flow bool) (int, int, error) {
	if n.Kind != yaml.ScalarNode || n.Style&(yaml.TaggedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return 0, 0, refuse("unsupported scalar at line %d", n.Line)
	}

	start, err := t.nodeOff(n)
	if err != nil {
		return 0, 0, err
	}

	end := start

	switch {
	case n.Style&yaml.DoubleQuotedStyle != 0:
		if end, err = t.quotedEnd(n, start, '"'); err != nil {
			return 0, 0, err
		}
	case n.Style&yaml.SingleQuotedStyle != 0:
		if end, err = t.quotedEnd(n, start, '\''); err != nil {
			return 0, 0, err
		}
	default:
		if n.Tag == "!!null" && n.Value == "" {
			return 0, 0, refuse("empty value at line %d", n.Line)
		}

		end = plainEnd(t.b, start, flow)
		if string(t.b[start:end]) != n.Value {
			return 0, 0, refuse("scalar at line %d is not on one line", n.Line)
		}

		return start, end, nil
	}

	var got string
	if err := unmarshal(t.b[start:end], &got); err != nil || got != n.Value {
		return 0, 0, refuse("cannot read the quoted scalar at line %d", n.Line)
	}

	return start, end, nil
}

// plainEnd finds where a plain scalar starting at o ends on its line.
func plainEnd(b []byte, o int, flow bool) int {
	end := o

	for i := o; i < len(b) && b[i] != '\n'; i++ {
		c := b[i]
		if c == '#' && i > o && (b[i-1] == ' ' || b[i-1] == '\t') {
			break
		}

		if c == ':' && (i+1 >= len(b) || b[i+1] == ' ' || b[i+1] == '\t' || b[i+1] == '\n' ||
			(flow && strings.IndexByte(",[]{}", b[i+1]) >= 0)) {
			break
		}

		if flow && strings.IndexByte(",[]{}", c) >= 0 {
			break
		}

		if c != ' ' && c != '\t' {
			end = i + 1
		}
	}

	return end
}

// valueSpan finds a single-line value: a scalar or a flow collection.
func (t *text) valueSpan(n *yaml.Node, flow bool) (int, int, error) {
	switch {
	case n.Kind == yaml.ScalarNode:
		return t.scalarSpan(n, flow)
	case (n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode) && n.Style&yaml.FlowStyle != 0:
		return t.flowSpan(n)
	default:
		return 0, 0, refuse("unsupported value at line %d", n.Line)
	}
}

// flowSpan finds a flow collection written on one line, checking every separator.
func (t *text) flowSpan(n *yaml.Node) (int, int, error) {
	if n.Style&yaml.TaggedStyle != 0 {
		return 0, 0, refuse("tagged collection at line %d", n.Line)
	}

	open, closing := byte('['), byte(']')
	if n.Kind == yaml.MappingNode {
		open, closing = '{', '}'
	}

	start, err := t.nodeOff(n)
	if err != nil {
		return 0, 0, err
	}

	if t.b[start] != open {
		return 0, 0, refuse("expected %q at line %d", open, n.Line)
	}

	o := start + 1
	step := 1

	if n.Kind == yaml.MappingNode {
		step = 2
	}

	for i := 0; i < len(n.Content); i += step {
		o = skipBlanks(t.b, o)

		if i > 0 {
			if o >= len(t.b) || t.b[o] != ',' {
				return 0, 0, refuse("unexpected text in flow collection at line %d", n.Line)
			}

			o = skipBlanks(t.b, o+1)
		}

		child := n.Content[i]
		if child.Line != n.Line {
			return 0, 0, refuse("flow collection at line %d spans lines", n.Line)
		}

		cs, ce, err := t.valueSpan(child, true)
		if err != nil {
			return 0, 0, err
		}

		if cs != o {
			return 0, 0, refuse("unexpected text in flow collection at line %d", n.Line)
		}

		o = ce

		if n.Kind == yaml.MappingNode {
			if child.Kind != yaml.ScalarNode {
				return 0, 0, refuse("complex key at line %d", n.Line)
			}

			o = skipBlanks(t.b, o)
			if o >= len(t.b) || t.b[o] != ':' {
				return 0, 0, refuse("expected ':' at line %d", n.Line)
			}

			val := n.Content[i+1]
			if val.Line != n.Line {
				return 0, 0, refuse("flow collection at line %d spans lines", n.Line)
			}

			vs, ve, err := t.valueSpan(val, true)
			if err != nil {
				return 0, 0, err
			}

			if vs <= o || strings.TrimLeft(string(t.b[o+1:vs]), " \t") != "" {
				return 0, 0, refuse("unexpected text in flow mapping at line %d", n.Line)
			}

			o = ve
		}
	}

	o = skipBlanks(t.b, o)
	if len(n.Content) > 0 && o < len(t.b) && t.b[o] == ',' {
		o = skipBlanks(t.b, o+1)
	}

	if o >= len(t.b) || t.b[o] != closing {
		return 0, 0, refuse("flow collection at line %d is not closed on its line", n.Line)
	}

	return start, o + 1, nil
}

// keySpan finds a key and checks that a colon follows it.
func (t *text) keySpan(k *yaml.Node, flow bool) (int, int, int, error) {
	ks, ke, err := t.scalarSpan(k, flow)
	if err != nil {
		return 0, 0, 0, err
	}

	c := skipBlanks(t.b, ke)
	if c >= len(t.b) || t.b[c] != ':' {
		return 0, 0, 0, refuse("expected ':' after the key at line %d", k.Line)
	}

	return ks, ke, c, nil
}

// entrySpan finds entry i (key index) of mapping m.
func (t *text) entrySpan(m *yaml.Node, i int) (span, error) {
	k, v := m.Content[i], m.Content[i+1]
	s := span{key: k, val: v, keyLine: k.Line, lastLine: k.Line}

	if m.Style&yaml.FlowStyle != 0 {
		ks, ke, _, err := t.keySpan(k, true)
		if err != nil {
			return s, err
		}

		vs, ve, err := t.valueSpan(v, true)
		if err != nil {
			return s, err
		}

		s.start, s.keyStart, s.keyEnd, s.valStart, s.valEnd, s.end = ks, ks, ke, vs, ve, ve

		return s, nil
	}

	ks, ke, colon, err := t.keySpan(k, false)
	if err != nil {
		return s, err
	}

	s.start = t.lines[k.Line-1]
	if strings.Trim(string(t.b[s.start:ks]), " ") != "" {
		return s, refuse("unexpected text before the key at line %d", k.Line)
	}

	s.keyStart, s.keyEnd = ks, ke

	switch {
	case v.Line == k.Line && (v.Kind == yaml.ScalarNode || v.Style&yaml.FlowStyle != 0):
		vs, ve, err := t.valueSpan(v, false)
		if err != nil {
			return s, err
		}

		if !t.restOfLineOK(ve) {
			return s, refuse("unexpected text after the value at line %d", v.Line)
		}

		s.valStart, s.valEnd = vs, ve
	case v.Line > k.Line && v.Kind == yaml.SequenceNode && v.Style&yaml.FlowStyle == 0:
		if !t.restOfLineOK(colon + 1) {
			return s, refuse("unexpected text after the key at line %d", k.Line)
		}

		prev := k.Line

		for _, item := range v.Content {
			is, ie, err := t.blockItemSpan(item)
			if err != nil {
				return s, err
			}

			if item.Line <= prev {
				return s, refuse("list item at line %d shares a line", item.Line)
			}

			prev = item.Line

			if s.valStart == 0 {
				s.valStart = is
			}

			s.valEnd = ie
		}

		s.lastLine = prev
	case v.Line > k.Line && v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0:
		if !t.restOfLineOK(colon + 1) {
			return s, refuse("unexpected text after the key at line %d", k.Line)
		}

		for j := 0; j < len(v.Content); j += 2 {
			cs, err := t.entrySpan(v, j)
			if err != nil {
				return s, err
			}

			if cs.keyLine <= s.lastLine {
				return s, refuse("mapping entry at line %d shares a line", cs.keyLine)
			}

			s.lastLine = cs.lastLine
		}

		s.valStart, _ = t.nodeOff(v)
		s.valEnd = t.lineEnd(s.lastLine)
	default:
		return s, refuse("unsupported value for %q at line %d", k.Value, k.Line)
	}

	s.end, err = t.lineNext(s.lastLine)

	return s, err
}

// blockItemSpan finds a "- value" list item alone on its line.
func (t *text) blockItemSpan(item *yaml.Node) (int, int, error) {
	if item.Kind != yaml.ScalarNode {
		return 0, 0, refuse("list item at line %d is not a scalar", item.Line)
	}

	is, ie, err := t.scalarSpan(item, false)
	if err != nil {
		return 0, 0, err
	}

	prefix := strings.TrimLeft(string(t.b[t.lines[item.Line-1]:is]), " ")
	if !strings.HasPrefix(prefix, "-") || strings.Trim(prefix[1:], " ") != "" || len(prefix) < 2 {
		return 0, 0, refuse("unexpected text before the list item at line %d", item.Line)
	}

	if !t.restOfLineOK(ie) {
		return 0, 0, refuse("unexpected text after the list item at line %d", item.Line)
	}

	return is, ie, nil
}

func splice(b []byte, start, end int, s string) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(s))
	out = append(out, b[:start]...)
	out = append(out, s...)

	return append(out, b[end:]...)
}

// indentStep is how far the children of a block mapping are indented from its key.
func indentStep(m, key *yaml.Node) int {
	if m != nil && key != nil && m.Style&yaml.FlowStyle == 0 && m.Column > key.Column {
		return m.Column - key.Column
	}

	return 2
}

// blockHeadLine checks that block mapping m (the value of key) starts below its key line and
// returns the key line, after which new first entries go.
func (t *text) blockHeadLine(m, key *yaml.Node) (int, error) {
	if m.Line <= key.Line {
		return 0, refuse("mapping at line %d starts on its key's line", m.Line)
	}

	_, _, colon, err := t.keySpan(key, false)
	if err != nil {
		return 0, err
	}

	if !t.restOfLineOK(colon + 1) {
		return 0, refuse("unexpected text after the key at line %d", key.Line)
	}

	if len(m.Content) > 0 {
		first := m.Content[0]
		lead := t.lineText(first.Line)[:first.Column-1]

		if strings.Trim(lead, " ") != "" {
			return 0, refuse("unexpected text before the key at line %d", first.Line)
		}
	}

	return key.Line, nil
}

// insertFirst puts a new entry at the start of mapping m (the value of key). entry renders it for
// a layout and an indentation.
func (t *text) insertFirst(m, key *yaml.Node, entry func(layout, indent string, step int) string) ([]byte, error) {
	if m.Style&yaml.FlowStyle != 0 {
		if _, _, err := t.flowSpan(m); err != nil {
			return nil, err
		}

		e := entry(layoutFlow, "", 0)

		if len(m.Content) == 0 {
			o, _ := t.nodeOff(m)

			return splice(t.b, o+1, o+1, e), nil
		}

		o, _ := t.nodeOff(m.Content[0])

		return splice(t.b, o, o, e+", "), nil
	}

	line, err := t.blockHeadLine(m, key)
	if err != nil {
		return nil, err
	}

	o, err := t.lineNext(line)
	if err != nil {
		return nil, err
	}

	return splice(t.b, o, o, entry(layoutBlock, strings.Repeat(" ", m.Column-1), indentStep(m, key))), nil
}

// entryRaw returns the exact text of an entry and its layout.
func (t *text) entryRaw(m *yaml.Node, i int) (string, string, error) {
	s, err := t.entrySpan(m, i)
	if err != nil {
		return "", "", err
	}

	if m.Style&yaml.FlowStyle != 0 {
		return string(t.b[s.start:s.end]), layoutFlow, nil
	}

	return string(t.b[s.start:s.end]), layoutBlock, nil
}

// deleteEntry removes entry i from mapping m (the value of key) and tells where it stood. It refuses
// to empty a block mapping.
func (t *text) deleteEntry(m, key *yaml.Node, i int) ([]byte, *Position, error) {
	s, err := t.entrySpan(m, i)
	if err != nil {
		return nil, nil, err
	}

	pos := &Position{}
	if i > 0 {
		pos.After = m.Content[i-2].Value
	}

	if m.Style&yaml.FlowStyle != 0 {
		if _, _, err := t.flowSpan(m); err != nil {
			return nil, nil, err
		}

		switch {
		case i > 0:
			prev, err := t.entrySpan(m, i-2)
			if err != nil {
				return nil, nil, err
			}

			pos.Sep = string(t.b[prev.end:s.start])

			return splice(t.b, prev.end, s.end, ""), pos, nil
		case len(m.Content) > 2:
			next, err := t.entrySpan(m, i+2)
			if err != nil {
				return nil, nil, err
			}

			pos.Sep = string(t.b[s.end:next.start])

			return splice(t.b, s.start, next.start, ""), pos, nil
		default:
			return splice(t.b, s.start, s.end, ""), pos, nil
		}
	}

	if len(m.Content) == 2 {
		return nil, nil, refuse("would leave an empty block mapping at line %d", m.Line)
	}

	anchor := 0

	if i > 0 {
		prev, err := t.entrySpan(m, i-2)
		if err != nil {
			return nil, nil, err
		}

		anchor = prev.lastLine
	} else {
		if anchor, err = t.blockHeadLine(m, key); err != nil {
			return nil, nil, err
		}
	}

	for l := anchor + 1; l < s.keyLine; l++ {
		if !t.lineIsCommentOrBlank(l) {
			return nil, nil, refuse("unexpected line %d before the entry at line %d", l, s.keyLine)
		}
	}

	pos.Skip = s.keyLine - anchor - 1

	return splice(t.b, s.start, s.end, ""), pos, nil
}

// insertAt puts an entry back where Position says (best effort when the neighbourhood changed).
func (t *text) insertAt(m, key *yaml.Node, pos *Position, entry func(layout, indent string, step int) string) ([]byte, error) {
	if pos == nil {
		pos = &Position{}
	}

	after := -1
	if pos.After != "" {
		after = yamlnode.Index(m, pos.After)
	}

	if m.Style&yaml.FlowStyle != 0 {
		if _, _, err := t.flowSpan(m); err != nil {
			return nil, err
		}

		e := entry(layoutFlow, "", 0)

		sep := pos.Sep
		if strings.Trim(sep, " \t") != "," {
			sep = ", "
		}

		if after < 0 {
			if len(m.Content) == 0 {
				o, _ := t.nodeOff(m)

				return splice(t.b, o+1, o+1, e), nil
			}

			o, _ := t.nodeOff(m.Content[0])

			return splice(t.b, o, o, e+sep), nil
		}

		prev, err := t.entrySpan(m, after)
		if err != nil {
			return nil, err
		}

		return splice(t.b, prev.end, prev.end, sep+e), nil
	}

	var (
		anchor int
		err    error
	)

	if after < 0 {
		anchor, err = t.blockHeadLine(m, key)
	} else {
		var prev span

		prev, err = t.entrySpan(m, after)
		anchor = prev.lastLine
	}

	if err != nil {
		return nil, err
	}

	// Skip the comment lines that stood between the neighbour and the entry, if they are still there
	// and belong to no entry.
	limit := len(t.lines)
	if next := after + 2; next < len(m.Content) {
		limit = m.Content[next].Line - 1
	} else if after < 0 && len(m.Content) > 0 {
		limit = m.Content[0].Line - 1
	}

	skip := 0
	for skip < pos.Skip && anchor+skip+1 <= limit && t.lineIsCommentOrBlank(anchor+skip+1) {
		skip++
	}

	if skip != pos.Skip {
		skip = 0
	}

	o, err := t.lineNext(anchor + skip)
	if err != nil {
		return nil, err
	}

	return splice(t.b, o, o, entry(layoutBlock, strings.Repeat(" ", t.mapIndent(m, key)), indentStep(m, key))), nil
}

// mapIndent is the column (0-based) of the keys of block mapping m.
func (t *text) mapIndent(m, key *yaml.Node) int {
	if len(m.Content) > 0 {
		return m.Column - 1
	}

	return key.Column - 1 + 2
}
