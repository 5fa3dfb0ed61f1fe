package etcd

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// MaxClientCertValidity is the longest life MintClientCert gives a certificate.
const MaxClientCertValidity = time.Hour

// MintClientCert signs a fresh client certificate with the etcd CA, in
// memory: nothing is written to disk. validFor must be positive and at most
// MaxClientCertValidity; the validity starts a minute in the past to absorb
// clock skew, and lasts validFor in total.
func MintClientCert(caCertPEM, caKeyPEM []byte, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if validFor <= 0 || validFor > MaxClientCertValidity {
		return nil, nil, fmt.Errorf("client certificate validity %s: must be between 0 and %s", validFor, MaxClientCertValidity)
	}
	caCert, err := parseCertPEM(caCertPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd CA certificate: %w", err)
	}
	if !caCert.IsCA {
		return nil, nil, errors.New("etcd CA certificate is not a CA")
	}
	caKey, err := parseKeyPEM(caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd CA key: %w", err)
	}
	if pub, ok := caKey.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(caCert.PublicKey) {
		return nil, nil, errors.New("etcd CA key does not match the CA certificate")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	notBefore := time.Now().Add(-time.Minute).UTC()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "breakglass", Organization: []string{"breakglass"}},
		NotBefore:    notBefore,
		NotAfter:     notBefore.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign client certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM certificate found")
		}
		if blk.Type == "CERTIFICATE" {
			return x509.ParseCertificate(blk.Bytes)
		}
	}
}

// parseKeyPEM accepts the key encodings Talos and openssl write: PKCS#8,
// SEC 1 (EC PRIVATE KEY), PKCS#1 (RSA PRIVATE KEY); ed25519 comes as PKCS#8
// (Talos also labels it "ED25519 PRIVATE KEY").
func parseKeyPEM(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM private key found")
		}
		var (
			k   any
			err error
		)
		switch blk.Type {
		case "PRIVATE KEY", "ED25519 PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		switch k := k.(type) {
		case *ecdsa.PrivateKey:
			return k, nil
		case *rsa.PrivateKey:
			return k, nil
		case ed25519.PrivateKey:
			return k, nil
		}
		return nil, fmt.Errorf("unsupported private key type %T", k)
	}
}
