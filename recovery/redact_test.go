package recovery

import "testing"

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
