package talos

import (
	"context"
	stdx509 "crypto/x509"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sidero "github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// clientCertOpts shape a talosconfig's client certificate.
type clientCertOpts struct {
	notBefore, notAfter time.Time
	eku                 []stdx509.ExtKeyUsage
}

// newBundle is a secrets bundle of its own: another cluster's.
func newBundle(t *testing.T) *secrets.Bundle {
	t.Helper()
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// talosconfigWith writes a talosconfig (context "c") for endpoints whose
// client certificate, signed by signer, is shaped by o, trusting ca.
func talosconfigWith(t *testing.T, signer, ca *sidero.PEMEncodedCertificateAndKey, o clientCertOpts, endpoints ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := talostest.WriteTalosconfig(path, signer, ca, o.notBefore, o.notAfter, o.eku, endpoints...); err != nil {
		t.Fatal(err)
	}
	return path
}

var clientAuth = []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}

// Every command that dials the Talos API, refused for its client
// certificate, says why from the certificate itself and how to get a
// working talosconfig, with exit 3: against the emulator's real gRPC with
// mTLS, an expired certificate, one without client auth, one from another
// CA; a good one still works.
func TestRefusedClientCertificateTold(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := talostest.NewCluster(ctx, talostest.ClusterOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	other := newBundle(t)
	node := c.Nodes[0]
	now := time.Now()
	expiredOn := now.Add(-40 * 24 * time.Hour)
	for _, tc := range []struct {
		name   string
		signer *sidero.PEMEncodedCertificateAndKey
		o      clientCertOpts
		says   string
	}{
		{"expired", c.OSCA(), clientCertOpts{now.Add(-400 * 24 * time.Hour), expiredOn, clientAuth},
			`the talosconfig's client certificate expired on ` + regexp.QuoteMeta(expiredOn.UTC().Format("2006-01-02")) + ` \d\d:\d\d UTC \(40 days ago\)`},
		{"server auth only", c.OSCA(), clientCertOpts{now.Add(-time.Hour), now.Add(time.Hour), []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}},
			`has extended key usage server auth; apid accepts only exactly client auth`},
		{"another CA", other.Certs.OS, clientCertOpts{now.Add(-time.Hour), now.Add(time.Hour), clientAuth},
			`is signed by \(talos\) key ID [0-9a-f]{16}, not by the talosconfig's CA \(\(talos\) key ID [0-9a-f]{16}\)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := talosconfigWith(t, tc.signer, c.OSCA(), tc.o, node.Addr)
			cl := connectTo(t, path, node.Addr, node.IP, 5*time.Second, nil)
			_, err := cl.Version(ctx, node.IP)
			t.Logf("%v\nhints: %q", err, failure.Hints(err))
			if got := failure.Code(err); got != int(failure.Credentials) {
				t.Fatalf("exit %d, want %d (credentials): %v", got, failure.Credentials, err)
			}
			if !regexp.MustCompile(tc.says).MatchString(err.Error()) || !strings.Contains(err.Error(), "endpoint "+node.Addr) {
				t.Errorf("error %q does not say %q and name endpoint %s", err, tc.says, node.Addr)
			}
			hints := strings.Join(failure.Hints(err), "\n")
			if !strings.Contains(hints, "talosctl gen config c https://"+node.IP+":6443 --with-secrets secrets.yaml --output-types talosconfig -o talosconfig.new") {
				t.Errorf("hints %q do not say how to make a talosconfig offline", hints)
			}
		})
	}
	good := talosconfigWith(t, c.OSCA(), c.OSCA(), clientCertOpts{now.Add(-time.Hour), now.Add(time.Hour), clientAuth}, node.Addr)
	if _, err := connectTo(t, good, node.Addr, node.IP, 5*time.Second, nil).Version(ctx, node.IP); err != nil {
		t.Fatalf("a good certificate made the same way: %v", err)
	}
}

func TestCheckAccess(t *testing.T) {
	bundle, other := newBundle(t), newBundle(t)
	dir := t.TempDir()
	save := func(name string, b *secrets.Bundle) string {
		raw, err := yaml.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ours, theirs := save("secrets.yaml", bundle), save("other.yaml", other)
	now := time.Now()
	nodes := []string{"10.5.0.2", "10.5.0.3", "10.5.0.4"}
	vipConfig := []byte("version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip:\n          ip: 10.5.0.10\n      - interface: eth1\n        vlans:\n          - vlanId: 4\n            vip: {ip: 10.6.0.10}\ncluster: {}\n---\napiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: 10.7.0.10\nlink: eth2\n")
	valid := clientCertOpts{now.Add(-time.Hour), now.Add(200 * 24 * time.Hour), clientAuth}
	type want struct {
		verdict AccessVerdict
		says    string
	}
	for _, tc := range []struct {
		name                       string
		cert                       clientCertOpts
		signer                     *sidero.PEMEncodedCertificateAndKey
		omni                       bool
		endpoints                  []string
		nodes                      []string
		configs                    [][]byte
		bundle                     string
		cert_, endpoints_, bundle_ want
	}{
		{name: "all good", cert: valid, endpoints: nodes, nodes: nodes, configs: [][]byte{vipConfig}, bundle: ours,
			cert_:      want{AccessGo, "valid until"},
			endpoints_: want{AccessGo, "every endpoint is a control plane's own address"},
			bundle_:    want{AccessGo, "talosctl gen config c https://10.5.0.2:6443 --with-secrets " + ours + " --output-types talosconfig -o talosconfig.new, then talosctl --talosconfig talosconfig.new config endpoint 10.5.0.2"}},
		{name: "expires in ten days, a VIP endpoint", cert: clientCertOpts{now.Add(-355 * 24 * time.Hour), now.Add(10*24*time.Hour + time.Hour), clientAuth},
			endpoints: []string{"10.5.0.10"}, nodes: nodes, configs: [][]byte{vipConfig},
			cert_:      want{AccessWarn, "expires on .* in 10 days"},
			endpoints_: want{AccessWarn, "endpoint 10.5.0.10:50000 is not a control plane's own address: .* use the nodes' addresses 10.5.0.2, 10.5.0.3, 10.5.0.4"},
			bundle_:    want{AccessWarn, "no secrets bundle named"}},
		{name: "expired, a VLAN's VIP", cert: clientCertOpts{now.Add(-400 * 24 * time.Hour), now.Add(-35 * 24 * time.Hour), clientAuth},
			endpoints: []string{"10.6.0.10", "10.5.0.2"}, nodes: nodes, configs: [][]byte{vipConfig}, bundle: theirs,
			cert_:      want{AccessNoGo, "apid refuses .* expired on .* \\(35 days ago\\)"},
			endpoints_: want{AccessWarn, "endpoint 10.6.0.10:50000 is not"},
			bundle_:    want{AccessNoGo, "is another cluster's"}},
		{name: "client and server auth, a Layer2VIPConfig endpoint", cert: clientCertOpts{now.Add(-time.Hour), now.Add(300 * 24 * time.Hour), []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth, stdx509.ExtKeyUsageClientAuth}},
			endpoints: []string{"10.7.0.10"}, nodes: nodes, configs: [][]byte{vipConfig},
			cert_:      want{AccessNoGo, "extended key usage server auth, client auth; apid accepts only exactly client auth"},
			endpoints_: want{AccessWarn, "10.7.0.10"},
			bundle_:    want{AccessWarn, "no secrets bundle"}},
		{name: "another cluster's CA, a name", cert: valid, signer: other.Certs.OS, endpoints: []string{"talos.example.com"}, nodes: nodes,
			cert_:      want{AccessNoGo, "not by the talosconfig's CA"},
			endpoints_: want{AccessWarn, "is a name"},
			bundle_:    want{AccessWarn, "no secrets bundle"}},
		{name: "Omni", omni: true, endpoints: []string{"https://omni.example.com"}, nodes: nodes, bundle: ours,
			cert_:      want{AccessGo, "no client certificate"},
			endpoints_: want{AccessWarn, "omni.example.com:443"},
			bundle_:    want{AccessGo, "omnictl talosconfig"}},
		{name: "node addresses not read", cert: valid, endpoints: nodes,
			cert_:      want{AccessGo, "valid until"},
			endpoints_: want{AccessNoGo, "not read"},
			bundle_:    want{AccessWarn, "no secrets bundle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signer := tc.signer
			if signer == nil {
				signer = bundle.Certs.OS
			}
			var path string
			if tc.omni {
				cfg := clientconfig.NewConfig("c", tc.endpoints, bundle.Certs.OS.Crt, &sidero.PEMEncodedCertificateAndKey{})
				cfg.Contexts["c"].Auth.SideroV1 = &clientconfig.SideroV1{Identity: "someone@example.com"}
				path = filepath.Join(t.TempDir(), "talosconfig")
				if err := cfg.Save(path); err != nil {
					t.Fatal(err)
				}
			} else {
				path = talosconfigWith(t, signer, bundle.Certs.OS, tc.cert, tc.endpoints...)
			}
			fs, err := CheckAccess(t.Context(), AccessInput{Talosconfig: path, Now: now, NodeAddrs: tc.nodes, MachineConfigs: tc.configs, SecretsBundle: tc.bundle})
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range []want{tc.cert_, tc.endpoints_, tc.bundle_} {
				f := fs[i]
				text := f.Summary + "\n" + strings.Join(f.Evidence, "\n") + "\n" + strings.Join(f.Fix, "\n")
				if f.Verdict != w.verdict || !regexp.MustCompile(w.says).MatchString(text) {
					t.Errorf("%s: %s: %s\nwant %s: %s", f.Check, f.Verdict, text, w.verdict, w.says)
				}
				if (f.Verdict == AccessGo) != (len(f.Fix) == 0) && f.Check != "new-talosconfig" {
					t.Errorf("%s: %s with fix %q", f.Check, f.Verdict, f.Fix)
				}
			}
		})
	}
}

func TestVIPs(t *testing.T) {
	got, err := VIPs([]byte("version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip: {ip: 10.0.0.5}\n        vlans: [{vlanId: 2, vip: {ip: 10.0.2.5}}, {vlanId: 3}]\n      - interface: eth1\n---\napiVersion: v1alpha1\nkind: HCloudVIPConfig\nname: 10.0.9.9\nlink: eth0\napiToken: x\n---\napiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: 10.0.0.5\nlink: eth0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "10.0.0.5,10.0.2.5,10.0.9.9" {
		t.Errorf("VIPs = %q", got)
	}
}
