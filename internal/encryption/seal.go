package encryption

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"

	"golang.org/x/crypto/nacl/secretbox"
)

// Seal writes plain as kube-apiserver's provider t does with key k
// (k8s.io/apiserver pkg/storage/value/encrypt and the prefixes of
// pkg/server/options/encryptionconfig), AES-GCM authenticating etcdKey:
// for tests and recordings, which need values stored as a real
// kube-apiserver stores them; breakglass itself never encrypts.
func Seal(t ProviderType, k Key, etcdKey string, plain []byte) ([]byte, error) {
	key, err := k.Secret.bytes()
	if err != nil {
		return nil, err
	}
	var body []byte
	switch t {
	case Secretbox:
		if len(key) != 32 {
			return nil, fmt.Errorf("seal: a secretbox key is 32 bytes, not %d", len(key))
		}
		var kk [32]byte
		var nonce [24]byte
		copy(kk[:], key)
		if _, err := rand.Read(nonce[:]); err != nil {
			return nil, err
		}
		body = secretbox.Seal(nonce[:], plain, &nonce, &kk)
	case AESCBC:
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		pad := aes.BlockSize - len(plain)%aes.BlockSize
		body = make([]byte, aes.BlockSize, aes.BlockSize+len(plain)+pad)
		if _, err := rand.Read(body); err != nil {
			return nil, err
		}
		body = append(body, plain...)
		body = append(body, bytes.Repeat([]byte{byte(pad)}, pad)...)
		cipher.NewCBCEncrypter(block, body[:aes.BlockSize]).CryptBlocks(body[aes.BlockSize:], body[aes.BlockSize:])
	case AESGCM:
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		nonce := make([]byte, aead.NonceSize())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		body = aead.Seal(nonce, nonce, plain, []byte(etcdKey))
	default:
		return nil, fmt.Errorf("seal: provider %s holds no key", t)
	}
	return append([]byte(EncryptedPrefix+string(t)+":v1:"+k.Name+":"), body...), nil
}
