package upgradecheck

// stored-versions: every stored object at a version the target reads.

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

var storedVersionsCheck = &checkDef{
	ID:    CheckStoredVersions,
	Title: "stored objects the target can read",
	Help: "objects stored at API versions the target cannot read (no-go), manifests kubectl last applied in versions " +
		"it no longer serves (warn): kubent's check, from etcd",
	NoGo:  "objects stored at an API version the target no longer registers (it cannot read them)",
	Warn:  "manifests kubectl last applied in a version the target no longer serves (kubent's check, from etcd)",
	Fix:   "rewrite them at the running version's storage version before the upgrade: kubectl get RESOURCE -A -o json | kubectl replace -f -",
	Needs: []need{needTalosAPI, needControlPlane, needEtcdKeys},
	Judge: factsOnly(judgeStored),
}

func judgeStored(f *facts) Check {
	var c Check
	switch {
	case f.usageErr != nil:
		return unread("etcd's keys could not be read", f.usageErr)
	case f.versions == nil:
		return notChecked(c, "etcd's keys were not read")
	}
	to := f.to.String()
	target, err := apiserverargs.For(to)
	if err != nil {
		return notChecked(c, "no kube-apiserver "+to+" was recorded")
	}
	builtin := map[string]bool{}
	for _, v := range apiserverargs.Versions() {
		if b, err := apiserverargs.For(v); err == nil {
			for _, g := range b.APIGroups {
				builtin[g] = true
			}
		}
	}
	registered := func(apiVersion string) (known, ok bool) {
		g := etcd.GroupOf(apiVersion)
		if !builtin[g] || slices.Contains(target.VersionsCheckedLater, g) {
			return false, true
		}
		return true, slices.Contains(target.GroupVersions, apiVersion)
	}
	v := f.versions
	builtinObjects, custom := 0, 0
	var gone, goneApplied []string
	for _, s := range v.Stored {
		known, ok := registered(s.APIVersion)
		if !known {
			custom += s.Count
			continue
		}
		builtinObjects += s.Count
		if !ok {
			gone = append(gone, fmt.Sprintf("%d %s stored as %s (e.g. %s)", s.Count, termsafe.String(s.Resource), termsafe.String(s.APIVersion), termsafe.String(s.Example)))
		}
	}
	for _, s := range v.Applied {
		if known, ok := registered(s.APIVersion); known && !ok {
			goneApplied = append(goneApplied, fmt.Sprintf("%d %s last applied (kubectl) as %s %s (e.g. %s)", s.Count, termsafe.String(s.Resource), termsafe.String(s.APIVersion), termsafe.String(s.Kind), termsafe.String(s.Example)))
		}
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%d keys read: %d objects of built-in APIs, %d custom resources and others (their versions are their CRDs')", v.Keys, builtinObjects, custom))
	c.Evidence = append(c.Evidence, gone...)
	c.Evidence = append(c.Evidence, goneApplied...)
	if len(v.Encrypted) > 0 {
		var enc []string
		for r, n := range v.Encrypted {
			enc = append(enc, fmt.Sprintf("%s %d", termsafe.String(r), n))
		}
		sort.Strings(enc)
		c.Evidence = append(c.Evidence, "encrypted at rest, not read: "+strings.Join(enc, ", "))
	}
	if v.Unreadable > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d values in no encoding breakglass reads", v.Unreadable))
	}
	switch {
	case len(gone) > 0:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("objects are stored at API versions kube-apiserver %s no longer registers: it cannot read them (%s)", target.Version, strings.Join(firstN(gone, 2), "; "))
		c.Fix = []string{"rewrite them before the upgrade, on the version running now, so that it stores them at its storage version: kubectl get RESOURCE -A -o json | kubectl replace -f - (or a StorageVersionMigration)"}
	case len(goneApplied) > 0:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("manifests applied with kubectl use API versions %s no longer serves: the next kubectl apply of them fails (%s)", target.Version, strings.Join(firstN(goneApplied, 2), "; "))
		c.Fix = []string{"update those manifests to a served version (kubectl convert, or the API's migration guide) before the next apply"}
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("every built-in object is stored at a version kube-apiserver %s registers", target.Version)
	}
	return c
}
