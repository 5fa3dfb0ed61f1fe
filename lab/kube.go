package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/recovery"
)

// KubeClient is the smallest Kubernetes API client the lab needs: JSON over
// HTTPS as the admin of an admin kubeconfig (client-go is deliberately not
// a dependency).
type KubeClient struct {
	Server string // https://IP:PORT from the kubeconfig
	http   *http.Client
}

// APIError is a non-2xx answer of kube-apiserver.
type APIError struct {
	Code    int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("kube-apiserver: HTTP %d: %s", e.Code, e.Message)
}

// NewKubeClient reads an admin kubeconfig (embedded data, as Talos writes it).
func NewKubeClient(kubeconfig []byte) (*KubeClient, error) {
	kc, err := recovery.ParseKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if kc.Server == "" {
		return nil, errors.New("kubeconfig: no server in the current context")
	}
	return &KubeClient{Server: kc.Server, http: newHTTPClient(kc.TLS)}, nil
}

func newHTTPClient(tlsConf *tls.Config) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     tlsConf,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			TLSHandshakeTimeout: 2 * time.Second,
			MaxIdleConnsPerHost: 4,
		},
		Timeout: 15 * time.Second,
	}
}

// WithServer returns a client for the same cluster that talks to another
// kube-apiserver (another node).
func (k *KubeClient) WithServer(server string) *KubeClient {
	return &KubeClient{Server: server, http: k.http}
}

// Do sends in (JSON) to path and decodes the answer into out (either may be nil).
func (k *KubeClient) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.Server+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A kube-apiserver that has just become ready may close a kept-alive
	// connection as the next request goes out (seen as EOF on a POST under
	// load). Marking the request replayable lets net/http send it again on a
	// new connection in exactly that case: only when the old connection failed
	// before the server could have read it. The nil value is never sent.
	req.Header["X-Idempotency-Key"] = nil
	resp, err := k.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &st) != nil || st.Message == "" {
			st.Message = strings.TrimSpace(string(data))
		}
		return &APIError{Code: resp.StatusCode, Message: st.Message}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Readyz asks /readyz?verbose: ready, and the names of the failing checks.
func (k *KubeClient) Readyz(ctx context.Context) (bool, []string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.Server+"/readyz?verbose", nil)
	if err != nil {
		return false, nil, err
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	var failing []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "[-]"); ok {
			name, _, _ := strings.Cut(rest, " ")
			failing = append(failing, name)
		}
	}
	return resp.StatusCode == http.StatusOK, failing, nil
}
