package configedit

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// renderer writes an entry for a layout; indent and step matter for the block layout only.
type renderer func(layout, indent string, step int) string

// renderScalar writes v in the given style when that reads back as v in the context, else double-quoted.
func renderScalar(v string, style yaml.Style, flow bool) string {
	var c string

	switch {
	case style&yaml.SingleQuotedStyle != 0 && !strings.ContainsAny(v, "\n"):
		c = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case style&yaml.DoubleQuotedStyle != 0:
		return doubleQuote(v)
	default:
		c = v
	}

	if scalarReadsAs(c, v, flow) {
		return c
	}

	return doubleQuote(v)
}

// scalarReadsAs tells whether text c reads as the one-line string v where it will be written.
func scalarReadsAs(c, v string, flow bool) bool {
	docs := []string{"k: " + c + "\n", "- " + c + "\n"}
	if flow {
		docs = []string{"{k: " + c + "}\n", "[" + c + "]\n"}
	}

	for _, d := range docs {
		var n yaml.Node
		if err := unmarshal([]byte(d), &n); err != nil || len(n.Content) != 1 {
			return false
		}

		coll := n.Content[0]

		var s *yaml.Node

		switch {
		case coll.Kind == yaml.MappingNode && len(coll.Content) == 2:
			s = coll.Content[1]
		case coll.Kind == yaml.SequenceNode && len(coll.Content) == 1:
			s = coll.Content[0]
		default:
			return false
		}

		if s.Kind != yaml.ScalarNode || s.Tag != "!!str" || s.Value != v {
			return false
		}
	}

	return true
}

// doubleQuote writes a YAML double-quoted scalar.
func doubleQuote(v string) string {
	var b strings.Builder

	b.WriteByte('"')

	for _, r := range v {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r == 0x85 || r == 0xa0 || r == 0x2028 || r == 0x2029 || r == 0xfeff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}

	b.WriteByte('"')

	return b.String()
}

// valueRenderer writes key with value v, as a new entry.
func valueRenderer(key string, v argValue) renderer {
	return func(layout, indent string, step int) string {
		if v.null {
			if layout == layoutFlow {
				return key + ": null"
			}

			return indent + key + ": null\n"
		}

		if layout == layoutFlow {
			if !v.list {
				return key + ": " + renderScalar(v.str, 0, true)
			}

			items := make([]string, len(v.items))
			for i, it := range v.items {
				items[i] = renderScalar(it, 0, true)
			}

			return key + ": [" + strings.Join(items, ", ") + "]"
		}

		if !v.list {
			return indent + key + ": " + renderScalar(v.str, 0, false) + "\n"
		}

		if len(v.items) == 0 {
			return indent + key + ": []\n"
		}

		var b strings.Builder

		b.WriteString(indent + key + ":\n")

		for _, it := range v.items {
			b.WriteString(indent + strings.Repeat(" ", step) + "- " + renderScalar(it, 0, false) + "\n")
		}

		return b.String()
	}
}

// nestRenderer writes key holding a mapping with one entry.
func nestRenderer(key string, inner renderer) renderer {
	return func(layout, indent string, step int) string {
		if layout == layoutFlow {
			return key + ": {" + inner(layoutFlow, "", 0) + "}"
		}

		return indent + key + ":\n" + inner(layoutBlock, indent+strings.Repeat(" ", step), step)
	}
}

// recordRenderer puts back the recorded text when it fits where it goes, else writes the value anew.
func recordRenderer(key string, k KeyRecord) renderer {
	fresh := valueRenderer(key, k.value())

	return func(layout, indent string, step int) string {
		if k.Raw != "" && k.Layout == layout {
			switch {
			case layout == layoutFlow && !strings.Contains(k.Raw, "\n"):
				return k.Raw
			case layout == layoutBlock && strings.HasSuffix(k.Raw, "\n") && strings.HasPrefix(k.Raw, indent) &&
				len(k.Raw) > len(indent) && k.Raw[len(indent)] != ' ':
				return k.Raw
			}
		}

		return fresh(layout, indent, step)
	}
}
