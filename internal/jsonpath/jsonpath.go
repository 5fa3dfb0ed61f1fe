// Package jsonpath reads a value deep in a decoded JSON or YAML object
// (maps of map[string]any, as encoding/json and yaml decode them), for the
// code that reads objects without their Go types: a Pod's status, an
// object to replay. It imports nothing of the project.
package jsonpath

// Get returns the value at path in m, or nil when a key is missing or
// what is on the way is not an object.
func Get(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}
