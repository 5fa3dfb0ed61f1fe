package main

// Catalogue cases of issue 21 ("an incident that tells the truth"): the
// inputs below the engine that were weak or wrong on the second look.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

// kindSwappedBackup is a well-formed backup file (sha256 and all) that an
// edit made hold a MutatingWebhookConfiguration's value under a
// ValidatingWebhookConfiguration's key (issue 21, case 8).
func kindSwappedBackup() string {
	v, err := etcdtest.EncodeProtobuf(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "inject"}}, admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(v)
	return fmt.Sprintf(`{"apiVersion":"breakglass.dev/v1","kind":"EtcdBackup","clusterID":"1","memberID":"1","revision":9,"time":"2026-01-01T00:00:00Z","toolVersion":"dev","prefix":"/registry",
"keys":[{"key":"/registry/validatingwebhookconfigurations/inject","resource":"validatingwebhookconfigurations","name":"inject","value":%q,"sha256":%q,"createRevision":2,"modRevision":2,"version":1,"encoding":"protobuf"}]}`,
		base64.StdEncoding.EncodeToString(v), hex.EncodeToString(sum[:]))
}

func init() {
	catalogue = append(catalogue,
		catCase{cmd: "etcd restore", class: "files", args: "etcd restore $DIR/swapped.json --yes", env: etcdEnv, files: map[string]string{"swapped.json": kindSwappedBackup()},
			code: 10, msg: `its value is a MutatingWebhookConfiguration, which does not belong under /registry/validatingwebhookconfigurations/`, hint: `corrupt or was edited`},
		// A backup cut short is a backup that fails verification (10), as a flipped byte is; on main it was "not a backup" (2).
		catCase{cmd: "etcd restore", class: "files", args: "etcd restore $DIR/cut.json --yes", env: etcdEnv, files: map[string]string{"cut.json": kindSwappedBackup()[:200]},
			code: 10, msg: `cut\.json: malformed backup file: truncated: the file ends after 200 bytes`, hint: `corrupt or was edited`},

		// Durations and numbers that do not parse say what they want (on main: "parse error").
		catCase{cmd: "admission disable", class: "flags", args: "admission disable --revert-after banana --yes", code: 2, msg: `invalid value "banana" for flag -revert-after: want a duration like 90s, 5m or 1h30m`, hint: `breakglass admission disable --help`},
		catCase{cmd: "admission status", class: "flags", args: "--connect-timeout banana admission status", code: 2, msg: `invalid value "banana" for flag -connect-timeout: want a duration like 90s, 5m or 1h30m`, hint: `--help`},
		catCase{cmd: "recover", class: "flags", args: "recover --revert-after 1hour --yes", code: 2, msg: `want a duration like 90s, 5m or 1h30m`, hint: `breakglass recover --help`},
		catCase{cmd: "diagnose", class: "flags", args: "diagnose --tail lots", code: 2, msg: `invalid value "lots" for flag -tail: want a whole number`, hint: `--help`},

		// A node or endpoint with a control character is refused before gRPC sees it (on main it split the output).
		catCase{cmd: "admission status", class: "node", args: "-n 127.0.0.11\x1b[2J admission status", code: 2, msg: `--nodes 127\.0\.0\.11\\x1b\[2J: not an address or host name`, hint: `--nodes 10\.5\.0\.2,10\.5\.0\.3`},
		catCase{cmd: "admission status", class: "node", args: "-e 127.0.\x070.1 admission status", code: 2, msg: `--endpoints 127\.0\.\\x070\.1: not an address`, hint: `--endpoints`},
	)
}
