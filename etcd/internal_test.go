package etcd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func seedBackup(t testing.TB) []byte {
	objs := []Object{
		{Resource: kinds.ValidatingWebhookConfigurations, Name: "a", Key: "/registry/validatingwebhookconfigurations/a",
			CreateRevision: 5, ModRevision: 7, Version: 2, Encoding: EncodingProtobuf, Value: []byte("k8s\x00\x0a\x01x")},
		{Resource: kinds.MutatingAdmissionPolicies, Name: "b", Key: "/registry/mutatingadmissionpolicies/b",
			CreateRevision: 8, ModRevision: 8, Version: 1, Encoding: EncodingEncrypt, Value: []byte("k8s:enc:aescbc:v1:k:\x00\xff")},
	}
	b, err := NewBackup("/registry", ClusterInfo{ClusterID: 0xcdf818194e3a8c32, MemberID: 0x8e9e05c52164694d, Revision: 9}, objs, "v1.0.0", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzReadBackup: whatever the bytes, the reader either refuses them with a
// *BackupFileError or returns a backup whose every value matches its sha256
// and whose every key is an admission key under its prefix.
func FuzzReadBackup(f *testing.F) {
	seed := seedBackup(f)
	f.Add(seed)
	f.Add([]byte(`{"apiVersion":"breakglass.dev/v1","kind":"EtcdBackup"}`))
	f.Add([]byte(`{"apiVersion":"breakglass.dev/v2"}`))
	f.Add(bytes.Replace(seed, []byte(`"revision": 9`), []byte(`"revision": 1`), 1))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBackup(data)
		if err != nil {
			var bf *BackupFileError
			if !errors.As(err, &bf) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			if !errors.Is(err, ErrMalformedBackup) && !errors.Is(err, ErrUnsupportedBackupVersion) && !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if b.APIVersion != BackupAPIVersion || b.Kind != BackupKind || len(b.Keys) == 0 {
			t.Fatalf("accepted header %+v", b)
		}
		for _, k := range b.Keys {
			raw, err := k.RawValue()
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(raw)
			if hex.EncodeToString(sum[:]) != k.SHA256 && !bytes.EqualFold([]byte(hex.EncodeToString(sum[:])), []byte(k.SHA256)) {
				t.Fatalf("accepted %s with a wrong sha256", k.Key)
			}
			if r, name, ok := splitKey(b.Prefix, k.Key); !ok || r != k.Resource || name != k.Name {
				t.Fatalf("accepted key %q", k.Key)
			}
		}
		// What was accepted survives a rewrite.
		again, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseBackup(again); err != nil {
			t.Fatalf("re-encoded backup refused: %v", err)
		}
	})
}

func TestSeedBackupIsValid(t *testing.T) {
	if _, err := ParseBackup(seedBackup(t)); err != nil {
		t.Fatal(err)
	}
}

func TestSplitKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"/registry/validatingwebhookconfigurations/a":                              true,
		"/registry/mutatingadmissionpolicybindings/b":                              true,
		"/registry/admissionregistration.k8s.io/validatingwebhookconfigurations/a": false,
		"/registry/validatingwebhookconfigurations/":                               false,
		"/registry/validatingwebhookconfigurations/a/b":                            false,
		"/registry/secrets/kube-system/a":                                          false,
		"/registryx/validatingwebhookconfigurations/a":                             false,
	} {
		if _, _, got := splitKey("/registry", key); got != ok {
			t.Errorf("splitKey(%q) = %v", key, got)
		}
	}
}

func TestEncryptionProvider(t *testing.T) {
	for in, want := range map[string]string{
		"k8s:enc:aescbc:v1:key1:\x01\x02": "aescbc:v1:key1",
		"k8s:enc:kms:v2:vault:\x0a":       "kms:v2:vault",
		"k8s:enc:short":                   "unknown",
		"k8s:enc:a\x00b:v1:k:x":           "unknown",
	} {
		if got := encryptionProvider([]byte(in)); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

func TestTrailerHashAcrossWrites(t *testing.T) {
	db := bytes.Repeat([]byte{7}, 4096)
	sum := sha256.Sum256(db)
	stream := append(append([]byte{}, db...), sum[:]...)
	// Split the stream at every awkward place, including inside the trailer.
	for _, cut := range []int{1, 31, 32, 33, 4096, 4100, len(stream) - 1} {
		var out bytes.Buffer
		r := &chunkReader{data: stream, cut: cut}
		n, got, err := copySnapshot(&out, r)
		if err != nil || n != int64(len(stream)) || got != hex.EncodeToString(sum[:]) || !bytes.Equal(out.Bytes(), stream) {
			t.Fatalf("cut %d: n=%d sum=%s err=%v", cut, n, got, err)
		}
	}
}

type chunkReader struct {
	data []byte
	cut  int
	done bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, errEOF
	}
	n := len(r.data)
	if !r.done {
		n, r.done = r.cut, true
	}
	n = copy(p[:min(len(p), n)], r.data)
	r.data = r.data[n:]
	return n, nil
}

var errEOF = io.EOF

// An object last written in the v1beta1 days keeps that version in etcd,
// with v1beta1's defaults (Ignore, 30s) when the fields are unset.
func TestDecodeOldV1beta1Webhook(t *testing.T) {
	obj := &admissionregistrationv1beta1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Webhooks:   []admissionregistrationv1beta1.ValidatingWebhook{{Name: "old.example.com"}},
	}
	b, err := etcdtest.EncodeProtobuf(obj, admissionregistrationv1beta1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	o := decodeObject(kinds.ValidatingWebhookConfigurations, "old", "/registry/validatingwebhookconfigurations/old", b, 1, 1, 1)
	if !o.Decodable() || o.APIVersion != "admissionregistration.k8s.io/v1beta1" || len(o.Webhooks) != 1 ||
		o.Webhooks[0].FailurePolicy != "Ignore" || o.Webhooks[0].TimeoutSeconds != 30 || o.Webhooks[0].Target() != "none" {
		t.Fatalf("%+v", o)
	}
	// A value of the wrong kind under a resource is reported, not trusted.
	o = decodeObject(kinds.MutatingWebhookConfigurations, "old", "/registry/mutatingwebhookconfigurations/old", b, 1, 1, 1)
	if o.Decodable() || !strings.Contains(o.DecodeError, "does not belong") {
		t.Fatalf("%+v", o)
	}
	// A truncated protobuf value is undecodable, and still listed with its bytes.
	o = decodeObject(kinds.ValidatingWebhookConfigurations, "old", "/registry/validatingwebhookconfigurations/old", b[:len(b)/2], 1, 1, 1)
	if o.Decodable() || o.DecodeError == "" || o.Encoding != EncodingProtobuf || len(o.Value) != len(b)/2 {
		t.Fatalf("%+v", o)
	}
}

func BenchmarkDecodeWebhookConfiguration(b *testing.B) {
	value, err := etcdtest.EncodeProtobuf(etcdtest.FailClosedWebhook("bench", "https://127.0.0.1:9/validate"), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if o := decodeObject(kinds.ValidatingWebhookConfigurations, "bench", "/registry/validatingwebhookconfigurations/bench", value, 1, 2, 1); !o.Decodable() {
			b.Fatal(o.DecodeError)
		}
	}
}
