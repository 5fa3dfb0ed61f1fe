// Package flaglist reads list-valued flags the way kube-apiserver, talosctl
// and etcdctl do: comma-separated, possibly repeated. It imports nothing of
// the project.
package flaglist

import "strings"

// Split returns the items of every value, in order: each value split at
// commas, items trimmed, blanks dropped. Split("a, b", "c") and
// Split("a,b,,c") both give [a b c]; no items give nil.
func Split(values ...string) []string {
	var out []string
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
