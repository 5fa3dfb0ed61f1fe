package upgradecheck

// apiserver-flags: the target's binary accepts every extraArgs entry.

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

var flagsCheck = &checkDef{
	ID:    CheckAPIServerFlags,
	Title: "kube-apiserver flags the target accepts",
	Help: "cluster.apiServer.extraArgs of every control plane against what the target's binary accepts (flags, feature " +
		"gates, runtime-config), with the talosctl patch that fixes it",
	NoGo:  "the target's binary refuses an extraArgs key, feature gate or runtime-config entry (the fix is the `talosctl patch` line)",
	Warn:  "it warns about one",
	Fix:   "take the refused entry out of cluster.apiServer.extraArgs: talosctl -n NODE patch machineconfig --mode=no-reboot",
	Needs: []need{needTalosAPI, needControlPlane, needConfigs, needAuditablePath},
	Judge: factsOnly(judgeFlags),
}

func judgeFlags(f *facts) Check {
	var c Check
	switch {
	case f.gatherErr != nil:
		return unread("the machine configs' extraArgs could not be read", f.gatherErr)
	case f.argsErr != nil:
		return unread("the flags could not be checked", f.argsErr)
	case f.args == nil:
		return notChecked(c, "the flags were not checked")
	}
	to := f.to.String()
	rec, _ := apiserverargs.For(to)
	binary := "kube-apiserver " + to
	if rec != nil {
		binary = "kube-apiserver " + rec.Version
	}
	cps := controlPlanes(f.nodes)
	verdict := Go
	var refused []string
	for _, a := range f.args {
		line := fmt.Sprintf("node %s: %s: %s says %q", termsafe.String(a.Source), termsafe.String(a.Subject()), binary, termsafe.Text(orAccepted(a.OnTo)))
		c.Evidence = append(c.Evidence, line)
		switch a.Risk {
		case audit.RiskDeadlock:
			verdict = NoGo
			refused = appendNew(refused, termsafe.String(a.Subject()))
			c.Fix = appendNew(c.Fix, patchCommand(f, a))
		case audit.RiskUnknown, audit.RiskWarning:
			verdict = worse(verdict, Warn)
		}
	}
	c.Verdict = verdict
	switch verdict {
	case NoGo:
		c.Summary = fmt.Sprintf("%s refuses %s at start and exits at once, on every start (CrashLoopBackOff)", binary, strings.Join(firstN(refused, 3), ", "))
		c.Fix = append(c.Fix, "and make the same change where the machine configs come from (Omni cluster template, talhelper's talconfig.yaml, Terraform's config_patches, patch files), or the next apply brings the flag back")
	case Warn:
		c.Summary = fmt.Sprintf("%s accepts every flag, with warnings (deprecated or GA items that will go)", binary)
	default:
		c.Summary = fmt.Sprintf("%s accepts every extraArgs key, feature gate and runtime-config entry of the %d control plane(s)", binary, len(cps))
		if len(f.gathered.ExtraArgs) > 0 {
			n := 0
			for _, ea := range f.gathered.ExtraArgs {
				n += len(ea.Args)
			}
			if n == 0 {
				c.Summary = "no control plane sets cluster.apiServer.extraArgs"
			}
		}
	}
	return c
}

func orAccepted(s string) string {
	if s == "" {
		return "accepted"
	}
	return s
}

// patchCommand is the talosctl command that takes a refused flag out of
// a node's cluster.apiServer.extraArgs without a reboot: a strategic
// merge patch (the only kind talosctl applies to the multi-document
// configs Talos generates), "$patch: delete" for a key that goes; a
// list-valued key is deleted and set again (a merge appends to a list).
func patchCommand(f *facts, a audit.ArgFinding) string {
	set := func(v any) string {
		b, _ := json.Marshal(map[string]any{"cluster": map[string]any{"apiServer": map[string]any{"extraArgs": map[string]any{a.Flag: v}}}})
		return " -p '" + strings.ReplaceAll(string(b), "'", `'\''`) + "'"
	}
	del := set(map[string]string{"$patch": "delete"})
	cmd := fmt.Sprintf("talosctl %s-n %s patch machineconfig --mode=no-reboot", contextFlag(f), termsafe.String(a.Source))
	switch {
	case a.RemoveKey || a.Item == "":
		return cmd + del
	case isList(f, a):
		return cmd + del + set(flaglist.Split(a.FixedValue))
	}
	return cmd + set(a.FixedValue)
}

// isList tells whether the node's value of the key is a list (Talos 1.13+).
func isList(f *facts, a audit.ArgFinding) bool {
	if f.gathered == nil {
		return false
	}
	for _, ea := range f.gathered.ExtraArgs {
		if ea.Source != a.Source {
			continue
		}
		for _, arg := range ea.Args {
			if arg.Key == a.Flag {
				return arg.List
			}
		}
	}
	return false
}
