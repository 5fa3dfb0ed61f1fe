package talos

// Access to the Talos API when etcd or kube-apiserver is gone: the
// talosconfig's client certificate (it lasts a year), endpoints that depend
// on etcd (a VIP: machined holds it through an etcd election, operator/
// vip.go, so it goes when etcd's quorum does), and whether a new
// talosconfig can be made offline. Findings a gate judges.

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// AccessVerdict is a finding's verdict, as the gate's.
type AccessVerdict string

// The verdicts.
const (
	AccessGo   AccessVerdict = "go"
	AccessWarn AccessVerdict = "warn"
	AccessNoGo AccessVerdict = "no-go"
)

// AccessFinding is one access check's verdict, what decided it and the fix.
type AccessFinding struct {
	Check    string        `json:"check"` // client-certificate, endpoints, new-talosconfig
	Verdict  AccessVerdict `json:"verdict"`
	Summary  string        `json:"summary"`
	Evidence []string      `json:"evidence,omitempty"`
	Fix      []string      `json:"fix,omitempty"`
	// NotChecked: what it needs was not read (a no-go: nothing was checked).
	NotChecked bool `json:"notChecked,omitempty"`
}

// AccessInput is what the access checks read.
type AccessInput struct {
	Talosconfig, Context string   // as Options
	Endpoints            []string // override the context's, as -e does
	Now                  time.Time
	// NodeAddrs are the control planes' own addresses as the cluster tells
	// them (nil: not read).
	NodeAddrs []string
	// MachineConfigs are the control planes' machine configs, for their
	// VIPs (nil: not read).
	MachineConfigs [][]byte
	// SecretsBundle is the path of a secrets bundle the operator names ("":
	// none).
	SecretsBundle string
}

// CheckAccess reads the talosconfig and judges it: its client certificate,
// its endpoints, and whether a new one can be made offline. It fails only
// when the talosconfig, or a machine config given, cannot be read.
func CheckAccess(ctx context.Context, in AccessInput) ([]AccessFinding, error) {
	cfg, name, err := readTalosconfig(ctx, in.Talosconfig, in.Context)
	if err != nil {
		return nil, err
	}
	tctx := cfg.Contexts[name]
	if in.Now.IsZero() {
		in.Now = time.Now()
	}
	endpoints := tctx.Endpoints
	if len(in.Endpoints) > 0 {
		endpoints = in.Endpoints
	}
	var vips []string
	for _, mc := range in.MachineConfigs {
		v, err := VIPs(mc)
		if err != nil {
			return nil, err
		}
		vips = appendNew(vips, v...)
	}
	cert, certErr := readClientCert(tctx)
	endpoint := firstOf(in.NodeAddrs, endpoints)
	return []AccessFinding{
		judgeCertificate(cert, certErr, in.Now, name, endpoint),
		judgeEndpoints(endpointAddrs(endpoints), in.NodeAddrs, vips, in.MachineConfigs != nil,
			fmt.Sprintf("--talosconfig %s --context %s", in.Talosconfig, name)),
		judgeNewTalosconfig(cert, in.SecretsBundle, name, endpoint),
	}, nil
}

func firstOf(lists ...[]string) string {
	for _, l := range lists {
		if len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// judgeCertificate: no-go when apid would refuse the client certificate
// (expired, not yet valid, its key usage, another CA), warn when it ends
// within ExpiryWarning, go otherwise; a context without one (Omni's signs
// its requests) is go.
func judgeCertificate(c clientCert, readErr error, now time.Time, contextName, endpoint string) AccessFinding {
	f := AccessFinding{Check: "client-certificate"}
	switch {
	case readErr != nil:
		f.Verdict, f.Summary = AccessNoGo, "the talosconfig's certificates cannot be read: "+readErr.Error()
		f.Fix = newTalosconfigHints(contextName, endpoint)
		return f
	case c.crt == nil:
		f.Verdict, f.Summary = AccessGo, "no client certificate: the talosconfig signs its requests (Omni), nothing here expires"
		return f
	}
	f.Evidence = []string{fmt.Sprintf("client certificate %q%s, issued by %q, valid %s to %s, extended key usage %s",
		c.crt.Subject.CommonName, orgOf(c.crt.Subject.Organization), c.crt.Issuer.CommonName, day(c.crt.NotBefore), day(c.crt.NotAfter), ekuNames(c.crt))}
	if rs := c.refusals(now); len(rs) > 0 {
		f.Verdict = AccessNoGo
		for _, r := range rs {
			f.Evidence = append(f.Evidence, r.what)
		}
		f.Summary = "apid refuses the talosconfig's client certificate: " + rs[0].what
		f.Fix = newTalosconfigHints(contextName, endpoint)
		return f
	}
	left := c.crt.NotAfter.Sub(now)
	if left < ExpiryWarning {
		f.Verdict = AccessWarn
		f.Summary = fmt.Sprintf("the talosconfig's client certificate expires on %s, in %s", day(c.crt.NotAfter), ago(left))
		f.Fix = newTalosconfigHints(contextName, endpoint)
		return f
	}
	f.Verdict = AccessGo
	f.Summary = fmt.Sprintf("the client certificate is valid until %s (%s), client auth, signed by the talosconfig's CA", day(c.crt.NotAfter), ago(left))
	return f
}

// judgeEndpoints: warn for each endpoint that is not a control plane's own
// address (a VIP of the machine configs above all: it goes with etcd's
// quorum; a load balancer or a name may too), with those addresses to use
// instead; go when every endpoint is one. Without the addresses nothing is
// judged.
func judgeEndpoints(endpoints, nodeAddrs, vips []string, configsRead bool, flags string) AccessFinding {
	f := AccessFinding{Check: "endpoints"}
	if len(nodeAddrs) == 0 {
		f.Verdict, f.NotChecked = AccessNoGo, true
		f.Summary = "the control planes' own addresses were not read: the endpoints " + strings.Join(endpoints, ", ") + " cannot be judged"
		f.Fix = []string{"let breakglass read the control planes through the Talos API (an os:admin talosconfig, -n naming a control plane), then run the check again"}
		return f
	}
	var away []string
	for _, ep := range endpoints {
		host := hostOf(ep)
		switch {
		case slices.Contains(nodeAddrs, host):
			f.Evidence = append(f.Evidence, fmt.Sprintf("endpoint %s is a control plane's own address", ep))
		case slices.Contains(vips, host):
			away = append(away, ep)
			f.Evidence = append(f.Evidence, fmt.Sprintf("endpoint %s is the control planes' VIP (machine config: machine.network.interfaces[].vip, a VLAN's vip, or a Layer2VIPConfig): Talos holds it through an etcd election, so it goes away when etcd loses its quorum", ep))
		case net.ParseIP(host) == nil:
			away = append(away, ep)
			f.Evidence = append(f.Evidence, fmt.Sprintf("endpoint %s is a name, not a control plane's address (breakglass does not resolve it): if it names a VIP or a load balancer it can go away with etcd or kube-apiserver", ep))
		default:
			away = append(away, ep)
			f.Evidence = append(f.Evidence, fmt.Sprintf("endpoint %s is none of the control planes' own addresses (%s): a VIP, a load balancer or another machine, which can go away with etcd", ep, strings.Join(nodeAddrs, ", ")))
		}
	}
	if !configsRead {
		f.Evidence = append(f.Evidence, "the machine configs were not read: their VIPs are not known")
	}
	if len(away) == 0 {
		f.Verdict, f.Summary = AccessGo, "every endpoint is a control plane's own address"
		return f
	}
	f.Verdict = AccessWarn
	f.Summary = fmt.Sprintf("endpoint %s is not a control plane's own address: it may be gone exactly when etcd is; use the nodes' addresses %s", strings.Join(away, ", "), strings.Join(nodeAddrs, ", "))
	f.Fix = []string{
		fmt.Sprintf("talosctl %s config endpoint %s", flags, strings.Join(nodeAddrs, " ")),
		fmt.Sprintf("or, for one command: -e %s", strings.Join(nodeAddrs, ",")),
	}
	return f
}

// judgeNewTalosconfig: go when the named secrets bundle is this cluster's
// (its OS CA is the talosconfig's CA) and holds the CA key, with the
// talosctl line that makes a talosconfig from it offline; warn when none is
// named; no-go when the one named is not this cluster's or not readable.
// Omni's talosconfig (no client certificate) comes from Omni.
func judgeNewTalosconfig(c clientCert, bundlePath, contextName, endpoint string) AccessFinding {
	f := AccessFinding{Check: "new-talosconfig"}
	switch {
	case c.crt == nil:
		f.Verdict, f.Summary = AccessGo, "an Omni talosconfig (no client certificate): a new one comes from Omni (omnictl talosconfig)"
		return f
	case bundlePath == "":
		f.Verdict = AccessWarn
		f.Summary = "no secrets bundle named: a new talosconfig then needs a working one or a control plane's machine config"
		f.Fix = []string{"keep this cluster's secrets bundle offline where the on-call engineer can reach it; make one from a control plane's machine config: talosctl gen secrets --from-controlplane-config controlplane.yaml -o secrets.yaml"}
		return f
	}
	bundle, err := secrets.LoadBundle(bundlePath)
	if err != nil {
		f.Verdict, f.Summary = AccessNoGo, fmt.Sprintf("the secrets bundle %s cannot be read: %v", bundlePath, firstLine(err.Error()))
		return f
	}
	if bundle.Certs == nil || bundle.Certs.OS == nil || len(bundle.Certs.OS.Key) == 0 {
		f.Verdict, f.Summary = AccessNoGo, fmt.Sprintf("the secrets bundle %s holds no OS CA key: no talosconfig can be made from it", bundlePath)
		return f
	}
	bundleCAs, err := certsOf(base64.StdEncoding.EncodeToString(bundle.Certs.OS.Crt))
	if err != nil || len(bundleCAs) == 0 {
		f.Verdict, f.Summary = AccessNoGo, fmt.Sprintf("the secrets bundle %s: its OS CA cannot be read", bundlePath)
		return f
	}
	if !slices.ContainsFunc(c.cas, func(ca *x509.Certificate) bool { return bytes.Equal(ca.Raw, bundleCAs[0].Raw) }) {
		f.Verdict = AccessNoGo
		f.Summary = fmt.Sprintf("the secrets bundle %s is another cluster's: its OS CA %q is not the talosconfig's CA", bundlePath, bundleCAs[0].Subject.CommonName)
		return f
	}
	f.Verdict = AccessGo
	f.Summary = "a new os:admin talosconfig can be made offline from " + bundlePath + " (its OS CA is this cluster's)"
	f.Fix = []string{genTalosconfig(contextName, endpoint, bundlePath)}
	return f
}

// VIPs are the virtual IPs a machine config declares: machine.network.
// interfaces[].vip.ip and interfaces[].vlans[].vip.ip of the v1alpha1
// document, and the names of Layer2VIPConfig and HCloudVIPConfig
// documents (Talos 1.12 and later).
func VIPs(machineConfig []byte) ([]string, error) {
	var out []string
	dec := yaml.NewDecoder(bytes.NewReader(machineConfig))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("machine config: %w", err)
		}
		doc := &n
		if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
			doc = doc.Content[0]
		}
		switch scalarOf(doc, "kind") {
		case "Layer2VIPConfig", "HCloudVIPConfig":
			out = appendNew(out, scalarOf(doc, "name"))
			continue
		}
		ifaces := yamlnode.Value(yamlnode.Value(yamlnode.Value(doc, "machine"), "network"), "interfaces")
		for _, iface := range seqOf(ifaces) {
			out = appendNew(out, scalarOf(yamlnode.Value(iface, "vip"), "ip"))
			for _, vlan := range seqOf(yamlnode.Value(iface, "vlans")) {
				out = appendNew(out, scalarOf(yamlnode.Value(vlan, "vip"), "ip"))
			}
		}
		out = slices.DeleteFunc(out, func(s string) bool { return s == "" })
	}
}

func seqOf(n *yaml.Node) []*yaml.Node {
	n = yamlnode.Resolve(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func scalarOf(m *yaml.Node, key string) string {
	v := yamlnode.Resolve(yamlnode.Value(yamlnode.Resolve(m), key))
	if v == nil || v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return ""
	}
	return v.Value
}
