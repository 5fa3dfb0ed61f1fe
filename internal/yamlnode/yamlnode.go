// Package yamlnode finds keys in yaml.v3 node trees, for the code that
// walks such trees by hand to keep what decoding loses: comments, bytes and
// the line of each value. It imports nothing of the project.
package yamlnode

import "gopkg.in/yaml.v3"

// Index is the position in m.Content of the first key node that is the
// scalar key (quoting aside), or -1, also when m is not a mapping. Its
// value is at Index+1.
func Index(m *yaml.Node, key string) int {
	if m == nil || m.Kind != yaml.MappingNode {
		return -1
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return i
		}
	}
	return -1
}

// Get returns the key node and the value node of key in mapping m, or two
// nils.
func Get(m *yaml.Node, key string) (k, v *yaml.Node) {
	i := Index(m, key)
	if i < 0 {
		return nil, nil
	}
	return m.Content[i], m.Content[i+1]
}

// Value is the value node of key in mapping m, or nil.
func Value(m *yaml.Node, key string) *yaml.Node {
	_, v := Get(m, key)
	return v
}

// Resolve follows an alias (*name) to the node its anchor (&name) marks;
// any other node, and nil, is itself.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 64; i++ {
		n = n.Alias
	}
	return n
}
