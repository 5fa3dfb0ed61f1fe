package recovery

import (
	"strings"
	"testing"
)

func TestRedactSecrets(t *testing.T) {
	cases := map[string]string{
		"         key: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlK": "         key: <redacted>",
		"+    token: abcdef.0123456789abcdef":                            "+    token: <redacted>",
		"     secretboxEncryptionSecret: 0123456789abcdefABCDEF=":        "     secretboxEncryptionSecret: <redacted>",
		"         disable-admission-plugins: ValidatingAdmissionWebhook": "         disable-admission-plugins: ValidatingAdmissionWebhook",
		"     keySize: 4096": "     keySize: 4096",
		"     image: registry.k8s.io/kube-apiserver:v1.34.4": "     image: registry.k8s.io/kube-apiserver:v1.34.4",
	}
	for in, want := range cases {
		if got := redactSecrets(in); got != want {
			t.Errorf("redactSecrets(%q) = %q, want %q", in, got, want)
		}
	}
}

// Issue 29: names with dots, quotes and dashes hold secrets too: a TLS
// Secret's data in an inline manifest, a pull secret written as JSON, a
// dashed token. Dashed names that point at a file (kube-apiserver's
// tls-private-key-file) and yes/no flags (anonymous-auth) say nothing
// secret and stay.
func TestRedactSecretsNamesWithDotsQuotesDashes(t *testing.T) {
	const pem = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlK"
	for _, c := range []struct{ in, want string }{
		{"             tls.key: " + pem, "             tls.key: <redacted>"},
		{"+              tls.key: " + pem, "+              tls.key: <redacted>"},
		{"             tls.crt: " + pem, "             tls.crt: " + pem},
		{`             ".dockerconfigjson": "eyJhdXRocyI6e319"`, `             ".dockerconfigjson": <redacted>`},
		{`             ".dockerconfigjson": "eyJhdXRocyI6e319",`, `             ".dockerconfigjson": <redacted>,`},
		{"             .dockerconfigjson: e30=", "             .dockerconfigjson: <redacted>"},
		{`             'ssh.private-key': ` + pem, `             'ssh.private-key': <redacted>`},
		{`             "password": "hunter2"`, `             "password": <redacted>`},
		{"             bootstrap-token: abcdef.0123456789abcdef", "             bootstrap-token: <redacted>"},
		{"           - bootstrap-token: abcdef.0123456789abcdef", "           - bootstrap-token: <redacted>"},
		{"             client-secret: 0123456789abcdefABCDEF", "             client-secret: <redacted>"},
		{"             registry-password: pw", "             registry-password: <redacted>"},
		{"             tls-private-key-file: /system/secrets/kubernetes/kube-apiserver/apiserver.key", "             tls-private-key-file: /system/secrets/kubernetes/kube-apiserver/apiserver.key"},
		{"             service-account-key-file: /system/secrets/kubernetes/kube-apiserver/service-account.pub", "             service-account-key-file: /system/secrets/kubernetes/kube-apiserver/service-account.pub"},
		{"             kubelet-client-key: /system/secrets/kubernetes/kube-apiserver/apiserver-kubelet-client.key", "             kubelet-client-key: /system/secrets/kubernetes/kube-apiserver/apiserver-kubelet-client.key"},
		{`             anonymous-auth: "false"`, `             anonymous-auth: "false"`},
		{"             enable-bootstrap-token-auth: true", "             enable-bootstrap-token-auth: true"},
		{"             disable-admission-plugins: ValidatingAdmissionWebhook", "             disable-admission-plugins: ValidatingAdmissionWebhook"},
		{"             bootstrap-token-ttl: 1h", "             bootstrap-token-ttl: 1h"},
	} {
		if got := redactSecrets(c.in); got != c.want {
			t.Errorf("redactSecrets(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// A secret under a dotted name as a block scalar: its lines go too.
func TestRedactSecretsDottedBlock(t *testing.T) {
	in := "           stringData:\n             tls.key: |\n               MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n             tls.crt: x"
	want := "           stringData:\n             tls.key: |\n               <redacted>\n             tls.crt: x"
	if got := redactSecrets(in); got != want {
		t.Errorf("redactSecrets:\n got %q\nwant %q", got, want)
	}
}

// Issue 21, case 11: what main let through in the nodes' dry-run diff (and
// so in -o json, which carries the same text): short passwords, registry
// auths, and multi-line PEM keys, under a secret's name or any other.
func TestRedactSecretsPasswordsAuthsAndPEM(t *testing.T) {
	diff := `@@ -10,30 +10,30 @@
     registries:
         config:
             registry.example.com:
                 auth:
                     username: ops
-                    password: hunter2
+                    password: hunter3
                     auth: b3BzOmh1bnRlcjI=
                     identityToken: short
     files:
         - content: |
             -----BEGIN EC PRIVATE KEY-----
             MHcCAQEEIBkg4LVWM9nLQbEh8Dkz0M2tQ7JvGm7Yb1fJq2Kx9m3yoAoGCCqGSM49
             AwEHoUQDQgAEx0pN
             -----END EC PRIVATE KEY-----
           path: /var/etc/key.pem
     ca:
         crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
         key: |
             MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7
             VJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNb
     apiServer:
         extraArgs:
-            disable-admission-plugins: ""
+            disable-admission-plugins: ValidatingAdmissionWebhook
             tls-private-key-file: /system/secrets/kubernetes/kube-apiserver/apiserver.key
         password: ""`
	got := redactSecrets(diff)
	for _, secret := range []string{"hunter2", "hunter3", "b3BzOmh1bnRlcjI=", "MHcCAQEEIBkg4LVWM9", "AwEHoUQDQgAEx0pN", "MIIEvQIBADANBgkqhk", "VJTUt9Us8cKjMzEf"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q is shown:\n%s", secret, got)
		}
	}
	for _, kept := range []string{
		"-                    password: <redacted>", "+                    password: <redacted>", "                     auth: <redacted>",
		"username: ops", "identityToken: short", "-----BEGIN EC PRIVATE KEY-----", "             <redacted>\n             -----END EC PRIVATE KEY-----",
		"path: /var/etc/key.pem", "crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t", "         key: |\n             <redacted>\n     apiServer:",
		"+            disable-admission-plugins: ValidatingAdmissionWebhook", "tls-private-key-file: /system/secrets/kubernetes/kube-apiserver/apiserver.key", `password: ""`,
	} {
		if !strings.Contains(got, kept) {
			t.Errorf("the redacted diff does not show %q:\n%s", kept, got)
		}
	}
}
