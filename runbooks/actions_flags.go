package runbooks

// extraargs.remove: the recovery from kube-apiserver refusing its own
// flags (a feature gate locked or gone, a flag removed, a runtime-config
// version it no longer serves). Unlike admission.disable it is meant to
// stay: there is no restore step, and `breakglass revert` is the way back.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ActionExtraArgsRemove takes flags out of cluster.apiServer.extraArgs.
const ActionExtraArgsRemove Action = "extraargs.remove"

// ExtraArgsRemoveParams are extraargs.remove's parameters.
type ExtraArgsRemoveParams struct {
	// Flags to take out: KEY (the whole extraArgs key, e.g. cloud-provider)
	// or KEY:ITEM (an item of its comma-separated value, e.g.
	// feature-gates:MultiCIDRServiceAllocator=false,
	// runtime-config:networking.k8s.io/v1alpha1). Empty: those the
	// diagnosis names.
	Flags []string `yaml:"flags,omitempty" json:"flags"`
}

func (*ExtraArgsRemoveParams) Action() Action { return ActionExtraArgsRemove }

var extraArgKey = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,99}$`)

// ParseExtraArgFlag splits KEY or KEY:ITEM.
func ParseExtraArgFlag(s string) (key, item string, err error) {
	key, item, _ = strings.Cut(s, ":")
	switch {
	case !extraArgKey.MatchString(key):
		return "", "", fmt.Errorf("%q: %q is not a kube-apiserver flag name (lower-case letters, digits and '-', no dashes before)", s, key)
	case strings.ContainsAny(item, ", \t\n") || (strings.Contains(s, ":") && item == ""):
		return "", "", fmt.Errorf("%q: an item is one entry of the key's comma-separated value (feature-gates:NAME=VALUE), without commas or spaces", s)
	}
	return key, item, nil
}

func (p *ExtraArgsRemoveParams) check() []fieldError {
	var errs []fieldError
	if p.Flags == nil {
		p.Flags = []string{}
	}
	for i, f := range p.Flags {
		if _, _, err := ParseExtraArgFlag(f); err != nil {
			errs = append(errs, fieldError{field: "flags", index: i, msg: err.Error(),
				hint: "name a whole key (cloud-provider) or KEY:ITEM (feature-gates:MultiCIDRServiceAllocator=false)"})
		} else if slices.Index(p.Flags, f) < i {
			errs = append(errs, fieldError{field: "flags", index: i, msg: fmt.Sprintf("%q is listed twice", f)})
		}
	}
	return errs
}

func init() {
	// After apiserver.wait's neighbours in run order: it takes the place of
	// admission.disable in its runbook.
	i := slices.IndexFunc(actionTable, func(a ActionInfo) bool { return a.Name == ActionAdmissionDisable })
	actionTable = slices.Insert(actionTable, i+1, ActionInfo{
		Name: ActionExtraArgsRemove,
		Summary: "take the flags kube-apiserver refuses out of cluster.apiServer.extraArgs on every control-plane node through the Talos API, without a reboot, " +
			"recording the exact old values (meant to stay: breakglass revert puts them back)",
		ChangesCluster: true,
		newParams:      func() Params { return &ExtraArgsRemoveParams{Flags: []string{}} },
		params: []paramDoc{{"flags", "list of KEY or KEY:ITEM", "what to take out: a whole key, or one item of its comma-separated value",
			"those the diagnosis names (diagnose must run before)"}},
	})
}
