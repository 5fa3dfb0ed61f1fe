package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sidero "github.com/siderolabs/crypto/x509"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// WebhookBackend is the policy engine's admission server: real HTTPS, real
// AdmissionReview v1, on a loopback port. It answers (allowed) only while
// the lab's "service network" is up, as a Kyverno pod behind a Service
// would; otherwise its port refuses connections. It counts what it answers.
type WebhookBackend struct {
	Addr     string // 127.0.0.1:PORT
	CABundle []byte // PEM of the lab CA that signed its certificate

	tlsConf  *tls.Config
	up       func(context.Context) bool
	interval time.Duration
	port     *talostest.PortReservation // Addr, held while the backend refuses

	mu       sync.Mutex
	srv      *http.Server
	lis      net.Listener
	serving  bool
	changes  []BackendChange
	answered atomic.Int64
	held     atomic.Bool
	byKind   sync.Map // kind -> *atomic.Int64

	cancel context.CancelFunc
	done   chan struct{}
}

// BackendChange is one switch of the backend between answering and refusing.
type BackendChange struct {
	At      time.Time `json:"at"`
	Serving bool      `json:"serving"`
}

// newWebhookBackend reserves a free port on 127.0.0.1 and makes a
// certificate from a fresh lab CA. It starts refusing; Start follows up().
func newWebhookBackend(up func(context.Context) bool) (*WebhookBackend, error) {
	ca, err := sidero.NewSelfSignedCertificateAuthority(sidero.CommonName("breakglass lab webhook CA"), sidero.ECDSA(true),
		sidero.NotAfter(time.Now().Add(certLifetime)))
	if err != nil {
		return nil, err
	}
	kp, err := sidero.NewKeyPair(ca,
		sidero.CommonName("kyverno-svc.kyverno.svc"),
		sidero.DNSNames([]string{"kyverno-svc.kyverno.svc"}),
		sidero.IPAddresses([]net.IP{net.ParseIP("127.0.0.1")}),
		sidero.NotAfter(time.Now().Add(certLifetime)),
		sidero.KeyUsage(x509.KeyUsageDigitalSignature),
		sidero.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, err
	}
	port, err := talostest.ReservePort("127.0.0.1", 0)
	if err != nil {
		return nil, err
	}
	return &WebhookBackend{
		Addr:     port.Addr(),
		port:     port,
		CABundle: ca.CrtPEM,
		tlsConf:  &tls.Config{Certificates: []tls.Certificate{*kp.Certificate}, MinVersion: tls.VersionTLS12},
		up:       up,
		interval: 50 * time.Millisecond,
	}, nil
}

// URL is the clientConfig.url of a webhook on this backend.
func (b *WebhookBackend) URL(path string) string { return "https://" + b.Addr + path }

// Answered is how many AdmissionReviews the backend has answered.
func (b *WebhookBackend) Answered() int64 { return b.answered.Load() }

// AnsweredKind is how many reviews of objects of this kind it answered.
func (b *WebhookBackend) AnsweredKind(kind string) int64 {
	if v, ok := b.byKind.Load(kind); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Hold keeps the backend down (connections refused) whatever the service
// network does, until Hold(false): a policy engine that is simply gone.
func (b *WebhookBackend) Hold(down bool) { b.held.Store(down) }

// Serving tells whether the backend answers right now.
func (b *WebhookBackend) Serving() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.serving
}

// Changes lists when the backend went up and down.
func (b *WebhookBackend) Changes() []BackendChange {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]BackendChange(nil), b.changes...)
}

// start follows up() until ctx ends or stop is called.
func (b *WebhookBackend) start(ctx context.Context) {
	ctx, b.cancel = context.WithCancel(ctx)
	b.done = make(chan struct{})
	go func() {
		defer close(b.done)
		t := time.NewTicker(b.interval)
		defer t.Stop()
		for {
			b.set(!b.held.Load() && b.up(ctx))
			select {
			case <-ctx.Done():
				b.set(false)
				return
			case <-t.C:
			}
		}
	}()
}

func (b *WebhookBackend) stop() {
	if b.cancel != nil {
		b.cancel()
		<-b.done
	}
	b.port.Close()
}

// set opens or closes the listener. Closing also drops every open
// connection: kube-apiserver's next call is refused, not answered late.
func (b *WebhookBackend) set(up bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if up == b.serving {
		return
	}
	if !up {
		b.srv.Close()
		b.lis.Close() // Serve may not have taken it yet: free the port now
		b.srv, b.lis, b.serving = nil, nil, false
		b.changes = append(b.changes, BackendChange{At: time.Now(), Serving: false})
		return
	}
	lis, err := b.port.Listen()
	if err != nil {
		return // the next tick retries
	}
	// kube-apiserver drops connections as it restarts: not worth a log line
	srv := &http.Server{Handler: http.HandlerFunc(b.review), TLSConfig: b.tlsConf, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(tls.NewListener(lis, b.tlsConf)) //nolint:errcheck
	b.srv, b.lis, b.serving = srv, lis, true
	b.changes = append(b.changes, BackendChange{At: time.Now(), Serving: true})
}

// review answers an AdmissionReview v1: allowed, no patch.
func (b *WebhookBackend) review(w http.ResponseWriter, r *http.Request) {
	in, ok := readReview(w, r)
	if !ok {
		return
	}
	out := admissionv1.AdmissionReview{
		TypeMeta: in.TypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: in.Request.UID, Allowed: true},
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		return
	}
	b.answered.Add(1)
	v, _ := b.byKind.LoadOrStore(in.Request.Kind.Kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// minorOf reads the Kubernetes minor version from an image tag (...:v1.34.4).
func minorOf(image string) (int, error) {
	i := len(image) - 1
	for i >= 0 && image[i] != ':' {
		i--
	}
	if i < 0 {
		return 0, errors.New("no tag")
	}
	var major, minor int
	tag := image[i+1:]
	if len(tag) > 0 && tag[0] == 'v' {
		tag = tag[1:]
	}
	if _, err := fmt.Sscanf(tag, "%d.%d", &major, &minor); err != nil {
		return 0, err
	}
	if major != 1 {
		return 0, errors.New("major version " + strconv.Itoa(major))
	}
	return minor, nil
}

// readReview reads an AdmissionReview v1 request, answering 400 to
// anything else.
func readReview(w http.ResponseWriter, r *http.Request) (admissionv1.AdmissionReview, bool) {
	var in admissionv1.AdmissionReview
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return in, false
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return in, false
	}
	return in, true
}
