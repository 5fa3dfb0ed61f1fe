package configedit

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// What a text edit did to the structure around the two keys, for checking it.
const (
	keptStructure    = 0
	removedExtraArgs = 1 // cluster.apiServer.extraArgs removed
	removedAPIServer = 2 // cluster.apiServer removed
	nulledExtraArgs  = 3 // cluster.apiServer.extraArgs made null again
	nulledAPIServer  = 4 // cluster.apiServer made null again
)

// setValue changes the value of entry i of mapping m to nv, keeping its form and style.
func (t *text) setValue(m *yaml.Node, i int, nv argValue) ([]byte, error) {
	s, err := t.entrySpan(m, i)
	if err != nil {
		return nil, err
	}

	v := s.val

	switch {
	case v.Kind == yaml.ScalarNode && !nv.list:
		return splice(t.b, s.valStart, s.valEnd, renderScalar(nv.str, v.Style, m.Style&yaml.FlowStyle != 0)), nil
	case v.Kind == yaml.SequenceNode && nv.list && len(nv.items) > 0:
		old := make([]string, len(v.Content))
		for j, it := range v.Content {
			old[j] = it.Value
		}

		ops := align(old, nv.items)

		if v.Style&yaml.FlowStyle != 0 {
			return t.setFlowList(v, ops, nv.items)
		}

		return t.setBlockList(v, ops, nv.items)
	default:
		return nil, refuse("value of %q at line %d changes form", s.key.Value, s.key.Line)
	}
}

// align matches new items to old ones: ops[i] is the index of the old item kept for new item i, or -1.
func align(old, items []string) []int {
	ops := make([]int, len(items))
	j := 0

	for i, it := range items {
		ops[i] = -1

		for k := j; k < len(old); k++ {
			if old[k] == it {
				ops[i] = k
				j = k + 1

				break
			}
		}
	}

	return ops
}

func (t *text) setFlowList(v *yaml.Node, ops []int, items []string) ([]byte, error) {
	start, end, err := t.flowSpan(v)
	if err != nil {
		return nil, err
	}

	type itemSpan struct{ s, e int }

	spans := make([]itemSpan, len(v.Content))

	for j, it := range v.Content {
		if it.Kind != yaml.ScalarNode {
			return nil, refuse("list item at line %d is not a scalar", it.Line)
		}

		s, e, err := t.scalarSpan(it, true)
		if err != nil {
			return nil, err
		}

		spans[j] = itemSpan{s, e}
	}

	lead, trail, sep := "", "", ", "
	style := yaml.Style(0)

	if n := len(spans); n > 0 {
		lead = string(t.b[start+1 : spans[0].s])
		trail = string(t.b[spans[n-1].e : end-1])
		style = v.Content[n-1].Style

		if n > 1 {
			sep = string(t.b[spans[0].e:spans[1].s])
		}
	}

	texts := make([]string, len(items))

	for i, op := range ops {
		if op >= 0 {
			texts[i] = string(t.b[spans[op].s:spans[op].e])
		} else {
			texts[i] = renderScalar(items[i], style, true)
		}
	}

	return splice(t.b, start, end, "["+lead+strings.Join(texts, sep)+trail+"]"), nil
}

func (t *text) setBlockList(v *yaml.Node, ops []int, items []string) ([]byte, error) {
	old := v.Content
	last := old[len(old)-1]

	is, _, err := t.blockItemSpan(last)
	if err != nil {
		return nil, err
	}

	prefix := string(t.b[t.lines[last.Line-1]:is])

	appendOnly := len(ops) >= len(old)
	for i := range ops {
		if (i < len(old) && ops[i] != i) || (i >= len(old) && ops[i] != -1) {
			appendOnly = false
		}
	}

	if appendOnly {
		var b strings.Builder
		for _, it := range items[len(old):] {
			b.WriteString(prefix + renderScalar(it, last.Style, false) + "\n")
		}

		o, err := t.lineNext(last.Line)
		if err != nil {
			return nil, err
		}

		return splice(t.b, o, o, b.String()), nil
	}

	// Anything else rewrites the item lines, which must follow each other with nothing between.
	for j, it := range old {
		if it.Line != old[0].Line+j {
			return nil, refuse("comment or blank line between list items at line %d", it.Line)
		}
	}

	var b strings.Builder

	for i, op := range ops {
		if op >= 0 {
			b.WriteString(t.lineText(old[op].Line) + "\n")
		} else {
			b.WriteString(prefix + renderScalar(items[i], last.Style, false) + "\n")
		}
	}

	end, err := t.lineNext(last.Line)
	if err != nil {
		return nil, err
	}

	return splice(t.b, t.lines[old[0].Line-1], end, b.String()), nil
}

// replaceEntry writes entry i of extraArgs anew.
func (t *text) replaceEntry(m *yaml.Node, i int, r renderer) ([]byte, error) {
	s, err := t.entrySpan(m, i)
	if err != nil {
		return nil, err
	}

	if m.Style&yaml.FlowStyle != 0 {
		return splice(t.b, s.start, s.end, r(layoutFlow, "", 0)), nil
	}

	return splice(t.b, s.start, s.end, r(layoutBlock, string(t.b[s.start:s.keyStart]), indentStep(m, t.extraKey))), nil
}

// emptyBlock turns block mapping m (the value of key) into "{}".
func (t *text) emptyBlock(m, key *yaml.Node) ([]byte, error) { return t.collapse(m, key, " {}") }

// nullAgain writes mapping m (the value of key) as the null it was: text is what stood after the
// colon (block) or the token (flow).
func (t *text) nullAgain(m, key *yaml.Node, text string) ([]byte, error) {
	token := strings.TrimSpace(text)

	if m.Style&yaml.FlowStyle != 0 {
		if token == "" {
			token = "null"
		}

		start, end, err := t.flowSpan(m)
		if err != nil {
			return nil, err
		}

		return splice(t.b, start, end, token), nil
	}

	if text != "" && !strings.HasPrefix(text, " ") {
		text = " " + token
	}

	return t.collapse(m, key, text)
}

// collapse removes every entry of block mapping m (the value of key) and writes value after the colon.
func (t *text) collapse(m, key *yaml.Node, value string) ([]byte, error) {
	head, err := t.blockHeadLine(m, key)
	if err != nil {
		return nil, err
	}

	last, err := t.entrySpan(m, len(m.Content)-2)
	if err != nil {
		return nil, err
	}

	from, err := t.lineNext(head)
	if err != nil {
		return nil, err
	}

	_, _, colon, err := t.keySpan(key, false)
	if err != nil {
		return nil, err
	}

	b := splice(t.b, from, last.end, "")

	return splice(b, colon+1, colon+1, value), nil
}

// putKey writes a key Disable sets, creating extraArgs and apiServer when missing.
func (t *text) putKey(key string, nv argValue, kr *KeyRecord, rec *Record) ([]byte, error) {
	r := valueRenderer(key, nv)

	var (
		b   []byte
		err error
	)

	switch {
	case t.apiNull != nil:
		rec.CreatedExtraArgs = true
		rec.WasNull = &NullMapping{Key: "apiServer"}
		b, rec.WasNull.Text, err = t.fillNull(t.cluster, t.clusterKey, t.apiKey, t.apiNull, nestRenderer("extraArgs", r))

		return b, err
	case t.extraNull != nil:
		rec.WasNull = &NullMapping{Key: "extraArgs"}
		b, rec.WasNull.Text, err = t.fillNull(t.api, t.apiKey, t.extraKey, t.extraNull, r)

		return b, err
	case t.api == nil:
		rec.CreatedAPIServer, rec.CreatedExtraArgs = true, true

		return t.insertFirst(t.cluster, t.clusterKey, nestRenderer("apiServer", nestRenderer("extraArgs", r)))
	case t.extra == nil:
		rec.CreatedExtraArgs = true

		return t.insertFirst(t.api, t.apiKey, nestRenderer("extraArgs", r))
	}

	i := yamlnode.Index(t.extra, key)
	if i < 0 {
		return t.insertFirst(t.extra, t.extraKey, r)
	}

	if kr.Raw, kr.Layout, err = t.entryRaw(t.extra, i); err != nil {
		return nil, err
	}

	return t.setValue(t.extra, i, nv)
}

// dropKey removes entry i of extraArgs. With cascade, an extraArgs (then an apiServer) left empty
// goes too; without, an emptied block mapping becomes "{}", or null again when wasNull says it was.
func (t *text) dropKey(i int, cascadeExtra, cascadeAPI bool, wasNull *NullMapping) ([]byte, int, error) {
	nulled := func(key string) bool { return wasNull != nil && wasNull.Key == key }

	if len(t.extra.Content) == 2 && nulled("extraArgs") {
		b, err := t.nullAgain(t.extra, t.extraKey, wasNull.Text)

		return b, nulledExtraArgs, err
	}

	if len(t.extra.Content) > 2 || (!cascadeExtra && t.extra.Style&yaml.FlowStyle != 0) {
		b, _, err := t.deleteEntry(t.extra, t.extraKey, i)

		return b, keptStructure, err
	}

	if !cascadeExtra {
		b, err := t.emptyBlock(t.extra, t.extraKey)

		return b, keptStructure, err
	}

	if len(t.api.Content) == 2 && nulled("apiServer") {
		b, err := t.nullAgain(t.api, t.apiKey, wasNull.Text)

		return b, nulledAPIServer, err
	}

	if len(t.api.Content) > 2 || (!cascadeAPI && t.api.Style&yaml.FlowStyle != 0) {
		b, _, err := t.deleteEntry(t.api, t.apiKey, yamlnode.Index(t.api, "extraArgs"))

		return b, removedExtraArgs, err
	}

	if !cascadeAPI {
		b, err := t.emptyBlock(t.api, t.apiKey)

		return b, removedExtraArgs, err
	}

	b, _, err := t.deleteEntry(t.cluster, t.clusterKey, yamlnode.Index(t.cluster, "apiServer"))

	return b, removedAPIServer, err
}

// disableText is Disable by text edit: first the disable key, then the enable key.
func disableText(config []byte, cur, want args, enableChanged bool) ([]byte, Record, error) {
	rec := Record{
		Disable: keyRecordOf(cur.disable, true),
		Enable:  keyRecordOf(cur.enable, enableChanged),
	}

	t, err := parseText(config)
	if err != nil {
		return nil, rec, err
	}

	b, err := t.putKey(KeyDisable, want.disable, &rec.Disable, &rec)
	if err != nil {
		return nil, rec, err
	}

	if enableChanged {
		if t, err = parseText(b); err != nil {
			return nil, rec, err
		}

		i := -1
		if t.extra != nil {
			i = yamlnode.Index(t.extra, KeyEnable)
		}

		if i < 0 {
			return nil, rec, refuse("%s not found in the text", KeyEnable)
		}

		if rec.Enable.Raw, rec.Enable.Layout, err = t.entryRaw(t.extra, i); err != nil {
			return nil, rec, err
		}

		if want.enable.present {
			b, err = t.setValue(t.extra, i, want.enable)
		} else if len(t.extra.Content) > 2 {
			b, rec.Enable.Position, err = t.deleteEntry(t.extra, t.extraKey, i)
		} else {
			err = refuse("%s is the only key", KeyEnable) // cannot happen: the disable key is there
		}

		if err != nil {
			return nil, rec, err
		}
	}

	if err := verifyEdit(config, b, cur, want, keptStructure); err != nil {
		return nil, rec, err
	}

	return b, rec, nil
}

// restoreText is Undo by text edit, undoing Disable's steps in reverse order: a key that still holds
// what Disable left gets its recorded text back; one changed since gets the value u computed.
func restoreText(config []byte, cur args, rec Record, u undo) ([]byte, error) {
	b := config
	structure := keptStructure

	steps := []struct {
		key   string
		kr    KeyRecord
		exact bool
		want  argValue
	}{
		{KeyEnable, rec.Enable, u.exactEnable, u.want.enable},
		{KeyDisable, rec.Disable, u.exactDisable, u.want.disable},
	}

	for _, st := range steps {
		if !st.kr.Changed {
			continue
		}

		t, err := parseText(b)
		if err != nil {
			return nil, err
		}

		i := -1
		if t.extra != nil {
			i = yamlnode.Index(t.extra, st.key)
		}

		r := recordRenderer(st.key, st.kr)
		if !st.exact {
			r = valueRenderer(st.key, st.want)
		}

		switch {
		case !st.want.present && i < 0:
			continue
		case !st.want.present:
			b, structure, err = t.dropKey(i, rec.CreatedExtraArgs, rec.CreatedAPIServer, rec.WasNull)
		case !st.exact && i >= 0:
			b, err = t.setValue(t.extra, i, st.want)
		default:
			b, err = t.putRecorded(i, st.kr.Position, r)
		}

		if err != nil {
			return nil, err
		}
	}

	if err := verifyEdit(config, b, cur, u.want, structure); err != nil {
		return nil, err
	}

	return b, nil
}

// putRecorded writes a recorded entry back: over entry i of extraArgs, or
// where pos says when it is gone (i < 0), creating extraArgs and apiServer
// when they are missing.
func (t *text) putRecorded(i int, pos *Position, r renderer) ([]byte, error) {
	switch {
	case t.apiNull != nil || t.extraNull != nil:
		return nil, refuse("apiServer or extraArgs is null")
	case t.api == nil:
		return t.insertFirst(t.cluster, t.clusterKey, nestRenderer("apiServer", nestRenderer("extraArgs", r)))
	case t.extra == nil:
		return t.insertFirst(t.api, t.apiKey, nestRenderer("extraArgs", r))
	case i < 0:
		return t.insertAt(t.extra, t.extraKey, pos, r)
	}

	return t.replaceEntry(t.extra, i, r)
}

// removeText is RemovePlugins by text edit.
func removeText(config []byte, cur, want args) ([]byte, error) {
	t, err := parseText(config)
	if err != nil {
		return nil, err
	}

	i := -1
	if t.extra != nil {
		i = yamlnode.Index(t.extra, KeyDisable)
	}

	if i < 0 {
		return nil, refuse("%s not found in the text", KeyDisable)
	}

	structure := keptStructure

	var b []byte

	if want.disable.present {
		b, err = t.setValue(t.extra, i, want.disable)
	} else {
		// An emptied flow mapping stays as "{}"; an emptied block mapping goes, as it has no text left.
		b, structure, err = t.dropKey(i, t.extra.Style&yaml.FlowStyle == 0, t.api.Style&yaml.FlowStyle == 0, nil)
	}

	if err != nil {
		return nil, err
	}

	if err := verifyEdit(config, b, cur, want, structure); err != nil {
		return nil, err
	}

	return b, nil
}

// verifyEdit parses the edited text again and checks that it means the input with only the two keys
// (and the structure around them) changed as intended, and that the machinery loader still takes it.
func verifyEdit(in, out []byte, cur, want args, structure int) error {
	return verifyKeys(in, out, []keyChange{{KeyDisable, cur.disable, want.disable}, {KeyEnable, cur.enable, want.enable}}, structure)
}

// keyChange is one extraArgs key before and after an edit.
type keyChange struct {
	key       string
	cur, want argValue
}

// verifyKeys parses the edited text again and checks that it means the input with only these keys
// (and the structure around them) changed as intended, and that the machinery loader still takes it.
func verifyKeys(in, out []byte, changes []keyChange, structure int) error {
	inDocs, idx, err := decodeAll(in)
	if err != nil {
		return err
	}

	outDocs, outIdx, err := decodeAll(out)
	if err != nil {
		return fmt.Errorf("edited config does not parse: %w", err)
	}

	if idx != outIdx || len(inDocs) != len(outDocs) {
		return fmt.Errorf("edited config has different documents")
	}

	doc, ok := inDocs[idx].(map[string]any)
	if !ok {
		return fmt.Errorf("v1alpha1 document is not a mapping")
	}

	for _, c := range changes {
		if !c.want.equal(c.cur) {
			setArg(doc, c.key, c.want)
		}
	}

	if cluster, ok := doc["cluster"].(map[string]any); ok {
		api, _ := cluster["apiServer"].(map[string]any)

		switch {
		case structure == removedAPIServer:
			delete(cluster, "apiServer")
		case structure == nulledAPIServer:
			cluster["apiServer"] = nil
		case structure == removedExtraArgs && api != nil:
			delete(api, "extraArgs")
		case structure == nulledExtraArgs && api != nil:
			api["extraArgs"] = nil
		}
	}

	if !reflect.DeepEqual(inDocs, outDocs) {
		return fmt.Errorf("edited config differs from the intended change")
	}

	return loaderCheck(in, out)
}

// decodeAll decodes every document and tells which one is v1alpha1.
func decodeAll(b []byte) ([]any, int, error) {
	nodes, err := decodeDocs(b)
	if err != nil {
		return nil, 0, err
	}

	idx, _, err := v1alpha1Doc(nodes)
	if err != nil {
		return nil, 0, err
	}

	docs := make([]any, len(nodes))

	for i, n := range nodes {
		if err := decodeNode(n, &docs[i]); err != nil {
			return nil, 0, fmt.Errorf("decode document %d: %w", i+1, err)
		}
	}

	return docs, idx, nil
}
