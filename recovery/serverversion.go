package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
)

// ServerVersion asks a running API server for its version (GET /version,
// gitVersion, e.g. "v1.34.4") with the kubeconfig's current context.
func ServerVersion(ctx context.Context, kubeconfig []byte) (string, error) {
	kc, err := ParseKubeconfig(kubeconfig)
	if err != nil {
		return "", err
	}
	if kc.Server == "" {
		return "", errors.New("kubeconfig: the current context names no server")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: kc.TLS}, Timeout: 15 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(kc.Server, "/")+"/version", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /version: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("GET /version: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /version: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.GitVersion == "" {
		return "", fmt.Errorf("GET /version: no gitVersion in %.200q", body)
	}
	return v.GitVersion, nil
}

// EtcdClusterVersion tells, from etcd alone, the Kubernetes version a
// cluster runs: the newest kubelet version of its Node objects. With no
// readable Node, a stored default ServiceCIDR says 1.33 or later (every
// 1.33+ kube-apiserver creates it) and its absence says "" (unknown).
// evidence says where the answer came from, for the user.
func EtcdClusterVersion(ctx context.Context, ec *etcd.Client) (version, evidence string, err error) {
	versions, err := ec.KubeletVersions(ctx)
	if err != nil {
		return "", "", err
	}
	best, bestMinor := "", -1
	for _, v := range versions {
		var major, minor int
		if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor); err == nil && major == 1 && minor > bestMinor {
			best, bestMinor = v, minor
		}
	}
	if best != "" {
		return best, "the newest kubelet version of the Node objects in etcd", nil
	}
	exists, err := ec.KeyExists(ctx, "servicecidrs", "kubernetes")
	if err != nil {
		return "", "", err
	}
	if exists {
		return "v1.33.0", "no Node readable in etcd; the default ServiceCIDR exists, so at least 1.33", nil
	}
	return "", "no Node readable in etcd and no default ServiceCIDR", nil
}
