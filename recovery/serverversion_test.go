package recovery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

func TestServerVersion(t *testing.T) {
	ca, err := etcdtest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	srvCrt, srvKey, _ := ca.IssueServer([]string{"127.0.0.1"}, time.Hour)
	cliCrt, cliKey, _ := ca.IssueClient("admin", time.Hour)
	cert, err := tls.X509KeyPair(srvCrt, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	var body atomic.Value
	body.Store(`{"major":"1","minor":"34","gitVersion":"v1.34.4"}`)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		w.Write([]byte(body.Load().(string)))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	kc := []byte(strings.Join([]string{
		"current-context: admin@lab",
		"clusters: [{name: lab, cluster: {server: '" + srv.URL + "', certificate-authority-data: " + b64(ca.CertPEM) + "}}]",
		"contexts: [{name: admin@lab, context: {cluster: lab, user: admin}}]",
		"users: [{name: admin, user: {client-certificate-data: " + b64(cliCrt) + ", client-key-data: " + b64(cliKey) + "}}]",
	}, "\n"))
	v, err := ServerVersion(context.Background(), kc)
	if err != nil || v != "v1.34.4" {
		t.Fatalf("ServerVersion: %q %v", v, err)
	}
	body.Store(`{"major":"1"}`)
	if _, err := ServerVersion(context.Background(), kc); err == nil || !strings.Contains(err.Error(), "gitVersion") {
		t.Errorf("no gitVersion: %v", err)
	}
}
