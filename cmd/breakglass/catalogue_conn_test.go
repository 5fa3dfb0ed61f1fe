package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// Connection failures (issue 13): Talos API endpoints on loopback that fail
// every connection in the same way, started once for the test binary so
// that the catalogue's cases can name their addresses. Their talosconfig
// (trusting their CA, with a client certificate it signed) is the case's
// file "tc".
var broken, brokenTalosconfig = startBrokenEndpoints()

func startBrokenEndpoints() (*talostest.BrokenEndpoints, string) {
	b, err := talostest.NewBrokenEndpoints("127.0.0.1")
	if err != nil {
		panic(err)
	}
	tc, err := b.Talosconfig.Bytes()
	if err != nil {
		panic(err)
	}
	return b, string(tc)
}

// connCase is a catalogue case through the broken endpoint ep.
func connCase(cmd, ep, args string, code int, msg, hint string) catCase {
	class := "node"
	if code == 3 {
		class = "talosconfig"
	}
	return catCase{cmd: cmd, class: class, args: fmt.Sprintf("--connect-timeout 1s -e %s -n 127.0.0.1 %s", ep, args),
		files: map[string]string{"tc": brokenTalosconfig}, env: map[string]string{"TALOSCONFIG": "$DIR/tc"},
		code: code, msg: msg, hint: hint}
}

// onStdout expects the case's message in its report, on stdout.
func onStdout(c catCase) catCase {
	c.out, c.msg = c.msg, ""
	return c
}

func init() {
	const (
		mismatch    = `certificate mismatch: .*CA mismatch`
		refused     = `unreachable: endpoint 127\.0\.0\.1:\d+ refused the connection: nothing listens there`
		silent      = `unreachable: endpoint 127\.0\.0\.1:\d+ accepted TCP but did not answer TLS or gRPC within 1s`
		sameContext = `talosctl --talosconfig .*/tc --context broken -e 127\.0\.0\.1:\d+ -n 127\.0\.0\.1 version`
	)
	catalogue = append(catalogue,
		connCase("admission status", broken.Silent, "admission status", 4, silent, `--connect-timeout 30s`),
		connCase("admission status", broken.Closed, "admission status", 4, refused, `the Talos API listens on 50000`),
		connCase("admission status", broken.CloseOnAccept, "admission status", 4, `closed the connection without a TLS answer`, `is the Talos API \(apid, port 50000\)`),
		connCase("admission status", broken.CloseAfterTLS, "admission status", 3, `closed the connection after the TLS handshake, before its first answer .*most likely it refused the talosconfig's client certificate, a CA mismatch`, sameContext),
		connCase("admission status", broken.RefuseCertTLS12, "admission status", 3, `certificate mismatch: .*refused the talosconfig's client certificate \(remote error: tls: .*\): a CA mismatch`, `talosctl config new`),
		connCase("admission status", broken.RefuseCertTLS13, "admission status", 3, mismatch, sameContext),
		connCase("admission status", broken.ForeignServerCert, "admission status", 3, `certificate is not signed by the talosconfig's CA: a CA mismatch.*x509: certificate signed by unknown authority`, sameContext),
		connCase("apiserver wait", broken.Silent, "apiserver wait --timeout 30s", 4, silent, `--connect-timeout`),
		connCase("apiserver wait", broken.ForeignServerCert, "apiserver wait --timeout 30s", 3, mismatch, sameContext),
		connCase("admission disable", broken.Silent, "admission disable --dry-run", 4, silent, `--connect-timeout`),
		connCase("admission disable", broken.RefuseCertTLS13, "admission disable --dry-run --yes", 3, mismatch, `talosctl config new`),
		connCase("recover", broken.Closed, "recover --dry-run", 4, refused, `talosctl .*version`),
		connCase("recover", broken.CloseAfterTLS, "recover --dry-run", 3, mismatch, sameContext),
		// diagnose cannot tell (23) without the nodes, and says why in its report
		onStdout(connCase("diagnose", broken.Silent, "diagnose --no-etcd", 23, silent, "-")),
		onStdout(connCase("diagnose", broken.RefuseCertTLS12, "diagnose --no-etcd", 23, mismatch, "-")),

		// an endpoint that answers, a node it cannot reach: both named
		catCase{cmd: "admission status", class: "node", args: "-n 10.9.9.9 admission status", code: 4,
			msg: `node 10\.9\.9\.9: .*unreachable: endpoint 127\.0\.0\.\d+:\d+ answers, but could not reach node 10\.9\.9\.9`, hint: `talosctl -n 10\.9\.9\.9 version \(through that endpoint: -e 127\.0\.0\.\d+:\d+\)`},

		// the flag itself
		catCase{cmd: "(none)", class: "flags", args: "--connect-timeout 0s admission status", code: 2, msg: `--connect-timeout 0s is out of range: from 1s to 5m0s`, hint: `--connect-timeout a value from 1s to 5m0s`},
		catCase{cmd: "(none)", class: "flags", args: "admission status --connect-timeout 6m", code: 2, msg: `--connect-timeout 6m0s is out of range`, hint: `from 1s to 5m0s`},
		catCase{cmd: "(none)", class: "flags", args: "--connect-timeout soon admission status", code: 2, msg: `invalid value "soon" for flag -connect-timeout`, hint: `--help`},
	)
}

// A node that accepts TCP and never answers: each command says once, on
// stderr and never in the JSON on stdout, that it waits and for how long,
// then gives up after --connect-timeout with exit 4.
func TestSilentNodeSaysItWaits(t *testing.T) {
	defer func(d time.Duration) { talos.ProgressDelay = d }(talos.ProgressDelay)
	talos.ProgressDelay = 200 * time.Millisecond
	dir := t.TempDir()
	t.Setenv("BREAKGLASS_STATE_DIR", dir+"/state")
	tc := dir + "/tc"
	if err := broken.Talosconfig.Save(tc); err != nil {
		t.Fatal(err)
	}
	want := "waiting for " + broken.Silent + " (Talos API): connected, no answer yet; giving up after 2s (--connect-timeout)\n"
	for _, cmd := range []string{"admission status", "apiserver wait --timeout 30s", "admission disable --dry-run", "diagnose --no-etcd"} {
		t.Run(cmd, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"breakglass", "--talosconfig", tc, "--connect-timeout", "2s", "-e", broken.Silent, "-n", "127.0.0.1", "-o", "json"}, strings.Fields(cmd)...)
			start := time.Now()
			code := run(t.Context(), args, streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
			took := time.Since(start)
			if wantCode := map[bool]int{true: 23, false: 4}[strings.HasPrefix(cmd, "diagnose")]; code != wantCode {
				t.Errorf("exit %d, want %d\n%s", code, wantCode, errOut.String())
			}
			if n := strings.Count(errOut.String(), want); n != 1 {
				t.Errorf("stderr says %d times %q:\n%s", n, want, errOut.String())
			}
			if strings.Contains(out.String(), "waiting for") {
				t.Errorf("the progress line is on stdout:\n%s", out.String())
			}
			if !regexp.MustCompile(`endpoint ` + regexp.QuoteMeta(broken.Silent) + ` accepted TCP but did not answer TLS or gRPC within 2s`).MatchString(errOut.String() + out.String()) {
				t.Errorf("the endpoint and what it did are not named:\n%s%s", errOut.String(), out.String())
			}
			if took < 2*time.Second || took > 8*time.Second {
				t.Errorf("took %s with --connect-timeout 2s", took)
			}
		})
	}
}
