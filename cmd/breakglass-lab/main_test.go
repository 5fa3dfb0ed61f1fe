package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/golden"
	"github.com/breakglass-dev/breakglass/lab"
)

func runLab(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

// The lab's errors print and exit as they did when the lab was part of
// breakglass: "breakglass: " lines, "hint: " lines, the documented codes.
func TestErrorsAndExitCodes(t *testing.T) {
	t.Setenv(lab.KubeBinDirEnv, t.TempDir()) // empty: no kube-apiserver built
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"breakglass-lab", "up", "--nodes", "0"}, 2,
			"breakglass: --nodes 0 is out of range: from 1 to 3 (the lab's nodes are 127.0.0.11-13)\nhint: use --nodes 1 or --nodes 3\n"},
		{[]string{"breakglass-lab", "up", "--nodes", "9"}, 2,
			"breakglass: --nodes 9 is out of range: from 1 to 3 (the lab's nodes are 127.0.0.11-13)\nhint: use --nodes 1 or --nodes 3\n"},
		// a word nothing resembles ("nope" reads as a subsequence of etcd-nospace)
		{[]string{"breakglass-lab", "up", "--scenario", "no-such-thing"}, 2,
			"breakglass: unknown scenario \"no-such-thing\" (known: " + strings.Join(lab.Scenarios(), ", ") + ")\nhint: --scenario " + strings.Join(lab.Scenarios(), "|") + "\n"},
		{[]string{"breakglass-lab", "up", "--scenario", "kyverno-servicecdir"}, 2,
			"breakglass: unknown scenario \"kyverno-servicecdir\" (known: " + strings.Join(lab.Scenarios(), ", ") + ")\nhint: did you mean --scenario kyverno-servicecidr?\n"},
		{[]string{"breakglass-lab", "replay", "--from", "v1.34.4", "--to", "v1.32.13", "-f", "-"}, 2,
			"breakglass: --to v1.32.13 is older than --from v1.34.4: that is a downgrade, which kube-apiserver does not support\nhint: swap them: --from v1.32.13 --to v1.34.4 (the replay plays upgrades)\n"},
		{[]string{"breakglass-lab", "up", "--first-ip", "10.0.0.11"}, 2,
			"breakglass: the first node address \"10.0.0.11\" is not an IPv4 loopback address (127.0.0.0/8)\n" +
				"hint: take a first address in 127.0.0.0/8 with room for the nodes before .255 of its /24, e.g. --first-ip 127.0.1.11\n"},
		{[]string{"breakglass-lab", "up", "--nodes", "3", "--first-ip", "127.0.1.253"}, 2,
			"breakglass: 3 node(s) from 127.0.1.253 do not fit in 127.0.1.0/24\n" +
				"hint: take a first address in 127.0.0.0/8 with room for the nodes before .255 of its /24, e.g. --first-ip 127.0.1.11\n"},
		{[]string{"breakglass-lab", "bench", "--nodes", "1", "--nodes", "10"}, 2,
			"breakglass: --nodes 10 is out of range: from 1 to 3 (the lab's nodes are 127.0.0.11-13)\nhint: use --nodes 1 or --nodes 3\n"},
		{[]string{"breakglass-lab", "rehearse", "-o", "yaml"}, 2,
			"breakglass: unknown output format \"yaml\"\nhint: use -o text or -o json\n"},
		{[]string{"breakglass-lab", "--output", "yaml", "bench"}, 2,
			"breakglass: unknown output format \"yaml\"\nhint: use -o text or -o json\n"},
		{[]string{"breakglass-lab", "replay", "--timeout", "abc"}, 2,
			"breakglass: invalid value \"abc\" for flag -timeout: want a duration like 90s, 5m or 1h30m\nhint: see: breakglass-lab replay --help\n"},
		{[]string{"breakglass-lab", "replay", "--apiserver-arg", "feature-gates"}, 2,
			"breakglass: invalid value \"feature-gates\" for flag -apiserver-arg: want KEY=VALUE, e.g. feature-gates=MutatingAdmissionPolicy=true\nhint: see: breakglass-lab replay --help\n"},
		{[]string{"breakglass-lab", "replay", "--apiserver-arg", "feature-gates=A=true", "--apiserver-arg", "feature-gates=B=true"}, 2,
			"breakglass: invalid value \"feature-gates=B=true\" for flag -apiserver-arg: feature-gates given twice: give one value (comma-separated where kube-apiserver takes a list)\nhint: see: breakglass-lab replay --help\n"},
		{[]string{"breakglass-lab", "replay", "--from", "v1.32.13", "--to", "v1.34.4", "-f", "-", "--apiserver-arg", "etcd-servers=https://10.0.0.1:2379"}, 2,
			"breakglass: --apiserver-arg etcd-servers is not one the replay sets: the lab owns etcd\n" +
				"hint: leave it out: the replay takes every other cluster.apiServer.extraArgs key (feature-gates, runtime-config, admission plugins, removed or deprecated flags, ...)\n"},
		{[]string{"breakglass-lab", "replay", "--from", "v1.32.13", "--to", "v1.34.4", "--apiserver-arg", "oidc-issuer-url=https://idp.example.com"}, 2,
			"breakglass: --apiserver-arg oidc-issuer-url is not one the replay sets: OIDC names an issuer the API server would dial\n" +
				"hint: leave it out: the replay takes every other cluster.apiServer.extraArgs key (feature-gates, runtime-config, admission plugins, removed or deprecated flags, ...)\n"},
		{[]string{"breakglass-lab", "replay", "--from", "v1.32.13", "--to", "v1.34.4", "--apiserver-arg", "tls-cert-file=/etc/x.crt"}, 2,
			"breakglass: --apiserver-arg tls-cert-file is not one the replay sets: its value is a file, certificate, key or address on the cluster's nodes: the lab never reads, writes or dials what a cluster's flags name\n" +
				"hint: leave it out: the replay takes every other cluster.apiServer.extraArgs key (feature-gates, runtime-config, admission plugins, removed or deprecated flags, ...)\n"},
		{[]string{"breakglass-lab", "rehearse"}, int(failure.LabNoBinaries),
			"breakglass: no kube-apiserver binary for " + lab.OldVersion + ", " + lab.NewVersion + " under " + os.Getenv(lab.KubeBinDirEnv) + "\n" +
				"hint: get them from a breakglass checkout, once per machine (the official release where dl.k8s.io answers, ~100 MB each; else built, 7 to 15 minutes each on 2 cores): make kube-apiserver-rehearse\n" +
				"hint: or: lab/scripts/build-kube-apiserver.sh " + lab.OldVersion + " " + lab.NewVersion + "\n" +
				"hint: or point " + lab.KubeBinDirEnv + " at a directory holding VERSION/kube-apiserver\n"},
	} {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			code, _, stderr := runLab(t, tc.args...)
			if code != tc.code || stderr != tc.stderr {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d, stderr:\n%s", code, stderr, tc.code, tc.stderr)
			}
		})
	}
}

// Handed over by breakglass (argv[0] "breakglass lab"), help and usage
// errors name the command as the user typed it.
func TestNamedAsInvoked(t *testing.T) {
	code, stdout, stderr := runLab(t, "breakglass lab", "up", "--bogus")
	if code != 2 || stdout != "" || stderr != "breakglass: flag provided but not defined: -bogus\nhint: see: breakglass lab up --help\n" {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runLab(t, "/somewhere/bin/breakglass-lab", "--help")
	if code != 0 || !strings.Contains(stdout, "breakglass-lab - reproduce the incident") {
		t.Errorf("exit %d\nstdout:\n%s", code, stdout)
	}
}

func TestVersion(t *testing.T) {
	want := "breakglass-lab dev\n  commit:     unknown\n  build date: unknown\n  go:         " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if code, stdout, _ := runLab(t, "breakglass-lab", "version"); code != 0 || stdout != want {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
	code, stdout, _ := runLab(t, "breakglass-lab", "version", "-o", "json")
	var got map[string]string
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil || got["version"] != "dev" || got["goVersion"] != runtime.Version() || len(got) != 5 {
		t.Errorf("exit %d, stdout %q (%v)", code, stdout, err)
	}
}

// The committed command reference must match the CLI definition: run
// `make docs` after changing a command.
func TestCommandReferenceUpToDate(t *testing.T) {
	want, err := command.Reference(newApp(streams{}, defaultName), referenceGenerator)
	if err != nil {
		t.Fatal(err)
	}
	golden.Generated(t, "../../docs/breakglass-lab.md", want, "make docs")
}

// breakglass's `lab` command (cmd/breakglass/lab.go) repeats the lab's
// commands, flags and usage lines so that it reads a command line as it
// always did before handing it over, and documents them. The two generated
// references (each kept current by its package's test) must agree: every
// lab command, word for word, under `## lab` of docs/commands.md.
func TestBreakglassMirrorsTheLab(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	_, labSection, ok := strings.Cut(read("../../docs/commands.md"), "\n## lab\n")
	if !ok {
		t.Fatal("docs/commands.md has no '## lab' section")
	}
	if i := strings.Index(labSection, "\n## "); i >= 0 {
		labSection = labSection[:i]
	}
	_, own, ok := strings.Cut(read("../../docs/breakglass-lab.md"), "\n# COMMANDS\n")
	if !ok {
		t.Fatal("docs/breakglass-lab.md has no '# COMMANDS' section")
	}
	mirrored, lab := sections(labSection, "### "), sections(own, "## ")
	for _, c := range append(labCommands(streams{}), versionCommand(streams{})) {
		if mirrored[c.Name] != lab[c.Name] {
			t.Errorf("breakglass lab %s:\n%s\nbreakglass-lab %s:\n%s\n(update cmd/breakglass/lab.go, then make docs)", c.Name, mirrored[c.Name], c.Name, lab[c.Name])
		}
		delete(mirrored, c.Name)
	}
	for name := range mirrored {
		t.Errorf("breakglass lab %s: not a lab command of breakglass-lab", name)
	}
}

// sections splits Markdown into the text under each heading with prefix.
func sections(md, prefix string) map[string]string {
	out := map[string]string{}
	var name string
	var body []string
	flush := func() {
		if name != "" {
			out[name] = strings.TrimSpace(strings.Join(body, "\n"))
		}
	}
	for _, line := range strings.Split(md, "\n") {
		if h, ok := strings.CutPrefix(line, prefix); ok {
			flush()
			name, body = h, nil
			continue
		}
		body = append(body, line)
	}
	flush()
	return out
}
