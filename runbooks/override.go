package runbooks

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Overrides are command-line values that fill in or replace a runbook's
// parameters (breakglass recover --plugins, --revert-after, --delete).
type Overrides struct {
	// Plugins, when set, replace the plugins of every admission.disable step.
	Plugins []string
	// RevertAfter, when set, becomes the revertAfter of every admission.disable step.
	RevertAfter Duration
	// Delete names objects for etcd.delete steps, added to the names in the
	// file. "NAME" goes to the runbook's first etcd.delete step;
	// "KIND/NAME" (validating-policy/NAME) to the first one of that kind.
	Delete []string
}

// WithOverrides returns a copy of rb with o applied and checked. Errors are
// *LoadError naming the flag (--plugins, --revert-after, --delete).
func (rb *Runbook) WithOverrides(o Overrides) (*Runbook, error) {
	out := rb.Clone()
	var disables, deletes []*Step
	for i := range out.Spec.Steps {
		switch out.Spec.Steps[i].Action {
		case ActionAdmissionDisable:
			disables = append(disables, &out.Spec.Steps[i])
		case ActionEtcdDelete:
			deletes = append(deletes, &out.Spec.Steps[i])
		}
	}
	flagErr := func(flag, format string, args ...any) *LoadError {
		return &LoadError{Source: flag, Msg: fmt.Sprintf(format, args...)}
	}

	if o.Plugins != nil || o.RevertAfter != 0 {
		if len(disables) == 0 {
			flag := "--plugins"
			if o.Plugins == nil {
				flag = "--revert-after"
			}
			return nil, flagErr(flag, "runbook %s has no admission.disable step", rb.Metadata.Name)
		}
		for _, s := range disables {
			p := s.Params.(*AdmissionDisableParams)
			if o.Plugins != nil {
				p.Plugins = slices.Clone(o.Plugins)
			}
			if o.RevertAfter != 0 {
				p.RevertAfter = o.RevertAfter
			}
			if fe := p.check(); len(fe) > 0 {
				return nil, flagErr("--"+map[string]string{"plugins": "plugins", "revertAfter": "revert-after"}[fe[0].field], "%s", fe[0].msg).hint(fe[0].hint)
			}
		}
	}

	for _, arg := range o.Delete {
		target := (*Step)(nil)
		name := arg
		if kind, n, ok := strings.Cut(arg, "/"); ok {
			name = n
			if _, ok := kinds.ByShort(kind); !ok {
				return nil, flagErr("--delete", "%q: unknown kind %q (want one of %s)", arg, kind, strings.Join(kindStrings(), ", "))
			}
			for _, s := range deletes {
				if s.Params.(*EtcdDeleteParams).Kind == kind {
					target = s
					break
				}
			}
			if target == nil {
				return nil, flagErr("--delete", "%q: runbook %s has no etcd.delete step for kind %s", arg, rb.Metadata.Name, kind).
					hint(deleteKindsHint(rb.Metadata.Name, deletes))
			}
		} else {
			if len(deletes) == 0 {
				return nil, flagErr("--delete", "runbook %s has no etcd.delete step", rb.Metadata.Name)
			}
			target = deletes[0]
		}
		p := target.Params.(*EtcdDeleteParams)
		if !ValidObjectName(name) {
			return nil, flagErr("--delete", "%q is not a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253)", name)
		}
		if !slices.Contains(p.Names, name) {
			p.Names = append(p.Names, name)
		}
	}
	return out, nil
}

func deleteKindsHint(runbook string, deletes []*Step) string {
	if len(deletes) == 0 {
		return ""
	}
	var kinds []string
	for _, s := range deletes {
		kinds = append(kinds, string(s.Params.(*EtcdDeleteParams).Kind))
	}
	return fmt.Sprintf("runbook %s deletes: %s", runbook, strings.Join(kinds, ", "))
}

// SkipReason says why step i of rb would not run with the inputs it has, or
// "" when it runs. Only optional steps are skipped for this; for a required
// step, CheckInputs turns the same reason into an error. (webhook.wait has a
// further condition only a live run can tell: whether any remaining webhook's
// backend can be probed.)
func (rb *Runbook) SkipReason(i int) string {
	if i < 0 || i >= len(rb.Spec.Steps) {
		return ""
	}
	s := rb.Spec.Steps[i]
	switch p := s.Params.(type) {
	case *EtcdDeleteParams:
		if len(p.Names) == 0 {
			return fmt.Sprintf("no %s objects named (give them with --delete NAME)", p.Kind)
		}
	case *EtcdSnapshotParams:
		if !s.Optional {
			return ""
		}
		for j := i + 1; j < len(rb.Spec.Steps); j++ {
			if d, ok := rb.Spec.Steps[j].Params.(*EtcdDeleteParams); ok && len(d.Names) > 0 {
				return ""
			}
		}
		return "nothing will be deleted from etcd"
	}
	return ""
}

// CheckInputs refuses a run in which a required step lacks its inputs (an
// etcd.delete that is not optional and names nothing). Call it after
// WithOverrides, before planning.
func (rb *Runbook) CheckInputs() error {
	for i, s := range rb.Spec.Steps {
		if s.Optional {
			continue
		}
		if why := rb.SkipReason(i); why != "" {
			return (&LoadError{Source: rb.Source, Line: s.Line, Msg: fmt.Sprintf("step %q is required but has nothing to do: %s", s.Name, why)}).
				hint("give the names on the command line with --delete NAME (breakglass etcd webhooks lists them), or make the step optional")
		}
	}
	return nil
}
