package talos

// The talosconfig's client certificate, read locally: what apid will say
// of it, in words, before or after it says it as a bare TLS alert.
//
// apid (internal/app/apid, Talos v1.13.8) verifies the client certificate
// against the OS CA (and any machine.acceptedCAs), and then requires its
// extended key usage to be exactly client auth (verifyExtKeyUsage): always
// since Talos 1.12, and from 1.3 to 1.11 when machine.features.
// apidCheckExtKeyUsage is on (the default of configs generated for 1.3 and
// later). Go's TLS server then sends the alert "expired certificate",
// "unknown certificate authority" or "bad certificate".

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

// ExpiryWarning is how close to its end a client certificate is warned of.
const ExpiryWarning = 30 * 24 * time.Hour

// clientCert is a talosconfig context's client certificate and the CA
// certificates the context trusts.
type clientCert struct {
	crt *x509.Certificate   // nil: the context has none (Omni signs requests instead)
	cas []*x509.Certificate // the context's ca
}

// readClientCert reads the context's client certificate and CA.
func readClientCert(tctx *clientconfig.Context) (clientCert, error) {
	var c clientCert
	if tctx == nil {
		return c, errors.New("no talosconfig context")
	}
	cas, err := certsOf(tctx.CA)
	if err != nil {
		return c, fmt.Errorf("its ca: %w", err)
	}
	c.cas = cas
	if tctx.Crt == "" {
		return c, nil
	}
	crts, err := certsOf(tctx.Crt)
	if err != nil || len(crts) == 0 {
		return c, fmt.Errorf("its client certificate (crt) cannot be read: %v", err)
	}
	c.crt = crts[0]
	return c, nil
}

// certsOf reads the certificates of a talosconfig field (base64 of PEM).
func certsOf(b64 string) ([]*x509.Certificate, error) {
	if b64 == "" {
		return nil, nil
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("not base64")
	}
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, raw = pem.Decode(raw)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		crt, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, crt)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// certRefusal is one reason apid refuses the certificate.
type certRefusal struct {
	what string // for an operator
	kind string // expired, not-yet-valid, key-usage, unknown-ca
}

// refusals are the reasons apid refuses the client certificate at now,
// read locally; none when there is no certificate.
func (c clientCert) refusals(now time.Time) []certRefusal {
	if c.crt == nil {
		return nil
	}
	var out []certRefusal
	crt := c.crt
	switch {
	case now.After(crt.NotAfter):
		out = append(out, certRefusal{fmt.Sprintf("the talosconfig's client certificate expired on %s (%s ago)", day(crt.NotAfter), ago(now.Sub(crt.NotAfter))), "expired"})
	case now.Before(crt.NotBefore):
		out = append(out, certRefusal{fmt.Sprintf("the talosconfig's client certificate is not valid before %s: this machine's clock, or the clock of whoever made it, is off", crt.NotBefore.UTC().Format(time.RFC3339)), "not-yet-valid"})
	}
	if !slices.Equal(crt.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(crt.UnknownExtKeyUsage) > 0 {
		out = append(out, certRefusal{fmt.Sprintf("the talosconfig's client certificate has extended key usage %s; apid accepts only exactly client auth (always since Talos 1.12; from 1.3 with machine.features.apidCheckExtKeyUsage, on by default)", ekuNames(crt)), "key-usage"})
	}
	if len(c.cas) > 0 && !c.signedByCA() {
		out = append(out, certRefusal{fmt.Sprintf("the talosconfig's client certificate is signed by %s, not by the talosconfig's CA (%s): it is another cluster's, or from before a CA rotation (the nodes accept it only if machine.acceptedCAs lists its CA)", nameOf(crt.Issuer, crt.AuthorityKeyId), nameOf(c.cas[0].Subject, c.cas[0].SubjectKeyId)), "unknown-ca"})
	}
	return out
}

// signedByCA: one of the context's CA certificates signed it (its dates
// and usage aside: those are told on their own).
func (c clientCert) signedByCA() bool {
	return slices.ContainsFunc(c.cas, func(ca *x509.Certificate) bool { return c.crt.CheckSignatureFrom(ca) == nil })
}

// nameOf names a CA by its subject and key ID: Talos's OS CAs all have
// the subject O=talos.
func nameOf(n pkix.Name, keyID []byte) string {
	name := strings.TrimSpace(n.CommonName + orgOf(n.Organization))
	if len(keyID) > 0 {
		name += fmt.Sprintf(" key ID %x", keyID[:min(len(keyID), 8)])
	}
	return strings.TrimSpace(name)
}

func orgOf(org []string) string {
	if len(org) == 0 {
		return ""
	}
	return " (" + strings.Join(org, ", ") + ")"
}

// ekuNames are the certificate's extended key usages as TLS names them.
func ekuNames(crt *x509.Certificate) string {
	var names []string
	for _, u := range crt.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageClientAuth:
			names = append(names, "client auth")
		case x509.ExtKeyUsageServerAuth:
			names = append(names, "server auth")
		case x509.ExtKeyUsageAny:
			names = append(names, "any")
		default:
			names = append(names, fmt.Sprintf("usage %d", u))
		}
	}
	for _, oid := range crt.UnknownExtKeyUsage {
		names = append(names, oid.String())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// ago is a duration in days, or hours under two days.
func ago(d time.Duration) string {
	if d < 48*time.Hour {
		return fmt.Sprintf("%d hours", int(d.Hours()))
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// newTalosconfigHints are the ways to a working talosconfig when the
// certificate is refused, the offline one first.
func newTalosconfigHints(contextName, endpoint string) []string {
	return []string{
		"make a new talosconfig offline from this cluster's secrets bundle: " + genTalosconfig(contextName, endpoint, "secrets.yaml"),
		"no secrets bundle? make one from a control plane's machine config (it holds the OS CA key): talosctl gen secrets --from-controlplane-config controlplane.yaml -o secrets.yaml",
		"with Omni: omnictl talosconfig; with another working admin talosconfig: talosctl --talosconfig WORKING config new --roles os:admin talosconfig.new",
	}
}

// genTalosconfig is the talosctl line that makes an os:admin talosconfig
// (one year) for context name from a secrets bundle, offline; its
// endpoints are set apart (talosctl config endpoint).
func genTalosconfig(name, endpoint, bundle string) string {
	if name == "" {
		name = "CLUSTER"
	}
	host := hostOf(endpoint)
	if host == "" {
		host = "CONTROL_PLANE_IP"
	}
	return fmt.Sprintf("talosctl gen config %s https://%s --with-secrets %s --output-types talosconfig -o talosconfig.new, then talosctl --talosconfig talosconfig.new config endpoint %s", name, net.JoinHostPort(host, "6443"), bundle, host)
}
