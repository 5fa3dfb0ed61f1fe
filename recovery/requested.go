package recovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/runbooks"
)

// withRequestedDeletes puts the objects the operator named (recover
// --delete NAME, or KIND/NAME) into the runbook's first etcd.delete step.
// A name is an admission object, not a kind: the step then looks it up
// across every admission kind (or the one --kind names), and, being asked
// for, is no longer optional.
func withRequestedDeletes(steps []Step, names []string, kind, runbook string) ([]Step, error) {
	if len(names) == 0 {
		return steps, nil
	}
	out := slices.Clone(steps)
	i := slices.IndexFunc(out, func(s Step) bool { _, ok := s.Params.(*runbooks.EtcdDeleteParams); return ok })
	if i < 0 {
		return nil, failure.Input("use a runbook that removes objects: breakglass runbook list", "runbook %s has no etcd.delete step to remove %s", runbook, strings.Join(names, ", "))
	}
	s := out[i]
	p := *s.Params.(*runbooks.EtcdDeleteParams) // a copy: the runbook's own stays as loaded
	p.Names = slices.Clone(p.Names)
	p.Kind = orDefault(kind, "all")
	for _, arg := range names {
		name := arg
		if k, n, ok := strings.Cut(arg, "/"); ok {
			if kind != "" && k != kind {
				return nil, failure.Input("give the kind once: --kind KIND, or KIND/NAME", "--delete %s names kind %s, --kind says %s", arg, k, kind)
			}
			p.Kind, name = k, n
		}
		if !runbooks.ValidObjectName(name) {
			return nil, failure.Input("list the objects with: breakglass etcd webhooks --kind all", "--delete %q is not a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253)", name)
		}
		if !slices.Contains(p.Names, name) {
			p.Names = append(p.Names, name)
		}
	}
	if _, err := kinds.Parse(p.Kind); err != nil {
		return nil, err
	}
	s.Params, s.Optional, s.Requested = &p, false, true
	out[i] = s
	return out, nil
}

// checkRequestedDeletes looks every object the operator asked to remove up
// in etcd, before anything changes: a name that is not there, or that more
// than one kind holds, stops the run here (exit 2) with the names present
// and the closest one.
func (r *run) checkRequestedDeletes(ctx context.Context) ([]string, error) {
	var found []string
	for _, s := range r.opts.Steps {
		p, ok := s.Params.(*runbooks.EtcdDeleteParams)
		if !ok || !s.Requested || len(p.Names) == 0 {
			continue
		}
		ec, err := r.etcdClient(ctx)
		if err != nil {
			return nil, fmt.Errorf("cannot check the objects to remove (%s): %w", strings.Join(p.Names, ", "), err)
		}
		resources, err := kinds.Parse(p.Kind)
		if err != nil {
			return nil, err
		}
		plan, err := ec.PlanDelete(ctx, p.Names, resources)
		if err != nil {
			var amb *etcd.AmbiguousNameError
			if errors.As(err, &amb) {
				return nil, failure.Input("name the kind: --kind "+strings.Join(kinds.Values, "|"), "--delete: %w", err)
			}
			return nil, fmt.Errorf("--delete: %w", err)
		}
		for _, o := range plan.Objects {
			found = append(found, o.Kind+" "+termsafe.String(o.Name))
		}
	}
	return found, nil
}
