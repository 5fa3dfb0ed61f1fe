package talos

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// What is wrong with a talosconfig is said in plain words, with the next
// step, before anything is dialled.
func TestTalosconfigProblemsInPlainWords(t *testing.T) {
	pemCert := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	notPEM := base64.StdEncoding.EncodeToString([]byte("not pem"))
	for _, tc := range []struct {
		name, content, context string
		msg, hint              string
	}{
		{"absent", "", "", "cannot read talosconfig .*absent: no such file", "--talosconfig PATH"},
		{"empty", "\n \n", "", "talosconfig .*empty is empty", "talosctl config merge"},
		{"kubeconfig", "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://127.0.0.1:6443}\ncurrent-context: c\n", "", "kubeconfig is a kubeconfig, not a talosconfig", "pass the talosconfig"},
		{"nocurrent", "context: \"\"\ncontexts:\n  b: {endpoints: [127.0.0.1]}\n  a: {endpoints: [127.0.0.1]}\n", "", `has no current context \(it has: a, b\)`, "--context a"},
		{"absentctx", "context: a\ncontexts:\n  a: {endpoints: [127.0.0.1]}\n", "z", `has no context "z" \(it has: a\)`, "--context a"},
		{"nocontexts", "context: a\n", "", `has no context "a" \(it has: none\)`, "--context NAME"},
		{"notpem", "context: a\ncontexts:\n  a: {endpoints: [127.0.0.1], ca: " + notPEM + "}\n", "", `context "a": its ca is not a PEM certificate`, "talosctl config"},
		{"keynotpem", "context: a\ncontexts:\n  a: {endpoints: [127.0.0.1], ca: " + pemCert + ", crt: " + pemCert + ", key: " + notPEM + "}\n", "", `its key is not a PEM private key`, "talosctl config"},
		{"notbase64", "context: a\ncontexts:\n  a: {endpoints: [127.0.0.1], crt: '%%%'}\n", "", `its crt is not base64`, "talosctl config"},
		{"noendpoints", "context: a\ncontexts:\n  a: {}\n", "", `context "a" has no endpoints`, "-e ENDPOINT"},
		{"dir", "", "", "is a directory", "--talosconfig PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tc.name)
			switch tc.name {
			case "absent":
			case "dir":
				p = dir
			default:
				if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Connect(context.Background(), Options{Talosconfig: p, Context: tc.context})
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("%v is not a configuration error", err)
			}
			if !regexp.MustCompile(tc.msg).MatchString(err.Error()) {
				t.Errorf("error %q, want %q", err, tc.msg)
			}
			var h interface{ Hints() []string }
			if !errors.As(err, &h) || !strings.Contains(strings.Join(h.Hints(), "\n"), tc.hint) {
				t.Errorf("hints of %q do not say %q", err, tc.hint)
			}
			if tc.name == "absent" {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Error("a missing talosconfig was created")
				}
			}
		})
	}
}

func TestLooseKeyWarning(t *testing.T) {
	dir := t.TempDir()
	key := base64.StdEncoding.EncodeToString([]byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"))
	withKey := "context: a\ncontexts:\n  a: {endpoints: [127.0.0.1], key: " + key + "}\n"
	for _, tc := range []struct {
		content string
		mode    os.FileMode
		warn    bool
	}{
		{withKey, 0o600, false},
		{withKey, 0o640, true},
		{withKey, 0o644, true},
		{"context: a\ncontexts:\n  a: {endpoints: [127.0.0.1]}\n", 0o644, false}, // no key: nothing to protect
	} {
		p := filepath.Join(dir, "tc")
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		w := LooseKeyWarning(p)
		if (w != "") != tc.warn || (tc.warn && !strings.Contains(w, "holds a private key and is readable by others")) {
			t.Errorf("mode %04o: warning %q, want one: %v", tc.mode, w, tc.warn)
		}
	}
}
