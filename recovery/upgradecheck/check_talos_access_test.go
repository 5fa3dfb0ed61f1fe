package upgradecheck

import (
	stdx509 "crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sidero "github.com/siderolabs/crypto/x509"

	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// gateTalosconfig writes a talosconfig (context "c") for endpoints whose
// client certificate, signed by signer, is valid from notBefore to
// notAfter with the extended key usage eku, trusting ca.
func gateTalosconfig(t *testing.T, signer, ca *sidero.PEMEncodedCertificateAndKey, notBefore, notAfter time.Time, eku []stdx509.ExtKeyUsage, endpoints ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := talostest.WriteTalosconfig(path, signer, ca, notBefore, notAfter, eku, endpoints...); err != nil {
		t.Fatal(err)
	}
	return path
}

// talos-access judges the talosconfig itself: an expired certificate, one
// apid refuses for its key usage, a VIP endpoint, one expiring in days
// (a warning, a no-go with --strict); and says "not checked", never go,
// for what it could not read, even with a good certificate.
func TestJudgeTalosAccess(t *testing.T) {
	bundle, other := newBundle(t), newBundle(t)
	now := time.Now()
	clientAuth := []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}
	vip := []byte("version: v1alpha1\nmachine:\n  type: controlplane\n  network:\n    interfaces:\n      - interface: eth0\n        vip:\n          ip: 10.5.0.10\ncluster: {}\n")
	cps := func() []*nodeFacts {
		var out []*nodeFacts
		for _, a := range []string{"10.5.0.2", "10.5.0.3", "10.5.0.4"} {
			out = append(out, &nodeFacts{Addr: a, ControlPlane: true, Config: vip, Found: foundByContext})
		}
		return out
	}
	good := func(endpoints ...string) string {
		return gateTalosconfig(t, bundle.Certs.OS, bundle.Certs.OS, now.Add(-time.Hour), now.Add(300*24*time.Hour), clientAuth, endpoints...)
	}
	bundlePath := saveBundle(t, bundle)
	for _, tc := range []struct {
		name        string
		bundle      string
		talosconfig string
		nodes       []*nodeFacts
		talosErr    error
		want        Verdict
		notChecked  bool
		says        []string
		strictNoGo  bool
	}{
		{name: "good, the nodes' own addresses", talosconfig: good("10.5.0.2", "10.5.0.3"), nodes: cps(), want: Warn,
			says: []string{"new-talosconfig: no secrets bundle named"}},
		{name: "good, a secrets bundle named", talosconfig: good("10.5.0.2", "10.5.0.3"), nodes: cps(), bundle: bundlePath, want: Go,
			says: []string{"client-certificate, endpoints, new-talosconfig: the talosconfig keeps the Talos API reachable", "valid until"}},
		{name: "expired", talosconfig: gateTalosconfig(t, bundle.Certs.OS, bundle.Certs.OS, now.Add(-400*24*time.Hour), now.Add(-3*24*time.Hour), clientAuth, "10.5.0.2"),
			nodes: cps(), want: NoGo, says: []string{"apid refuses the talosconfig's client certificate", "expired on", "talosctl gen config"}},
		{name: "expired, and apid refused it (the Talos API not reached)", talosconfig: gateTalosconfig(t, bundle.Certs.OS, bundle.Certs.OS, now.Add(-400*24*time.Hour), now.Add(-3*24*time.Hour), clientAuth, "10.5.0.2"),
			talosErr: errors.New("client certificate refused"), want: NoGo, says: []string{"expired on"}},
		{name: "server auth only", talosconfig: gateTalosconfig(t, bundle.Certs.OS, bundle.Certs.OS, now.Add(-time.Hour), now.Add(300*24*time.Hour), []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}, "10.5.0.2"),
			nodes: cps(), want: NoGo, says: []string{"apid accepts only exactly client auth"}},
		{name: "another cluster's CA", talosconfig: gateTalosconfig(t, other.Certs.OS, bundle.Certs.OS, now.Add(-time.Hour), now.Add(300*24*time.Hour), clientAuth, "10.5.0.2"),
			nodes: cps(), want: NoGo, says: []string{"not by the talosconfig's CA"}},
		{name: "expires in 5 days", talosconfig: gateTalosconfig(t, bundle.Certs.OS, bundle.Certs.OS, now.Add(-360*24*time.Hour), now.Add(5*24*time.Hour+time.Hour), clientAuth, "10.5.0.2"),
			nodes: cps(), want: Warn, strictNoGo: true, says: []string{"expires on", "in 5 days"}},
		{name: "a VIP endpoint", talosconfig: good("10.5.0.10"), nodes: cps(), want: Warn, strictNoGo: true,
			says: []string{"endpoint 10.5.0.10:50000 is not a control plane's own address", "10.5.0.2, 10.5.0.3, 10.5.0.4", "etcd election", "config endpoint 10.5.0.2 10.5.0.3 10.5.0.4"}},
		{name: "good, but the Talos API not reached", talosconfig: good("10.5.0.2"), talosErr: errors.New("unreachable"), want: NoGo, notChecked: true,
			says: []string{"not checked: endpoints: the control planes' own addresses were not read"}},
		{name: "no talosconfig", talosconfig: filepath.Join(t.TempDir(), "missing"), nodes: cps(), want: NoGo, notChecked: true, says: []string{"the talosconfig could not be read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &facts{nodes: tc.nodes, talosErr: tc.talosErr}
			o := &Options{Talos: talos.Options{Talosconfig: tc.talosconfig}, SecretsBundle: tc.bundle}
			f.readTalosAccess(t.Context(), o)
			c := talosAccessCheck.judge(f, o)
			all := c.Summary + "\n" + strings.Join(c.Evidence, "\n") + "\n" + strings.Join(c.Fix, "\n")
			if c.Verdict != tc.want || c.NotChecked != tc.notChecked {
				t.Errorf("%s (not checked %v), want %s (%v):\n%s", c.Verdict, c.NotChecked, tc.want, tc.notChecked, all)
			}
			for _, s := range tc.says {
				if !strings.Contains(all, s) {
					t.Errorf("does not say %q:\n%s", s, all)
				}
			}
			r := &Report{Checks: []Check{c}}
			r.finish(true)
			if tc.strictNoGo && r.Verdict != NoGo {
				t.Errorf("--strict: %s, want no-go", r.Verdict)
			}
		})
	}
}
