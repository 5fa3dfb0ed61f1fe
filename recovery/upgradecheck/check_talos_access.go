package upgradecheck

// talos-access: the way back into the Talos API when etcd or
// kube-apiserver dies: the talosconfig's client certificate (apid refuses
// it expired, without exactly client auth, or from another CA), endpoints
// that are not the control planes' own addresses (a VIP goes with etcd's
// quorum), and whether a new talosconfig can be made offline (a secrets
// bundle). Read from the talosconfig itself, so that it is judged even
// when apid refuses it.

import (
	"context"
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/talos"
)

var talosAccessCheck = &checkDef{
	ID:    CheckTalosAccess,
	Title: "the Talos API stays reachable",
	Help: "the talosconfig's client certificate (its expiry, the extended key usage apid checks, its CA), its endpoints " +
		"against the control planes' own addresses (a VIP goes away with etcd's quorum), and whether a new talosconfig can be " +
		"made offline (--secrets-bundle); a talosconfig without a client certificate (Omni's) is not a failure",
	NoGo: "apid refuses the client certificate (expired, not yet valid, key usage other than exactly client auth, another CA), " +
		"or the --secrets-bundle named is unreadable or another cluster's",
	Warn: "the client certificate expires within 30 days, an endpoint is a VIP or another address than a control plane's own, " +
		"or no secrets bundle is named",
	Fix:   "make a new talosconfig: talosctl gen config NAME https://CONTROL_PLANE:6443 --with-secrets secrets.yaml --output-types talosconfig -o talosconfig.new (docs/encryption.md, Talos access)",
	Needs: always,
	Judge: factsOnly(judgeTalosAccess),
}

// readTalosAccess reads the talosconfig's findings, with the control
// planes' addresses and machine configs as far as they were read.
func (f *facts) readTalosAccess(ctx context.Context, o *Options) {
	in := talos.AccessInput{Talosconfig: o.Talos.Talosconfig, Context: o.Talos.Context, Endpoints: o.Talos.Endpoints,
		Now: o.now(), SecretsBundle: o.SecretsBundle}
	if f.talosErr == nil {
		for _, n := range controlPlanes(f.nodes) {
			if n.TalosErr == nil {
				in.NodeAddrs = append(in.NodeAddrs, n.Addr)
			}
		}
		var configs [][]byte
		for _, n := range controlPlanes(f.nodes) {
			if n.Config != nil {
				configs = append(configs, n.Config)
			}
		}
		if len(configs) > 0 && len(configs) == len(controlPlanes(f.nodes)) {
			in.MachineConfigs = configs
		}
	}
	f.talosAccess, f.talosAccessErr = talos.CheckAccess(ctx, in)
}

// judgeTalosAccess: the worst of the findings; a finding that could not
// judge makes the check "not checked" unless another is a no-go of what it
// read.
func judgeTalosAccess(f *facts) Check {
	var c Check
	if f.talosAccessErr != nil {
		return unread("the talosconfig could not be read", f.talosAccessErr)
	}
	if f.talosAccess == nil {
		return notChecked(c, "the talosconfig was not read")
	}
	c.Verdict = Go
	var noGo, notRead, warn, good []string
	for _, a := range f.talosAccess {
		line := a.Check + ": " + a.Summary
		c.Evidence = append(c.Evidence, line)
		for _, e := range a.Evidence {
			c.Evidence = append(c.Evidence, "  "+e)
		}
		switch {
		case a.NotChecked:
			notRead = append(notRead, line)
		case a.Verdict == talos.AccessNoGo:
			noGo = append(noGo, line)
		case a.Verdict == talos.AccessWarn:
			warn = append(warn, line)
		default:
			good = append(good, a.Check)
		}
		if a.Verdict != talos.AccessGo {
			c.Fix = appendNew(c.Fix, a.Fix...)
		}
	}
	switch {
	case len(noGo) > 0:
		c.Verdict, c.Summary = NoGo, strings.Join(noGo, "; ")
	case len(notRead) > 0:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "not checked: "+strings.Join(notRead, "; ")
	case len(warn) > 0:
		c.Verdict, c.Summary = Warn, strings.Join(warn, "; ")
	default:
		c.Summary = fmt.Sprintf("%s: the talosconfig keeps the Talos API reachable", strings.Join(good, ", "))
		c.Fix = nil
	}
	return c
}
