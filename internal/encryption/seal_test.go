package encryption

import (
	"crypto/sha256"
	"testing"
)

// testKey is a 32-byte key derived from label: public, for tests only.
func testKey(label string) []byte {
	k := sha256.Sum256([]byte("breakglass test key " + label))
	return k[:]
}

// seal is Seal with a raw key, failing t on error.
func seal(t *testing.T, p ProviderType, name string, key []byte, etcdKey string, plain []byte) []byte {
	t.Helper()
	out, err := Seal(p, Key{Name: name, Secret: SecretOf(key)}, etcdKey, plain)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// object is a stored Secret's plain value: protobuf's magic and some bytes.
var object = []byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12\x10some secret data")
