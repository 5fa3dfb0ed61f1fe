package runbooks

import (
	"fmt"
	"io"
	"reflect"
	"strings"
)

const renderWidth = 80

// Render writes rb for people (`breakglass runbook show`): what it is for,
// then each step numbered, with its action, what the action does, why the
// step is there, whether it changes the cluster, asks first or is optional,
// and every parameter with its value (defaults included).
func Render(w io.Writer, rb *Runbook) error {
	var b strings.Builder
	origin := rb.Source
	if rb.Builtin {
		origin = "builtin"
	}
	fmt.Fprintf(&b, "Runbook %s (%s)\n", rb.Metadata.Name, origin)
	if rb.Metadata.Description != "" {
		b.WriteString("\n")
		wrap(&b, rb.Metadata.Description, "  ", "  ")
	}
	fmt.Fprintf(&b, "\nSteps:\n")
	for i, s := range rb.Spec.Steps {
		b.WriteString("\n")
		a := lookupAction(s.Action)
		var flags []string
		if a != nil && a.ChangesCluster {
			flags = append(flags, "changes the cluster")
		} else {
			flags = append(flags, "read-only")
		}
		if s.Confirm {
			flags = append(flags, "asks first")
		}
		if s.Optional {
			flags = append(flags, "optional")
		}
		num := fmt.Sprintf("%2d. ", i+1)
		fmt.Fprintf(&b, "%s%s  [%s]  %s\n", num, s.Name, s.Action, strings.Join(flags, ", "))
		indent := strings.Repeat(" ", len(num))
		if a != nil {
			wrap(&b, a.Summary, indent+"does: ", indent+"      ")
		}
		if s.Description != "" {
			wrap(&b, s.Description, indent+"why:  ", indent+"      ")
		}
		if a == nil || len(a.params) == 0 || s.Params == nil {
			continue
		}
		v := reflect.ValueOf(s.Params).Elem()
		width := 0
		for _, d := range a.params {
			width = max(width, len(d.name))
		}
		for j, d := range a.params {
			label := indent + "with: "
			if j > 0 {
				label = indent + "      "
			}
			val := formatValue(fieldByTag(v, d.name))
			if val == "" {
				val = "none"
				if d.unset != "" {
					val += " (" + d.unset + ")"
				}
			}
			pad := strings.Repeat(" ", width-len(d.name)+2)
			wrap(&b, val, label+d.name+pad, indent+strings.Repeat(" ", 6+width+2))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wrap writes text word-wrapped to renderWidth, the first line after first,
// the others after rest. Line breaks in text are kept.
func wrap(b *strings.Builder, text, first, rest string) {
	prefix := first
	for _, line := range strings.Split(text, "\n") {
		words := strings.Fields(line)
		if len(words) == 0 {
			b.WriteString(strings.TrimRight(prefix, " ") + "\n")
			prefix = rest
			continue
		}
		cur := prefix + words[0]
		for _, word := range words[1:] {
			if len(cur)+1+len(word) > renderWidth {
				b.WriteString(cur + "\n")
				cur = rest + word
				continue
			}
			cur += " " + word
		}
		b.WriteString(cur + "\n")
		prefix = rest
	}
}
