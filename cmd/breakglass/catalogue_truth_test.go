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
	)
}
