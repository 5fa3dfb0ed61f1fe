package encryption

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"testing"

	"golang.org/x/crypto/nacl/secretbox"
)

// testKey is a 32-byte key derived from label: public, for tests only.
func testKey(label string) []byte {
	k := sha256.Sum256([]byte("breakglass test key " + label))
	return k[:]
}

// seal writes plain as kube-apiserver's provider t does with key name and
// raw key (k8s.io/apiserver pkg/storage/value/encrypt and the prefixes of
// pkg/server/options/encryptionconfig), AES-GCM authenticating etcdKey.
func seal(t *testing.T, p ProviderType, name string, key []byte, etcdKey string, plain []byte) []byte {
	t.Helper()
	var body []byte
	switch p {
	case Secretbox:
		var k [32]byte
		var nonce [24]byte
		copy(k[:], key)
		if _, err := rand.Read(nonce[:]); err != nil {
			t.Fatal(err)
		}
		body = secretbox.Seal(nonce[:], plain, &nonce, &k)
	case AESCBC:
		block, err := aes.NewCipher(key)
		if err != nil {
			t.Fatal(err)
		}
		pad := aes.BlockSize - len(plain)%aes.BlockSize
		body = make([]byte, aes.BlockSize, aes.BlockSize+len(plain)+pad)
		if _, err := rand.Read(body); err != nil {
			t.Fatal(err)
		}
		body = append(body, plain...)
		body = append(body, bytes.Repeat([]byte{byte(pad)}, pad)...)
		cipher.NewCBCEncrypter(block, body[:aes.BlockSize]).CryptBlocks(body[aes.BlockSize:], body[aes.BlockSize:])
	case AESGCM:
		block, err := aes.NewCipher(key)
		if err != nil {
			t.Fatal(err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			t.Fatal(err)
		}
		nonce := make([]byte, aead.NonceSize())
		if _, err := rand.Read(nonce); err != nil {
			t.Fatal(err)
		}
		body = aead.Seal(nonce, nonce, plain, []byte(etcdKey))
	default:
		t.Fatalf("seal: provider %s", p)
	}
	return append([]byte(EncryptedPrefix+string(p)+":v1:"+name+":"), body...)
}

// object is a stored Secret's plain value: protobuf's magic and some bytes.
var object = []byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12\x10some secret data")
