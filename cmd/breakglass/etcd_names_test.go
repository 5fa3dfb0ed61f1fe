package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// What is in etcd, as breakglass prints and handles it (issue 13): names
// that could drive the terminal, an empty name, and keys that are not
// PREFIX/RESOURCE/NAME.

const (
	evilName = "evil\x1b[31mred\x1b]0;owned\a\u202e"
	// evilShown is evilName as internal/termsafe shows it.
	evilShown  = `evil\x1b[31mred\x1b]0;owned\x07\u202e`
	vwcPrefix  = "/registry/validatingwebhookconfigurations/"
	emptyKey   = vwcPrefix               // the name is empty
	nestedKey  = vwcPrefix + "ns/nested" // the name holds a slash
	oddEvilKey = vwcPrefix + "odd\x1b[2J/x"
)

// oddEtcd is a TLS etcd holding a fail-closed webhook configuration named
// evilName, a plain one, and the given extra keys (each holding a webhook
// configuration named "x"); conn are the flags that reach it.
func oddEtcd(t *testing.T, extra ...string) (kv *clientv3.Client, conn []string) {
	t.Helper()
	srv := etcdtest.StartTLS(t)
	kv = srv.TestClient(t)
	put := func(key, name string) {
		v, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook(name, "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(context.Background(), key, string(v)); err != nil {
			t.Fatal(err)
		}
	}
	put(vwcPrefix+evilName, evilName)
	put(vwcPrefix+"plain", "plain")
	for _, k := range extra {
		put(k, "x")
	}
	return kv, []string{"--etcd-endpoints", srv.Endpoints[0], "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}
}

// runArgs runs breakglass in-process with these exact arguments (names may
// hold anything but NUL) and a fresh state directory; no talosconfig.
func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("BREAKGLASS_STATE_DIR", filepath.Join(dir, "state"))
	t.Setenv("TALOSCONFIG", filepath.Join(dir, "no-talosconfig"))
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, append([]string{"breakglass"}, args...), streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

// noRawBytes fails when text holds a byte that could drive the terminal.
func noRawBytes(t *testing.T, what, text string) {
	t.Helper()
	for _, bad := range []string{"\x1b", "\a", "\u202e"} {
		if strings.Contains(text, bad) {
			t.Errorf("%s holds %q:\n%s", what, bad, text)
		}
	}
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not show %q:\n%s", what, w, text)
		}
	}
}

// Every place that prints a name read from etcd prints it safely: the
// delete plan, its dry run and its outcome, the not-found list (with the
// empty name as ""), etcd backup, and the audit's table.
func TestEtcdNamesPrintedSafelyEverywhere(t *testing.T) {
	kv, conn := oddEtcd(t, emptyKey, nestedKey)
	with := func(args ...string) []string { return append(args, conn...) }

	t.Run("delete dry run", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("--dry-run", "etcd", "delete", evilName)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		noRawBytes(t, "the plan and dry run", out+errOut)
		mustContain(t, "the plan", out,
			"ValidatingWebhookConfiguration "+evilShown+"\n",
			"key "+vwcPrefix+evilShown+",",
			"webhook "+evilShown+".breakglass.test:",
			"would delete "+vwcPrefix+evilShown+" (guard holds now)",
			"Dry run: nothing was written.")
	})

	t.Run("not found", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("etcd", "delete", "nosuch", "--yes")...)
		if code != 2 {
			t.Fatalf("exit %d, want 2\n%s%s", code, out, errOut)
		}
		noRawBytes(t, "the not-found error", out+errOut)
		mustContain(t, "the not-found error", errOut, `no admission object named "nosuch" (present: "", `+evilShown+", ns/nested, plain)")
	})

	t.Run("backup", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("etcd", "backup", evilName, "--out", filepath.Join(t.TempDir(), "b.json"))...)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		noRawBytes(t, "the backup's report", out+errOut)
		mustContain(t, "the backup's report", out, "  "+vwcPrefix+evilShown+" (mod revision")
	})

	t.Run("audit table", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("audit", "--from-etcd", "--from", "1.32", "--to", "1.34")...)
		if code != 24 {
			t.Fatalf("exit %d, want 24 (deadlock)\n%s%s", code, out, errOut)
		}
		noRawBytes(t, "the audit", out+errOut)
		if !regexp.MustCompile(`\ndeadlock +validating +` + regexp.QuoteMeta(evilShown) + ` +` + regexp.QuoteMeta(evilShown+".breakglass.test") + ` +Fail`).MatchString(out) {
			t.Errorf("the audit table does not show the configuration and its webhook:\n%s", out)
		}
		mustContain(t, "the audit", out, " ("+evilShown+", validating): failurePolicy Fail")
	})

	t.Run("delete", func(t *testing.T) {
		code, out, errOut := runArgs(t, with("--yes", "etcd", "delete", evilName, "--backup-dir", t.TempDir())...)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		noRawBytes(t, "the delete", out+errOut)
		mustContain(t, "the delete", out, "deleted "+vwcPrefix+evilShown+"\n")
		if resp, err := kv.Get(context.Background(), vwcPrefix+evilName); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("the object is still there (%v)", err)
		}
	})
}

// A key that is not PREFIX/RESOURCE/NAME is what is in etcd, not a corrupt
// backup file: its own message (the key shown safely, left alone, how to
// look at it), exit 9, and nothing written; the other objects are still
// backed up and deleted by name.
func TestEtcdOddKeyIsNotACorruptBackup(t *testing.T) {
	kv, conn := oddEtcd(t, emptyKey, nestedKey, oddEvilKey)
	with := func(args ...string) []string { return append(args, conn...) }
	before := etcdDump(t, kv)
	refused := func(t *testing.T, code int, out, errOut string, keys ...string) {
		t.Helper()
		if code != 9 {
			t.Errorf("exit %d, want 9\n%s%s", code, out, errOut)
		}
		noRawBytes(t, "the refusal", out+errOut)
		mustContain(t, "the refusal", errOut, append(keys, "not shaped PREFIX/RESOURCE/NAME", "kube-apiserver writes no such key, and breakglass leaves",
			"hint: inspect it with etcdctl (same endpoints and certificates): etcdctl get --prefix --keys-only "+vwcPrefix)...)
		for _, wrong := range []string{"backup file", "corrupt", "malformed"} {
			if strings.Contains(errOut, wrong) {
				t.Errorf("the refusal speaks of %q:\n%s", wrong, errOut)
			}
		}
		if etcdDump(t, kv) != before {
			t.Error("etcd changed")
		}
	}

	t.Run("backup of all", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "b.json")
		code, stdout, stderr := runArgs(t, with("etcd", "backup", "--out", out)...)
		refused(t, code, stdout, stderr, emptyKey+" (an empty name)", nestedKey+" (the name ns/nested holds a slash)", vwcPrefix+`odd\x1b[2J/x (the name odd\x1b[2J/x holds a slash)`)
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("a backup file was written: %v", err)
		}
	})
	t.Run("backup by name", func(t *testing.T) {
		code, stdout, stderr := runArgs(t, with("etcd", "backup", "plain", "--out", filepath.Join(t.TempDir(), "b.json"))...)
		if code != 0 {
			t.Errorf("exit %d\n%s%s", code, stdout, stderr)
		}
	})
	for _, name := range []string{"ns/nested", ""} {
		t.Run(fmt.Sprintf("delete %q", name), func(t *testing.T) {
			code, stdout, stderr := runArgs(t, with("--yes", "etcd", "delete", name, "--backup-dir", t.TempDir())...)
			key := nestedKey
			if name == "" {
				key = emptyKey
			}
			refused(t, code, stdout, stderr, key)
		})
	}
	t.Run("dry run", func(t *testing.T) {
		code, stdout, stderr := runArgs(t, with("--dry-run", "etcd", "delete", "ns/nested")...)
		refused(t, code, stdout, stderr, nestedKey)
		if strings.Contains(stdout, "Plan:") {
			t.Errorf("a plan was shown for a key breakglass will not touch:\n%s", stdout)
		}
	})
	t.Run("listed", func(t *testing.T) {
		code, stdout, stderr := runArgs(t, with("etcd", "webhooks")...)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		noRawBytes(t, "the listing", stdout)
		mustContain(t, "the listing", stdout, "ValidatingWebhookConfiguration \"\"\n", "ValidatingWebhookConfiguration ns/nested\n")
	})
}

// An unusable --backup-dir is refused before the delete opens a journal
// or dials etcd.
func TestEtcdDeleteBackupDirCheckedFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing listens on port 1: a dial would fail with exit 4.
	code, out, errOut := runArgs(t, "etcd", "delete", "w", "--yes", "--backup-dir", filepath.Join(file, "sub"),
		"--etcd-endpoints", "https://127.0.0.1:1", "--etcd-cacert", file, "--etcd-cert", file, "--etcd-key", file)
	if code != 2 || !strings.Contains(errOut, "cannot be created: "+file+" is a file") || !strings.Contains(errOut, "hint: give --backup-dir a directory") {
		t.Errorf("exit %d, want 2 naming the file in the way\n%s%s", code, out, errOut)
	}
	if strings.Contains(errOut, "journal") {
		t.Errorf("a journal was opened:\n%s", errOut)
	}
	if _, err := os.Stat(os.Getenv("BREAKGLASS_STATE_DIR")); !os.IsNotExist(err) {
		t.Errorf("the state directory was written: %v", err)
	}
}

// Without explicit etcd flags breakglass mints a client certificate from
// the Talos etcd CA and reaches https://NODE:2379; that keeps working, as
// does a given --etcd-cacert with a minted certificate, and certificates
// with -n need no talosconfig at all.
func TestEtcdConnectionPaths(t *testing.T) {
	// A loopback address of its own, so that port 2379 is free.
	ip := fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(250), 2+rand.IntN(250))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, admin := emulatedCluster(t, ctx, talostest.ClusterOptions{IPs: []string{ip}, Kubelet: talostest.KubeletOptions{TimeScale: 0.005}})
	ca, err := etcdtest.LoadCA(cluster.EtcdCA().Crt, cluster.EtcdCA().Key)
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdtest.StartTLS(t, etcdtest.WithCA(ca), etcdtest.WithHost(ip), etcdtest.WithClientPort(2379))
	kv := srv.TestClient(t)
	hook, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook("deadlock-webhook", "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, vwcPrefix+"deadlock-webhook", string(hook)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, talosconfig string
		args              []string
	}{
		{"minted, https://NODE:2379", admin, []string{"-n", ip, "etcd", "webhooks"}},
		{"minted, the context's nodes", admin, []string{"etcd", "webhooks"}},
		{"minted, with --etcd-cacert", admin, []string{"-n", ip, "etcd", "webhooks", "--etcd-cacert", srv.CAFile}},
		{"certificates and -n, no talosconfig", "", []string{"-n", ip, "etcd", "webhooks", "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}},
		{"certificates, the talosconfig's nodes", admin, []string{"etcd", "webhooks", "--etcd-cacert", srv.CAFile, "--etcd-cert", srv.CertFile, "--etcd-key", srv.KeyFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.talosconfig != "" {
				args = append([]string{"--talosconfig", tc.talosconfig}, args...)
			}
			code, out, errOut := runArgs(t, args...)
			if code != 0 || !strings.Contains(out, "ValidatingWebhookConfiguration deadlock-webhook") {
				t.Errorf("exit %d\n%s%s", code, out, errOut)
			}
		})
	}
}
