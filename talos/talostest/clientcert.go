package talostest

import (
	stdx509 "crypto/x509"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client/config"
)

// WriteTalosconfig writes to path a talosconfig (context "c") for
// endpoints whose admin client certificate, signed by signer, is valid
// from notBefore to notAfter with the extended key usage eku, trusting
// ca: the certificates apid refuses (expired, another cluster's, for
// server auth only) as well as the ones it accepts.
func WriteTalosconfig(path string, signer, ca *x509.PEMEncodedCertificateAndKey, notBefore, notAfter time.Time, eku []stdx509.ExtKeyUsage, endpoints ...string) error {
	authority, err := x509.NewCertificateAuthorityFromCertificateAndKey(signer)
	if err != nil {
		return err
	}
	kp, err := x509.NewKeyPair(authority, x509.CommonName("admin"), x509.Organization("os:admin"),
		x509.NotBefore(notBefore), x509.NotAfter(notAfter), x509.ExtKeyUsage(eku))
	if err != nil {
		return err
	}
	cfg := config.NewConfig("c", endpoints, ca.Crt, &x509.PEMEncodedCertificateAndKey{Crt: kp.CrtPEM, Key: kp.KeyPEM})
	return cfg.Save(path)
}
