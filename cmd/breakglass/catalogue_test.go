package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	clientv3 "go.etcd.io/etcd/client/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// The catalogue of bad and odd inputs (issue 13): every command, run
// in-process as an operator would type it, must end with the documented
// exit code, say what is wrong in words, name the next step in a hint, and
// change nothing: not the state directory (journals, records, backups),
// not the files it was given, not a node's config, not etcd.
//
// One emulated cluster (two control planes, a worker) and one TLS etcd
// serve every case; a case that should be refused before anything is
// dialled still runs against them, so a refusal that came too late would
// show as a changed node or a different exit code.

// catCase is one bad input.
type catCase struct {
	cmd   string // the command under test, as the report counts them
	class string // flags, args, command, files, talosconfig, state, node, etcd
	args  string // after "breakglass", split at spaces; $DIR, $NODE1, $NODE2, $WORKER1, $ETCD* are replaced
	files map[string]string
	mode  map[string]fs.FileMode // modes of files (default 0600)
	env   map[string]string      // extra environment ("" unsets)
	stdin string

	code   int
	msg    string // stderr must match (regexp)
	hint   string // a "hint:" line must match (regexp); "-" when none is expected
	out    string // stdout must match (regexp), when set
	secret string // text that must appear in no output (file content)
}

// catalogue: keep the cases grouped by command.
var catalogue = []catCase{
	// --- the command line itself
	{cmd: "(none)", class: "command", args: "admision status", code: 2, msg: `unknown command "admision"`, hint: `breakglass admission`},
	{cmd: "(none)", class: "command", args: "frobnicate", code: 2, msg: `unknown command "frobnicate"`, hint: `breakglass --help`},
	{cmd: "(none)", class: "command", args: "recovr --yes", code: 2, msg: `unknown command "recovr"`, hint: `breakglass recover`},
	{cmd: "(none)", class: "command", args: "jurnal list", code: 2, msg: `unknown command "jurnal"`, hint: `breakglass journal`},
	{cmd: "(none)", class: "flags", args: "--no-such-flag version", code: 2, msg: `flag provided but not defined`, hint: `--help`},
	{cmd: "(none)", class: "flags", args: "-o yaml version", code: 2, msg: `unknown output format "yaml"`, hint: `-o text or -o json`},
	{cmd: "(none)", class: "flags", args: "-o JSON version", code: 2, msg: `unknown output format "JSON"`, hint: `-o json`},
	{cmd: "admission", class: "command", args: "admission frob", code: 2, msg: `unknown command "admission frob"`, hint: `breakglass admission --help`},
	{cmd: "admission", class: "command", args: "admission disabel --yes", code: 2, msg: `unknown command "admission disabel"`, hint: `breakglass admission disable`},
	{cmd: "etcd", class: "command", args: "etcd webhook", code: 2, msg: `unknown command "etcd webhook"`, hint: `breakglass etcd webhooks`},
	{cmd: "journal", class: "command", args: "journal lst", code: 2, msg: `unknown command "journal lst"`, hint: `breakglass journal list`},
	{cmd: "lock", class: "command", args: "lock brake", code: 2, msg: `unknown command "lock brake"`, hint: `breakglass lock break`},
	{cmd: "runbook", class: "command", args: "runbook shw webhook-deadlock", code: 2, msg: `unknown command "runbook shw"`, hint: `breakglass runbook show`},
	{cmd: "apiserver", class: "command", args: "apiserver wiat", code: 2, msg: `unknown command "apiserver wiat"`, hint: `breakglass apiserver wait`},

	{cmd: "(none)", class: "command", args: "help recovr", code: 2, msg: `unknown command "recovr"`, hint: `breakglass recover`},
	{cmd: "(none)", class: "command", args: "help admission", code: 0, out: `breakglass admission - `, hint: "-"},
	{cmd: "admission", class: "command", args: "admission help", code: 0, out: `breakglass admission - `, hint: "-"},
	{cmd: "(none)", class: "flags", args: "admission status -n", code: 2, msg: `flag needs an argument: -n`, hint: `breakglass --help`},

	// --- version, completion
	{cmd: "version", class: "args", args: "version extra", code: 2, msg: `version takes no arguments`, hint: `breakglass version`},
	{cmd: "completion", class: "args", args: "completion tcsh", code: 2, msg: `unknown shell "tcsh"`, hint: `bash\|zsh\|fish`},
	{cmd: "completion", class: "args", args: "completion", code: 2, msg: `shell`, hint: `bash\|zsh\|fish`},
	{cmd: "completion", class: "args", args: "completion bash zsh", code: 2, msg: `one shell`, hint: `bash\|zsh\|fish`},

	// --- admission disable: flags refused before anything is dialled
	{cmd: "admission disable", class: "flags", args: "admission disable --revert-after -5m --yes", code: 2, msg: `--revert-after -5m0s is out of range: from 2m0s to 24h0m0s`, hint: `--revert-after a value from 2m0s`},
	{cmd: "admission disable", class: "flags", args: "admission disable --revert-after 30s --yes", code: 2, msg: `--revert-after 30s is out of range`, hint: `from 2m0s to 24h0m0s`},
	{cmd: "admission disable", class: "flags", args: "admission disable --revert-after 25h --yes", code: 2, msg: `--revert-after 25h0m0s is out of range`, hint: `from 2m0s to 24h0m0s`},
	{cmd: "admission disable", class: "flags", args: "admission disable --revert-after 30 --yes", code: 2, msg: `invalid value "30" for flag -revert-after`, hint: `--help`},
	{cmd: "admission disable", class: "flags", args: "admission disable --revert-after soon --yes", code: 2, msg: `invalid value "soon"`, hint: `--help`},
	{cmd: "admission disable", class: "flags", args: "admission disable --wait-timeout -1s --yes", code: 2, msg: `--wait-timeout -1s is out of range`, hint: `from 1s to 24h0m0s`},
	{cmd: "admission disable", class: "flags", args: "admission disable --wait-timeout 0s --yes", code: 2, msg: `--wait-timeout 0s is out of range`, hint: `--wait-timeout a value`},
	{cmd: "admission disable", class: "flags", args: "admission disable --wait-timeout 48h --yes", code: 2, msg: `--wait-timeout 48h0m0s is out of range`, hint: `--wait-timeout a value`},
	{cmd: "admission disable", class: "flags", args: "admission disable --plugins Not,A_Plugin --yes", code: 2, msg: `"Not" is not a kube-apiserver admission plugin`, hint: `ValidatingAdmissionWebhook`},
	{cmd: "admission disable", class: "flags", args: "admission disable --plugins validatingadmissionwebhook --yes", code: 2, msg: `"validatingadmissionwebhook" is not a kube-apiserver admission plugin`, hint: `did you mean ValidatingAdmissionWebhook`},
	{cmd: "admission disable", class: "flags", args: "admission disable --plugins ValidatingAdmisionWebhook --yes", code: 2, msg: `not a kube-apiserver admission plugin`, hint: `did you mean ValidatingAdmissionWebhook`},
	{cmd: "admission disable", class: "flags", args: "admission disable --plugins FooBar --yes", code: 2, msg: `"FooBar" is not a kube-apiserver admission plugin`, hint: `e.g. ValidatingAdmissionWebhook`},
	{cmd: "admission disable", class: "flags", args: "admission disable --plugins , --yes", code: 2, msg: `--plugins names no plugin`, hint: `--plugins ValidatingAdmissionWebhook`},
	{cmd: "admission disable", class: "flags", args: "admission disable --plugins", code: 2, msg: `flag needs an argument`, hint: `--help`},
	{cmd: "admission disable", class: "flags", args: "admission disable --bogus --yes", code: 2, msg: `flag provided but not defined: -bogus`, hint: `breakglass admission disable --help`},
	{cmd: "admission disable", class: "args", args: "admission disable extra --yes", code: 2, msg: `admission disable takes no arguments`, hint: `-n NODE`},
	{cmd: "admission disable", class: "flags", args: "admission disable --etcd-cert $DIR/c.pem --yes", files: map[string]string{"c.pem": "x"}, code: 2, msg: `--etcd-cert needs --etcd-key`, hint: `--etcd-key`},
	{cmd: "admission disable", class: "node", args: "-n $WORKER1 admission disable --yes", code: 9, msg: `not a control-plane node`, hint: `control-plane`},
	{cmd: "admission disable", class: "node", args: "-n 127.0.0.1 admission disable --yes", code: 4, msg: `127\.0\.0\.1`, hint: `talosctl -n 127.0.0.1 version`},
	{cmd: "admission disable", class: "talosconfig", args: "admission disable --yes", env: map[string]string{"TALOSCONFIG": "$READER"}, code: 3, msg: `role is os:reader`, hint: `os:admin`},
	{cmd: "admission disable", class: "node", args: "admission disable", stdin: "n\n", code: 8, msg: `not confirmed, nothing was changed`, hint: "-"},

	// --- admission restore / status
	{cmd: "admission restore", class: "flags", args: "admission restore --wait-timeout 0s --yes", code: 2, msg: `--wait-timeout 0s is out of range`, hint: `from 1s`},
	{cmd: "admission restore", class: "flags", args: "admission restore --wait-timeout -1h --yes", code: 2, msg: `out of range`, hint: `--wait-timeout`},
	{cmd: "admission restore", class: "flags", args: "admission restore --plugins Nope --yes", code: 2, msg: `"Nope" is not a kube-apiserver admission plugin`, hint: `ValidatingAdmissionWebhook`},
	{cmd: "admission restore", class: "flags", args: "admission restore --revert-after 30m --yes", code: 2, msg: `flag provided but not defined: -revert-after`, hint: `--help`},
	{cmd: "admission restore", class: "args", args: "admission restore now --yes", code: 2, msg: `admission restore takes no arguments`, hint: `-n NODE`},
	{cmd: "admission status", class: "args", args: "admission status extra", code: 2, msg: `admission status takes no arguments`, hint: `-n NODE`},
	{cmd: "admission status", class: "flags", args: "-o xml admission status", code: 2, msg: `unknown output format "xml"`, hint: `-o text or -o json`},
	{cmd: "admission status", class: "flags", args: "admission status --context nosuch", code: 2, msg: `has no context "nosuch"`, hint: `--context`},
	{cmd: "admission status", class: "flags", args: "admission status -n", code: 2, msg: `flag needs an argument`, hint: `--help`},

	// --- talosconfig problems, in plain words (admission status is the cheapest reader)
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/absent"}, code: 2, msg: `cannot read talosconfig .*absent`, hint: `--talosconfig PATH`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/empty"}, files: map[string]string{"empty": ""}, code: 2, msg: `talosconfig .*empty is empty`, hint: `talosctl config`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/blank"}, files: map[string]string{"blank": "\n  \n"}, code: 2, msg: `is empty`, hint: `talosctl config`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/kubeconfig"}, files: map[string]string{"kubeconfig": kubeconfigText}, code: 2, msg: `kubeconfig .*not a talosconfig`, hint: `talosconfig`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/tc"}, files: map[string]string{"tc": "context: \"\"\ncontexts:\n  a:\n    endpoints: [127.0.0.1]\n"}, code: 2, msg: `has no current context`, hint: `--context a`},
	{cmd: "admission status", class: "talosconfig", args: "admission status --context b", env: map[string]string{"TALOSCONFIG": "$DIR/tc"}, files: map[string]string{"tc": "context: a\ncontexts:\n  a:\n    endpoints: [127.0.0.1]\n"}, code: 2, msg: `has no context "b" \(it has: a\)`, hint: `--context a`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/tc"}, files: map[string]string{"tc": "context: a\ncontexts:\n  a:\n    endpoints: [127.0.0.1]\n    ca: bm90cGVt\n    crt: bm90cGVt\n    key: bm90cGVt\n"}, code: 2, msg: `context "a": its ca is not a PEM certificate`, hint: `talosctl config`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/tc"}, files: map[string]string{"tc": "context: a\ncontexts:\n  a:\n    endpoints: [127.0.0.1]\n    ca: '%%%'\n"}, code: 2, msg: `its ca is not base64`, hint: `talosctl config`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/tc"}, files: map[string]string{"tc": "context: a\ncontexts:\n  a: {}\n"}, code: 2, msg: `context "a" has no endpoints`, hint: `-e ENDPOINT`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR/tc"}, files: map[string]string{"tc": "{{{ not yaml"}, code: 2, msg: `is not valid`, hint: `talosctl config`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$DIR"}, code: 2, msg: `is a directory`, hint: `--talosconfig PATH`},
	{cmd: "admission status", class: "talosconfig", args: "admission status", env: map[string]string{"TALOSCONFIG": "$LOOSE"}, code: 0, msg: `warning: talosconfig .* holds a private key and is readable by others`, hint: `chmod 600`},

	// --- apiserver wait
	{cmd: "apiserver wait", class: "flags", args: "apiserver wait --timeout -3s", code: 2, msg: `--timeout -3s is out of range`, hint: `--timeout a value from 1s`},
	{cmd: "apiserver wait", class: "flags", args: "apiserver wait --timeout 0s", code: 2, msg: `out of range`, hint: `from 1s to 24h0m0s`},
	{cmd: "apiserver wait", class: "flags", args: "apiserver wait --timeout 100h", code: 2, msg: `out of range`, hint: `from 1s to 24h0m0s`},
	{cmd: "apiserver wait", class: "flags", args: "apiserver wait --timeout five", code: 2, msg: `invalid value "five"`, hint: `--help`},
	{cmd: "apiserver wait", class: "args", args: "apiserver wait extra", code: 2, msg: `apiserver wait takes no arguments`, hint: `-n NODE`},
	{cmd: "apiserver wait", class: "node", args: "-n $WORKER1 apiserver wait --timeout 2s", code: 9, msg: `not a control-plane node`, hint: `control-plane`},

	// --- diagnose
	{cmd: "diagnose", class: "flags", args: "diagnose --timeout 0s", code: 2, msg: `--timeout 0s is out of range`, hint: `--timeout a value`},
	{cmd: "diagnose", class: "flags", args: "diagnose --timeout -1m", code: 2, msg: `out of range`, hint: `--timeout`},
	{cmd: "diagnose", class: "flags", args: "diagnose --tail -5", code: 2, msg: `--tail -5 is out of range: from 1 to 10000`, hint: `--tail 500`},
	{cmd: "diagnose", class: "flags", args: "diagnose --tail 0", code: 2, msg: `--tail 0 is out of range`, hint: `--tail`},
	{cmd: "diagnose", class: "flags", args: "diagnose --tail 99999999", code: 2, msg: `--tail 99999999 is out of range`, hint: `--tail`},
	{cmd: "diagnose", class: "flags", args: "diagnose --tail many", code: 2, msg: `invalid value "many"`, hint: `--help`},
	{cmd: "diagnose", class: "args", args: "diagnose why", code: 2, msg: `diagnose takes no arguments`, hint: `-n NODE`},
	{cmd: "diagnose", class: "flags", args: "diagnose --etcd-key $DIR/k.pem", files: map[string]string{"k.pem": "x"}, code: 2, msg: `--etcd-key needs --etcd-cert`, hint: `--etcd-cert`},

	// --- audit
	{cmd: "audit", class: "flags", args: "audit --fix-format xml -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `--fix-format "xml" is not one of: manifest, json-patch, strategic-patch`, hint: `--fix-format manifest`},
	{cmd: "audit", class: "flags", args: "audit --fix-style foo -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `--fix-style "foo" is not one of: apiserver, kinds`, hint: `--fix-style apiserver`},
	{cmd: "audit", class: "flags", args: "audit --fix-style APISERVER -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `--fix-style "APISERVER" is not one of`, hint: `--fix-style apiserver`},
	{cmd: "audit", class: "flags", args: "audit --slow-timeout -1s -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `--slow-timeout -1s is out of range: from 1s to 30s`, hint: `--slow-timeout a value`},
	{cmd: "audit", class: "flags", args: "audit --slow-timeout 0s -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `--slow-timeout 0s is out of range`, hint: `from 1s to 30s`},
	{cmd: "audit", class: "flags", args: "audit --slow-timeout 1m -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `--slow-timeout 1m0s is out of range`, hint: `from 1s to 30s`},
	{cmd: "audit", class: "flags", args: "audit --k8s-version 1.20 -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `"1.20"`, hint: `1\.34`},
	{cmd: "audit", class: "flags", args: "audit --k8s-version latest -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `"latest"`, hint: `1\.34`},
	// Issue 29: the patch is read too (both were taken as 1.34).
	{cmd: "audit", class: "flags", args: "audit --to v1.34.x -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `"v1\.34\.x" is not a Kubernetes version: its patch "x" is not a number`, hint: `1\.34`},
	{cmd: "audit", class: "flags", args: "audit --to 1.34.99999999999999999999 -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `its patch "99999999999999999999" is out of range`, hint: `1\.34`},
	{cmd: "audit", class: "flags", args: "audit --from v1.33.x --to 1.34 -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `"v1\.33\.x" is not a Kubernetes version`, hint: `1\.33`},
	{cmd: "audit", class: "files", args: "audit -f $DIR/absent.yaml", code: 2, msg: `absent\.yaml`, hint: `.`},
	{cmd: "audit", class: "files", args: "audit -f $DIR/empty.yaml", files: map[string]string{"empty.yaml": ""}, code: 2, msg: `nothing to audit`, hint: `-f webhooks.yaml`},
	{cmd: "audit", class: "files", args: "audit -f $DIR/bad.yaml", files: map[string]string{"bad.yaml": "kind: [\n"}, code: 2, msg: `bad\.yaml`, hint: `.`},
	{cmd: "audit", class: "files", args: "audit -f $DIR", code: 2, msg: `directory`, hint: `.`},
	{cmd: "audit", class: "args", args: "audit extra.yaml", code: 2, msg: `audit takes no arguments`, hint: `-f extra.yaml`},
	{cmd: "audit", class: "flags", args: "audit", env: noTalosconfig, code: 2, msg: `nothing to audit`, hint: `--from-etcd`},

	// --- etcd
	{cmd: "etcd webhooks", class: "flags", args: "etcd webhooks --kind foo", code: 2, msg: `--kind "foo" is not one of: validating, mutating`, hint: `--kind validating`},
	{cmd: "etcd webhooks", class: "flags", args: "etcd webhooks --kind Validatin", code: 2, msg: `--kind "Validatin" is not one of`, hint: `--kind validating`},
	{cmd: "etcd webhooks", class: "args", args: "etcd webhooks extra", code: 2, msg: `etcd webhooks takes no arguments`, hint: `--kind`},
	{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT", code: 2, msg: `--etcd-cert needs --etcd-key`, hint: `--etcd-key`},
	{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints $ETCD --etcd-cacert $DIR/absent.pem --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", code: 2, msg: `absent\.pem`, hint: `--etcd-cacert`},
	{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints $ETCD --etcd-cacert $DIR/ca.pem --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", files: map[string]string{"ca.pem": "not a pem"}, code: 2, msg: `ca\.pem`, hint: `--etcd-cacert`},
	{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints not-a-url --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", code: 2, msg: `not-a-url`, hint: `https://`},
	{cmd: "etcd backup", class: "flags", args: "etcd backup --kind bogus", code: 2, msg: `--kind "bogus" is not one of`, hint: `--kind`},
	{cmd: "etcd backup", class: "files", args: "etcd backup --out $DIR/exists.json --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", files: map[string]string{"exists.json": "keep me"}, code: 2, msg: `exists\.json`, hint: `.`},
	{cmd: "etcd delete", class: "args", args: "etcd delete --yes", code: 2, msg: `NAME`, hint: `breakglass etcd webhooks`},
	{cmd: "etcd delete", class: "flags", args: "etcd delete kyverno --kind nope --yes", code: 2, msg: `--kind "nope" is not one of`, hint: `--kind`},
	{cmd: "etcd delete", class: "etcd", args: "etcd delete nosuch-webhook --yes --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", code: 2, msg: `nosuch-webhook`, hint: `breakglass etcd webhooks`},
	{cmd: "etcd delete", class: "etcd", args: "etcd delete deadlock-webhook --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", stdin: "no\n", code: 8, msg: `was not typed, nothing was changed`, hint: "-"},
	{cmd: "etcd restore", class: "args", args: "etcd restore", code: 2, msg: `restore takes exactly one backup FILE`, hint: `breakglass etcd restore FILE`},
	{cmd: "etcd restore", class: "args", args: "etcd restore a b", code: 2, msg: `restore takes exactly one backup FILE`, hint: `breakglass etcd restore FILE`},
	{cmd: "etcd restore", class: "files", args: "etcd restore $DIR/absent.json --yes --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", code: 2, msg: `absent\.json`, hint: `.`},
	{cmd: "etcd restore", class: "files", args: "etcd restore $DIR/bad.json --yes --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", files: map[string]string{"bad.json": "password: hunter2-secret"}, code: 2, msg: `bad\.json`, hint: `.`, secret: "hunter2"},
	{cmd: "etcd restore", class: "files", args: "etcd restore $DIR/empty.json --yes --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", files: map[string]string{"empty.json": ""}, code: 2, msg: `empty\.json`, hint: `.`},
	{cmd: "etcd snapshot", class: "args", args: "etcd snapshot extra", code: 2, msg: `takes no arguments`, hint: `--out FILE`},
	{cmd: "etcd snapshot", class: "files", args: "etcd snapshot --out $DIR/exists.db --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", files: map[string]string{"exists.db": "keep me"}, code: 2, msg: `exists\.db`, hint: `.`},

	// --- recover, runbook run
	{cmd: "recover", class: "flags", args: "recover --revert-after 25h --yes", code: 2, msg: `--revert-after 25h0m0s is out of range`, hint: `from 2m0s to 24h0m0s`},
	{cmd: "recover", class: "flags", args: "recover --revert-after 1s --yes", code: 2, msg: `--revert-after 1s is out of range`, hint: `from 2m0s`},
	{cmd: "recover", class: "flags", args: "recover --plugins NotAPlugin --yes", code: 2, msg: `"NotAPlugin" is not a kube-apiserver admission plugin`, hint: `ValidatingAdmissionWebhook`},
	{cmd: "recover", class: "flags", args: "recover --kind bogus --delete x --yes", code: 2, msg: `--kind "bogus" is not one of`, hint: `--kind`},
	{cmd: "recover", class: "flags", args: "recover --runbook nosuch --yes", code: 2, msg: `no builtin runbook named "nosuch"`, hint: `breakglass runbook list`},
	{cmd: "recover", class: "files", args: "recover --runbook $DIR/absent.yaml --yes", code: 2, msg: `absent\.yaml`, hint: `.`},
	{cmd: "recover", class: "args", args: "recover now --yes", code: 2, msg: `recover takes no arguments`, hint: `--runbook`},
	{cmd: "runbook run", class: "args", args: "runbook run --yes", code: 2, msg: `runbook run takes one runbook name or file`, hint: `breakglass runbook list`},
	{cmd: "runbook run", class: "args", args: "runbook run a b --yes", code: 2, msg: `runbook run takes one runbook name or file`, hint: `breakglass runbook list`},
	{cmd: "runbook run", class: "files", args: "runbook run $DIR/scalar.yaml --yes", files: map[string]string{"scalar.yaml": "token-s3cr3t-value-that-must-not-be-echoed-anywhere\n"}, code: 2, msg: `scalar\.yaml`, hint: `.`, secret: "s3cr3t"},
	{cmd: "runbook run", class: "files", args: "runbook run $DIR/list.yaml --yes", files: map[string]string{"list.yaml": "- password=s3cr3t\n"}, code: 2, msg: `list\.yaml`, hint: `.`, secret: "s3cr3t"},
	{cmd: "runbook run", class: "files", args: "runbook run $DIR/empty.yaml --yes", files: map[string]string{"empty.yaml": ""}, code: 2, msg: `empty\.yaml`, hint: `.`},
	{cmd: "runbook run", class: "files", args: "runbook run $DIR/bin.yaml --yes", files: map[string]string{"bin.yaml": "\x00\x01\x02s3cr3t"}, code: 2, msg: `bin\.yaml`, hint: `.`, secret: "s3cr3t"},
	{cmd: "runbook run", class: "files", args: "runbook run $DIR --yes", code: 2, msg: `is a directory`, hint: `.`},
	{cmd: "runbook run", class: "flags", args: "runbook run webhook-deadlock --revert-after -1m --yes", code: 2, msg: `--revert-after -1m0s is out of range`, hint: `from 2m0s`},
	{cmd: "runbook run", class: "flags", args: "runbook run webhook-deadlock --plugins nope --yes", code: 2, msg: `"nope" is not a kube-apiserver admission plugin`, hint: `ValidatingAdmissionWebhook`},

	// --- runbook list / show
	{cmd: "runbook list", class: "args", args: "runbook list extra", code: 2, msg: `runbook list takes no arguments`, hint: `breakglass runbook show`},
	{cmd: "runbook show", class: "args", args: "runbook show", code: 2, msg: `runbook show takes one runbook name or file`, hint: `breakglass runbook list`},
	{cmd: "runbook show", class: "args", args: "runbook show nosuch", code: 2, msg: `no builtin runbook named "nosuch"`, hint: `breakglass runbook list`},
	{cmd: "runbook show", class: "args", args: "runbook show webhook-deadlok", code: 2, msg: `no builtin runbook named "webhook-deadlok"`, hint: `webhook-deadlock`},
	{cmd: "runbook show", class: "files", args: "runbook show $DIR/scalar.yaml", files: map[string]string{"scalar.yaml": "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t\n"}, code: 2, msg: `scalar\.yaml`, hint: `.`, secret: "s3cr3t"},
	{cmd: "runbook show", class: "flags", args: "-o xml runbook show webhook-deadlock", code: 2, msg: `unknown output format "xml"`, hint: `-o text, -o json or -o yaml`},
	{cmd: "runbook list", class: "flags", args: "-o yaml runbook list", code: 2, msg: `unknown output format "yaml"`, hint: `-o text or -o json`},

	// --- journal
	{cmd: "journal list", class: "args", args: "journal list extra", code: 2, msg: `journal list takes no arguments`, hint: `breakglass journal show`},
	{cmd: "journal list", class: "state", args: "journal list", files: map[string]string{"state/incidents": "a file, not a directory"}, code: 2, msg: `incidents`, hint: `--state-dir`},
	{cmd: "journal show", class: "state", args: "journal show", code: 2, msg: `no incident in .*incidents`, hint: `breakglass recover`},
	{cmd: "journal show", class: "state", args: "journal show nosuch", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": journalText}, code: 2, msg: `no incident "nosuch"`, hint: `breakglass journal list`},
	{cmd: "journal show", class: "state", args: "journal show ../../etc", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": journalText}, code: 2, msg: `no incident "../../etc"`, hint: `breakglass journal list`},
	{cmd: "journal show", class: "args", args: "journal show a b", code: 2, msg: `takes at most one incident ID`, hint: `breakglass journal list`},
	{cmd: "journal close", class: "args", args: "journal close a b", code: 2, msg: `journal close takes at most one incident ID`, hint: `breakglass journal list`},
	{cmd: "journal close", class: "state", args: "journal close nosuch --yes", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": journalText}, code: 2, msg: `no incident "nosuch"`, hint: `breakglass journal list`},
	{cmd: "journal close", class: "state", args: "journal close 20260101-000000-dddd --yes", files: map[string]string{"state/incidents/20260101-000000-dddd/journal.jsonl": rehearsalJournal}, code: 2, msg: `incident 20260101-000000-dddd was a dry run: there is nothing to close`, hint: `breakglass journal list`},
	{cmd: "journal timeline", class: "flags", args: "journal timeline --format html", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": journalText}, code: 2, msg: `--format "html" is not one of: text, markdown`, hint: `--format markdown`},
	{cmd: "journal timeline", class: "flags", args: "journal timeline --format html", code: 2, msg: `--format "html" is not one of`, hint: `--format`},
	{cmd: "journal timeline", class: "state", args: "journal timeline nosuch", code: 2, msg: `no incident`, hint: `breakglass`},

	// --- resume, revert
	{cmd: "resume", class: "state", args: "resume --yes", code: 2, msg: `no interrupted incident to resume`, hint: `breakglass journal list`},
	{cmd: "resume", class: "state", args: "resume 20260101-000000-aaaa --yes", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": standaloneFailed}, code: 2, msg: `incident 20260101-000000-aaaa is a standalone admission disable: there is nothing to resume`, hint: `breakglass admission disable`},
	{cmd: "resume", class: "state", args: "resume --yes", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": standaloneFailed}, code: 2, msg: `no interrupted incident to resume`, hint: `breakglass journal list`},
	{cmd: "resume", class: "state", args: "resume nosuch --yes", code: 2, msg: `no incident "nosuch"`, hint: `breakglass journal list`},
	{cmd: "resume", class: "args", args: "resume a b --yes", code: 2, msg: `takes at most one incident ID`, hint: `breakglass journal list`},
	{cmd: "revert", class: "state", args: "revert --yes", code: 2, msg: `no incident`, hint: `breakglass`},
	{cmd: "revert", class: "state", args: "revert nosuch --yes", code: 2, msg: `no incident "nosuch"`, hint: `breakglass journal list`},
	{cmd: "revert", class: "args", args: "revert a b --yes", code: 2, msg: `takes at most one incident ID`, hint: `breakglass journal list`},

	// --- lock
	{cmd: "lock status", class: "args", args: "lock status extra", code: 2, msg: `lock status takes no arguments`, hint: `breakglass lock status`},
	{cmd: "lock break", class: "args", args: "lock break extra --yes", code: 2, msg: `lock break takes no arguments`, hint: `breakglass lock status`},
	{cmd: "lock break", class: "etcd", args: "lock break --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT", code: 2, msg: `--etcd-cert needs --etcd-key`, hint: `--etcd-key`},

	// --- added with the checks: duplicates, runbook values, more flag ranges
	{cmd: "admission status", class: "node", args: "-n $NODE1,$NODE1 -n $NODE1 admission status", code: 0, out: `^NODE.*\n[0-9.]+ +\(none\)[^\n]*\n$`, hint: "-"},
	{cmd: "apiserver wait", class: "flags", args: "apiserver wait --timeout 24h1s", code: 2, msg: `--timeout 24h0m1s is out of range`, hint: `from 1s to 24h0m0s`},
	{cmd: "journal timeline", class: "flags", args: "journal timeline --format Markdown", code: 2, msg: `--format "Markdown" is not one of: text, markdown`, hint: `--format markdown`},
	{cmd: "audit", class: "flags", args: "audit --fix-format json_patch -f $DIR/w.yaml", files: map[string]string{"w.yaml": webhookYAML}, code: 2, msg: `--fix-format "json_patch" is not one of`, hint: `--fix-format json-patch`},
	{cmd: "etcd webhooks", class: "etcd", args: "etcd webhooks --etcd-endpoints ftp://127.0.0.1:2379 --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", code: 2, msg: `"ftp://127.0.0.1:2379" is not an etcd client URL`, hint: `https://HOST:2379`},
	{cmd: "lock status", class: "etcd", args: "lock status --etcd-endpoints $ETCD --etcd-key $ETCDKEY", code: 2, msg: `--etcd-key needs --etcd-cert`, hint: `--etcd-cert FILE`},
	{cmd: "etcd delete", class: "files", args: "etcd delete deadlock-webhook --backup-dir $DIR/file --yes --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", files: map[string]string{"file": "x"}, code: 2, msg: `backup directory .*file is not a directory`, hint: `--backup-dir`},
	{cmd: "recover", class: "files", args: "recover --runbook $DIR/rb.yaml --yes", files: map[string]string{"rb.yaml": runbookWith("plugins: [ValidatingAdmisionWebhook]")}, code: 2, msg: `"ValidatingAdmisionWebhook" is not a kube-apiserver admission plugin`, hint: `did you mean ValidatingAdmissionWebhook`},
	{cmd: "recover", class: "files", args: "recover --runbook $DIR/rb.yaml --yes", files: map[string]string{"rb.yaml": runbookWith("revertAfter: -5m")}, code: 2, msg: `revertAfter: -5m0s is out of range \(2m to 24h\)`, hint: `.`},
	{cmd: "runbook run", class: "files", args: "runbook run $DIR/rb.yaml --yes", files: map[string]string{"rb.yaml": runbookWith("revertAfter: 0s")}, code: 2, msg: `"0s" is zero`, hint: `.`},
	{cmd: "runbook show", class: "flags", args: "runbook show webhook-deadlock -o yml", code: 2, msg: `unknown output format "yml"`, hint: `-o yaml`},
	{cmd: "journal list", class: "state", args: "journal list --state-dir $DIR/file/sub", files: map[string]string{"file": "x"}, code: 2, msg: `state directory .*file/sub cannot be used`, hint: `--state-dir`},

	// --- damaged journals (helper B's behaviour, journal_damage_test.go)
	{cmd: "journal list", class: "state", args: "journal list", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": "{\"time\":\"2026-01-01T00:00:00Z\",\"kind\":\"inc"}, code: 0, out: `20260101-000000-aaaa +damaged`, hint: "-"},
	{cmd: "journal list", class: "state", args: "journal list", files: map[string]string{"state/incidents/20260101-000000-bbbb/journal.jsonl": ""}, code: 0, out: `20260101-000000-bbbb +damaged`, hint: "-"},
	{cmd: "journal list", class: "state", args: "journal list", files: map[string]string{"state/incidents/20260101-000000-cccc/journal.jsonl": "not json at all\n"}, code: 0, out: `damaged +journal .*journal\.jsonl is damaged at line 1`, hint: "-"},
	{cmd: "journal show", class: "state", args: "journal show 20260101-000000-bbbb", files: map[string]string{"state/incidents/20260101-000000-bbbb/journal.jsonl": "garbage\n"}, code: 2, msg: `journal .*20260101-000000-bbbb/journal\.jsonl is damaged`, hint: `.`},
	{cmd: "resume", class: "state", args: "resume 20260101-000000-bbbb --yes", files: map[string]string{"state/incidents/20260101-000000-bbbb/journal.jsonl": "garbage\n"}, code: 2, msg: `is damaged`, hint: `breakglass journal show`},
	{cmd: "revert", class: "state", args: "revert 20260101-000000-bbbb --yes", files: map[string]string{"state/incidents/20260101-000000-bbbb/journal.jsonl": "garbage\n"}, code: 2, msg: `is damaged`, hint: `breakglass admission restore`},

	// --- the incident tells the truth (issue 21)
	{cmd: "resume", class: "state", args: "resume 20260101-000000-dddd --yes", files: map[string]string{"state/incidents/20260101-000000-dddd/journal.jsonl": rehearsalJournal}, code: 2, msg: `incident 20260101-000000-dddd was a dry run \(a rehearsal\): nothing of it was applied, and it is never resumed or reverted for real`, hint: `run it for real: breakglass recover -n 127\.`},
	{cmd: "revert", class: "state", args: "revert 20260101-000000-dddd --yes", files: map[string]string{"state/incidents/20260101-000000-dddd/journal.jsonl": rehearsalJournal}, code: 2, msg: `was a dry run`, hint: `run it for real`},
	{cmd: "resume", class: "state", args: "resume 20260101-000000-dddd --dry-run", files: map[string]string{"state/incidents/20260101-000000-dddd/journal.jsonl": rehearsalJournal}, code: 2, msg: `was a dry run`, hint: `run it for real`},
	{cmd: "resume", class: "node", args: "-n $NODE2 resume 20260101-000000-eeee --yes", files: map[string]string{"state/incidents/20260101-000000-eeee/journal.jsonl": interruptedJournal}, code: 2, msg: `incident 20260101-000000-eeee ran on nodes 127\.[0-9.]+; -n names 127\.`, hint: `no -n: the incident names them`},
	{cmd: "revert", class: "node", args: "-n $NODE1,$NODE2 revert 20260101-000000-eeee --yes", files: map[string]string{"state/incidents/20260101-000000-eeee/journal.jsonl": interruptedJournal}, code: 2, msg: `ran on nodes .*; -n names`, hint: `breakglass revert 20260101-000000-eeee`},
	{cmd: "resume", class: "node", args: "resume 20260101-000000-eeee --nodes-gone 10.9.9.9 --yes", files: map[string]string{"state/incidents/20260101-000000-eeee/journal.jsonl": interruptedJournal}, code: 2, msg: `--nodes-gone 10\.9\.9\.9 is not a node of incident 20260101-000000-eeee`, hint: `name only the incident's nodes`},
	{cmd: "resume", class: "node", args: "resume 20260101-000000-eeee --nodes-gone $NODE1 --yes", files: map[string]string{"state/incidents/20260101-000000-eeee/journal.jsonl": interruptedJournal}, code: 2, msg: `--nodes-gone names every node`, hint: `leave at least one`},
	{cmd: "journal show", class: "state", args: "journal show 20260101-000000-aaaa", files: map[string]string{"state/incidents/20260101-000000-aaaa/journal.jsonl": journalText + "garbage\n"}, code: 2, out: `incident`, msg: `damaged at line 2: .*the 1 record\(s\) above are those before it`, hint: `tail -n \+2 `},
	{cmd: "etcd delete", class: "etcd", args: "etcd delete deadlock-webhook --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", stdin: "deadlock\n", code: 8, msg: `(?s)"deadlock" is not "deadlock-webhook"; type it exactly.*no answer on standard input to the confirmation, nothing was changed`, hint: `--yes`},
	{cmd: "etcd delete", class: "etcd", args: "etcd delete deadlock-webhook --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY", stdin: "deadlock\ndeadlockwebhook\ndeadlock_webhook\n", code: 8, msg: `"deadlock-webhook" was not typed \(3 tries\), nothing was changed`, hint: "-"},
	{cmd: "admission disable", class: "node", args: "admission disable", stdin: "yse\n", code: 8, msg: `(?s)answer yes or no.*no answer on standard input to the confirmation, nothing was changed`, hint: `--yes`},
	{cmd: "lock break", class: "etcd", args: "lock break --etcd-endpoints $ETCD --etcd-cacert $ETCDCA --etcd-cert $ETCDCERT --etcd-key $ETCDKEY --dry-run", code: 0, out: `the cluster lock is free: nothing to break`, hint: "-"},

	// --- state directory problems
	{cmd: "journal list", class: "state", args: "journal list --state-dir $DIR/file", files: map[string]string{"file": "x"}, code: 2, msg: `state directory .*file is not a directory`, hint: `--state-dir`},
	{cmd: "admission disable", class: "state", args: "admission disable --state-dir $DIR/file --yes", files: map[string]string{"file": "x"}, code: 2, msg: `state directory .*file is not a directory`, hint: `--state-dir`},
	{cmd: "recover", class: "state", args: "recover --state-dir $DIR/file --yes", files: map[string]string{"file": "x"}, code: 2, msg: `state directory .*file is not a directory`, hint: `--state-dir`},
}

// runbookWith is a runbook whose disable step has the given parameter.
func runbookWith(param string) string {
	return "apiVersion: breakglass.dev/v1alpha1\nkind: Runbook\nmetadata:\n  name: r\nspec:\n  steps:\n" +
		"  - name: disable\n    action: admission.disable\n    with:\n      " + param + "\n" +
		"  - name: restore\n    action: admission.restore\n"
}

const kubeconfigText = `apiVersion: v1
kind: Config
clusters:
- cluster:
    server: https://127.0.0.1:6443
  name: c
contexts:
- context:
    cluster: c
    user: u
  name: c
current-context: c
users:
- name: u
  user:
    token: t
`

const webhookYAML = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: w
webhooks:
- name: w.example.com
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://127.0.0.1:9443/validate
  rules:
  - operations: ["*"]
    apiGroups: ["*"]
    apiVersions: ["*"]
    resources: ["*"]
`

const journalText = `{"time":"2026-01-01T00:00:00Z","kind":"incident","meta":{"id":"20260101-000000-aaaa","started":"2026-01-01T00:00:00Z","by":"t@h","nodes":["127.0.0.11"],"runbook":"webhook-deadlock","options":{"runbook":"webhook-deadlock"},"toolVersion":"dev"}}
`

// rehearsalJournal is a `recover --dry-run` interrupted at its disable:
// a rehearsal, never resumed for real.
const rehearsalJournal = `{"time":"2026-01-01T00:00:00Z","kind":"incident","meta":{"id":"20260101-000000-dddd","started":"2026-01-01T00:00:00Z","by":"t@h","nodes":["$NODE1"],"runbook":"webhook-deadlock","options":{"runbook":"webhook-deadlock","command":"recover"},"toolVersion":"dev","dryRun":true}}
{"time":"2026-01-01T00:00:01Z","kind":"begin","step":"disable","action":"admission.disable"}
`

// interruptedJournal is a recover on $NODE1 interrupted at its disable.
const interruptedJournal = `{"time":"2026-01-01T00:00:00Z","kind":"incident","meta":{"id":"20260101-000000-eeee","started":"2026-01-01T00:00:00Z","by":"t@h","nodes":["$NODE1"],"runbook":"webhook-deadlock","options":{"runbook":"webhook-deadlock","command":"recover"},"toolVersion":"dev","journalVersion":2}}
{"time":"2026-01-01T00:00:01Z","kind":"begin","step":"disable","action":"admission.disable"}
`

// standaloneFailed is an `admission disable` whose step failed: a
// standalone change, which resume cannot continue.
const standaloneFailed = `{"time":"2026-01-01T00:00:00Z","kind":"incident","meta":{"id":"20260101-000000-aaaa","started":"2026-01-01T00:00:00Z","by":"t@h","nodes":["127.0.0.11"],"runbook":"admission disable","toolVersion":"dev"}}
{"time":"2026-01-01T00:00:01Z","kind":"begin","step":"disable","action":"disable-admission"}
{"time":"2026-01-01T00:00:02Z","kind":"end","step":"disable","outcome":"failed","error":"boom"}
`

func TestCatalogue(t *testing.T) {
	if len(catalogue) < 120 {
		t.Fatalf("the catalogue has %d cases; issue 13 asks for at least 120", len(catalogue))
	}
	// The cluster lives as long as the test: a fixed deadline here failed the
	// whole catalogue on a loaded machine (key generation is slow there).
	ctx := t.Context()
	cluster, admin := emulatedCluster(t, ctx, talostest.ClusterOptions{ControlPlanes: 2, Workers: 1,
		Kubelet: talostest.KubeletOptions{TimeScale: 0.005}})
	reader, err := cluster.Talosconfig(role.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the admin talosconfig readable by everyone (for the warning).
	loose := filepath.Join(t.TempDir(), "loose")
	raw, err := os.ReadFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(loose, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	etcdSrv := etcdtest.StartTLS(t)
	etcdKV := etcdSrv.TestClient(t)
	hook, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook("deadlock-webhook", "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdKV.Put(ctx, "/registry/validatingwebhookconfigurations/deadlock-webhook", string(hook)); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"$NODE1": cluster.Nodes[0].IP, "$NODE2": cluster.Nodes[1].IP, "$WORKER1": cluster.Nodes[2].IP,
		"$ETCDCERT": etcdSrv.CertFile, "$ETCDKEY": etcdSrv.KeyFile, "$ETCDCA": etcdSrv.CAFile, "$ETCD": etcdSrv.Endpoints[0],
		"$READER": reader, "$LOOSE": loose,
	}
	nodesBefore := nodeConfigs(cluster)
	etcdBefore := etcdDump(t, etcdKV)
	looseBefore := treeOf(t, filepath.Dir(loose))

	byCmd, byClass := map[string]int{}, map[string]int{}
	for i, tc := range catalogue {
		byCmd[tc.cmd]++
		byClass[tc.class]++
		t.Run(fmt.Sprintf("%03d_%s", i, strings.ReplaceAll(tc.args, "/", "_")), func(t *testing.T) {
			runCatalogueCase(t, tc, admin, vars)
			if got := nodeConfigs(cluster); got != nodesBefore {
				t.Errorf("a node's config changed")
				nodesBefore = got
			}
			if got := etcdDump(t, etcdKV); got != etcdBefore {
				t.Errorf("etcd changed")
				etcdBefore = got
			}
		})
	}
	if got := treeOf(t, filepath.Dir(loose)); got != looseBefore {
		t.Errorf("the talosconfig given changed")
	}
	t.Logf("catalogue: %d cases; by command %v; by class %v", len(catalogue), sortedCounts(byCmd), sortedCounts(byClass))
}

func runCatalogueCase(t *testing.T, tc catCase, admin string, vars map[string]string) {
	dir := t.TempDir()
	subst := func(s string) string {
		s = strings.ReplaceAll(s, "$DIR", dir)
		// Longest names first: $ETCD is a prefix of $ETCDCERT.
		keys := make([]string, 0, len(vars))
		for k := range vars {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
		for _, k := range keys {
			s = strings.ReplaceAll(s, k, vars[k])
		}
		return s
	}
	for name, content := range tc.files {
		content = subst(content) // $NODE1 and the like in a journal
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		mode := fs.FileMode(0o600)
		if m, ok := tc.mode[name]; ok {
			mode = m
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", dir)
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("BREAKGLASS_STATE_DIR", filepath.Join(dir, "state"))
	t.Setenv("TALOSCONFIG", admin)
	for k, v := range tc.env {
		t.Setenv(k, subst(v))
	}
	args := append([]string{"breakglass"}, strings.Fields(subst(tc.args))...)
	before := treeOf(t, dir)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, streams{In: strings.NewReader(tc.stdin), Out: &out, Err: &errOut})
	stderr := errOut.String()
	if code != tc.code {
		t.Errorf("exit %d, want %d\nstderr:\n%s\nstdout:\n%s", code, tc.code, stderr, out.String())
	}
	if tc.msg != "" && !regexp.MustCompile(tc.msg).MatchString(stderr) {
		t.Errorf("stderr does not say %q:\n%s", tc.msg, stderr)
	}
	if tc.out != "" && !regexp.MustCompile(tc.out).MatchString(out.String()) {
		t.Errorf("stdout does not say %q:\n%s", tc.out, out.String())
	}
	var hints []string
	for _, l := range strings.Split(stderr, "\n") {
		if h, ok := strings.CutPrefix(l, "hint: "); ok {
			hints = append(hints, h)
		}
	}
	switch {
	case tc.hint == "-":
	case len(hints) == 0:
		t.Errorf("no hint names the next step:\n%s", stderr)
	case !regexp.MustCompile(tc.hint).MatchString(strings.Join(hints, "\n")):
		t.Errorf("no hint matches %q: %q", tc.hint, hints)
	}
	if tc.secret != "" && strings.Contains(stderr+out.String(), tc.secret) {
		t.Errorf("input content %q echoed:\n%s%s", tc.secret, stderr, out.String())
	}
	if after := treeOf(t, dir); !onlyNewJournal(before, after) {
		t.Errorf("the directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// onlyNewJournal tells whether after is before, plus at most one new
// incident journal: a run refused by the cluster (a worker node, a
// reader's role, a declined confirmation, a name not in etcd) reached the
// engine, which journals every standalone change, refused ones included,
// as the record of the attempt. Nothing else may appear, and nothing that
// was there may change.
func onlyNewJournal(before, after string) bool {
	if before == after {
		return true
	}
	old := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		old[l] = true
	}
	for _, l := range strings.Split(after, "\n") {
		if old[l] {
			delete(old, l)
			continue
		}
		if !regexp.MustCompile(`^state(/incidents(/\d{8}-\d{6}-[0-9a-f]+(/journal\.jsonl)?)?)? `).MatchString(l) {
			return false
		}
	}
	return len(old) == 0
}

// treeOf describes every file under dir (path, mode, content hash).
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %s", rel, info.Mode())
		if info.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func nodeConfigs(c *talostest.Cluster) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "%s %x %x\n", n.IP, sha256.Sum256(n.RunningConfig()), sha256.Sum256(n.PersistentConfig()))
	}
	return b.String()
}

func etcdDump(t *testing.T, cl *clientv3.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s %d %x\n", kv.Key, kv.ModRevision, sha256.Sum256(kv.Value))
	}
	return b.String()
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
