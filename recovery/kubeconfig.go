package recovery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Kubeconfig is what breakglass needs from a kubeconfig's current context.
type Kubeconfig struct {
	Server string      // the API server URL
	TLS    *tls.Config // the cluster CA to verify it, the client certificate to authenticate
}

// ParseKubeconfig reads a kubeconfig's current context. Only embedded
// certificate data is supported: Talos embeds everything.
func ParseKubeconfig(kubeconfig []byte) (Kubeconfig, error) {
	var kc struct {
		CurrentContext string `yaml:"current-context"`
		Clusters       []struct {
			Name    string `yaml:"name"`
			Cluster struct {
				Server string `yaml:"server"`
				CAData string `yaml:"certificate-authority-data"`
			} `yaml:"cluster"`
		} `yaml:"clusters"`
		Contexts []struct {
			Name    string `yaml:"name"`
			Context struct {
				Cluster string `yaml:"cluster"`
				User    string `yaml:"user"`
			} `yaml:"context"`
		} `yaml:"contexts"`
		Users []struct {
			Name string `yaml:"name"`
			User struct {
				CertData string `yaml:"client-certificate-data"`
				KeyData  string `yaml:"client-key-data"`
			} `yaml:"user"`
		} `yaml:"users"`
	}
	if err := yaml.Unmarshal(kubeconfig, &kc); err != nil {
		return Kubeconfig{}, fmt.Errorf("kubeconfig: %w", err)
	}
	var clusterName, userName string
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext || kc.CurrentContext == "" {
			clusterName, userName = c.Context.Cluster, c.Context.User
			break
		}
	}
	pool := x509.NewCertPool()
	var certPEM, keyPEM []byte
	var server string
	for _, c := range kc.Clusters {
		if c.Name == clusterName {
			server = c.Cluster.Server
			ca, err := base64.StdEncoding.DecodeString(c.Cluster.CAData)
			if err != nil || !pool.AppendCertsFromPEM(ca) {
				return Kubeconfig{}, errors.New("kubeconfig: the cluster CA cannot be read")
			}
		}
	}
	for _, u := range kc.Users {
		if u.Name == userName {
			certPEM, _ = base64.StdEncoding.DecodeString(u.User.CertData)
			keyPEM, _ = base64.StdEncoding.DecodeString(u.User.KeyData)
		}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return Kubeconfig{}, fmt.Errorf("kubeconfig: the admin certificate cannot be read: %w", err)
	}
	return Kubeconfig{Server: server, TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}, nil
}

// FetchWebhookConfigurations reads the validating and mutating webhook
// configurations and the admission policies and their bindings from a
// running API server, as JSON List documents (what
// audit.ParseWebhookConfigurations reads). A policy API the server does
// not serve (MutatingAdmissionPolicy is v1alpha1 on 1.32, v1beta1 on 1.34,
// off by default) is skipped.
func FetchWebhookConfigurations(ctx context.Context, kubeconfig []byte) ([]byte, error) {
	kc, err := ParseKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if kc.Server == "" {
		return nil, errors.New("kubeconfig: the current context names no server")
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: kc.TLS}, Timeout: 15 * time.Second}
	var docs []string
	served := map[string]bool{} // resources already read in a newer version
	for _, gvr := range []struct {
		version, res string
		optional     bool
	}{
		{"v1", "validatingwebhookconfigurations", false},
		{"v1", "mutatingwebhookconfigurations", false},
		{"v1", "validatingadmissionpolicies", true},
		{"v1", "validatingadmissionpolicybindings", true},
		{"v1beta1", "mutatingadmissionpolicies", true},
		{"v1beta1", "mutatingadmissionpolicybindings", true},
		{"v1alpha1", "mutatingadmissionpolicies", true},
		{"v1alpha1", "mutatingadmissionpolicybindings", true},
	} {
		res := gvr.res
		if served[res] {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(kc.Server, "/")+"/apis/admissionregistration.k8s.io/"+gvr.version+"/"+res, nil)
		req.Header.Set("Accept", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", res, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", res, err)
		}
		if gvr.optional && resp.StatusCode == http.StatusNotFound {
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("list %s: HTTP %d: %s", res, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		served[res] = true
		docs = append(docs, string(body))
	}
	return []byte(strings.Join(docs, "\n---\n")), nil
}
