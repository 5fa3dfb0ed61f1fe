package recovery

import (
	"bytes"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
)

// Names, keys and decode errors read from etcd or a backup file reach the
// operator's terminal escaped (internal/termsafe); an empty name shows as "".
func TestEtcdRenderingIsTerminalSafe(t *testing.T) {
	const evil = "w\x1b[31m\a\u202e"
	var b bytes.Buffer
	RenderDeletePlan(&b, []string{"https://127.0.0.1:2379"}, &etcd.Plan{Objects: []etcd.Object{
		{Kind: "ValidatingWebhookConfiguration", Name: evil, Key: "/registry/validatingwebhookconfigurations/" + evil,
			Encoding: etcd.EncodingProtobuf, DecodeError: "bad byte \x1b in k8s\\x00", Webhooks: []etcd.Webhook{{Name: evil}}},
		{Kind: "ValidatingWebhookConfiguration", Name: "", Key: "/registry/validatingwebhookconfigurations/", Encoding: etcd.EncodingEncrypt, EncryptionProvider: "aescbc:v1:" + evil},
	}}, etcd.ExecuteOptions{BackupDir: "/tmp/b"})
	RenderRestore(&b, nil, &etcd.RestoreResult{Items: []etcd.RestoreItem{{Key: "/registry/validatingwebhookconfigurations/" + evil, Status: etcd.WouldRestore}}}, false)
	out := b.String()
	for _, bad := range []string{"\x1b", "\a", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("output holds %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{
		`ValidatingWebhookConfiguration w\x1b[31m\x07\u202e` + "\n",
		`key /registry/validatingwebhookconfigurations/w\x1b[31m\x07\u202e,`,
		`webhook w\x1b[31m\x07\u202e:`,
		`NOT DECODABLE: bad byte \x1b in k8s\x00`, // the decoder's own backslash kept
		`ValidatingWebhookConfiguration ""` + "\n",
		`encrypted (aescbc:v1:w\x1b[31m\x07\u202e)`,
		`  /registry/validatingwebhookconfigurations/w\x1b[31m\x07\u202e  `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not show %q:\n%s", want, out)
		}
	}
}
