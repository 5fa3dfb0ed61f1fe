package machined

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// apiServerConfigSpec derives the APIServerConfig resource from the machine config,
// as machined's k8s.ControlPlaneAPIServerController does.
func apiServerConfigSpec(cfg config.Config) k8s.APIServerConfigSpec {
	extra := map[string]k8s.ArgValues{}
	for k, v := range cfg.Cluster().APIServer().ExtraArgs() {
		extra[k] = k8s.ArgValues{Values: v}
	}

	return k8s.APIServerConfigSpec{
		Image:                cfg.Cluster().APIServer().Image(),
		ControlPlaneEndpoint: cfg.Cluster().Endpoint().String(),
		EtcdServers:          []string{fmt.Sprintf("https://127.0.0.1:%d", constants.EtcdClientPort)},
		LocalPort:            cfg.Cluster().LocalAPIServerPort(),
		ServiceCIDRs:         cfg.Cluster().Network().ServiceCIDRs(),
		ExtraArgs:            extra,
		EnvironmentVariables: cfg.Cluster().APIServer().Env(),
		AdvertisedAddress:    "$(POD_IP)",
	}
}

// writeAPIServerConfig is machined's ControlPlaneAPIServerController: the
// APIServerConfig resource derived from the config.
func (m *Machined) writeAPIServerConfig(cfg *nodeConfig) {
	spec := apiServerConfigSpec(cfg.prov)
	if m.stringOnlyArgs() {
		// extraArgs moved to a new protobuf field in 1.13: a 1.13 client reads none from older nodes
		spec.ExtraArgs = nil
	}

	if err := m.st.Modify(m.ctx, k8s.NewAPIServerConfig(), func(r resource.Resource) error {
		*r.(*k8s.APIServerConfig).TypedSpec() = spec

		return nil
	}); err != nil {
		m.logf("writing APIServerConfig: %v", err)
	}
}

// TalosBaseArgs returns the kube-apiserver flags Talos v1.13 renders before merging
// the user's extraArgs (control_plane_static_pod.go), including its choice of
// authorization flags for the Kubernetes version named by the image tag.
func TalosBaseArgs(spec *k8s.APIServerConfigSpec) map[string]string {
	sec := func(f string) string { return filepath.Join(constants.KubernetesAPIServerSecretsDir, f) }
	cfgDir := func(f string) string { return filepath.Join(constants.KubernetesAPIServerConfigDir, f) }

	args := map[string]string{
		"admission-control-config-file":      cfgDir("admission-control-config.yaml"),
		"allow-privileged":                   "true",
		"anonymous-auth":                     "false",
		"api-audiences":                      spec.ControlPlaneEndpoint,
		"bind-address":                       "0.0.0.0",
		"client-ca-file":                     sec("ca.crt"),
		"enable-admission-plugins":           "NodeRestriction",
		"requestheader-client-ca-file":       sec("aggregator-ca.crt"),
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"proxy-client-cert-file":             sec("front-proxy-client.crt"),
		"proxy-client-key-file":              sec("front-proxy-client.key"),
		"enable-bootstrap-token-auth":        "true",
		"tls-min-version":                    "VersionTLS12",
		"tls-cipher-suites":                  "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", //nolint:lll
		"encryption-provider-config":         sec("encryptionconfig.yaml"),
		"audit-policy-file":                  cfgDir("auditpolicy.yaml"),
		"audit-log-path":                     filepath.Join(constants.KubernetesAuditLogDir, "kube-apiserver.log"),
		"audit-log-maxage":                   "30",
		"audit-log-maxbackup":                "10",
		"audit-log-maxsize":                  "100",
		"profiling":                          "false",
		"etcd-cafile":                        sec("etcd-client-ca.crt"),
		"etcd-certfile":                      sec("etcd-client.crt"),
		"etcd-keyfile":                       sec("etcd-client.key"),
		"etcd-servers":                       strings.Join(spec.EtcdServers, ","),
		"kubelet-client-certificate":         sec("apiserver-kubelet-client.crt"),
		"kubelet-client-key":                 sec("apiserver-kubelet-client.key"),
		"secure-port":                        strconv.Itoa(spec.LocalPort),
		"service-account-issuer":             spec.ControlPlaneEndpoint,
		"service-account-key-file":           sec("service-account.pub"),
		"service-account-signing-key-file":   sec("service-account.key"),
		"service-cluster-ip-range":           strings.Join(spec.ServiceCIDRs, ","),
		"tls-cert-file":                      sec("apiserver.crt"),
		"tls-private-key-file":               sec("apiserver.key"),
		"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
	}

	if spec.AdvertisedAddress != "" {
		args["advertise-address"] = spec.AdvertisedAddress
	}

	_, hasMode := spec.ExtraArgs["authorization-mode"]
	hasWebhook := false

	for k := range spec.ExtraArgs {
		if strings.HasPrefix(k, "authorization-webhook-") {
			hasWebhook = true
		}
	}

	minor := imageMinor(spec.Image)

	switch {
	case hasMode, hasWebhook, minor < 29:
		args["authorization-mode"] = "Node,RBAC"
	default:
		if minor < 30 {
			args["feature-gates"] = "StructuredAuthorizationConfiguration=true"
		}

		args["authorization-config"] = cfgDir("authorization-config.yaml")
	}

	return args
}

// imageMinor returns the Kubernetes minor version of an image tag like ...:v1.34.4, or 1<<10 when unknown.
func imageMinor(image string) int {
	i := strings.LastIndex(image, ":")
	if i < 0 {
		return 1 << 10
	}

	tag := strings.TrimPrefix(image[i+1:], "v")

	parts := strings.Split(tag, ".")
	if len(parts) < 2 {
		return 1 << 10
	}

	m, err := strconv.Atoi(parts[1])
	if err != nil {
		return 1 << 10
	}

	return m
}

type mergePolicy int

const (
	mergeOverwrite mergePolicy = iota
	mergeAdditive
	mergeDenied
)

// apiServerMergePolicies is Talos' table for kube-apiserver extraArgs.
var apiServerMergePolicies = map[string]mergePolicy{
	"enable-admission-plugins": mergeAdditive,
	"feature-gates":            mergeAdditive,
	"authorization-mode":       mergeAdditive,
	"tls-cipher-suites":        mergeAdditive,

	"etcd-servers":                     mergeDenied,
	"client-ca-file":                   mergeDenied,
	"requestheader-client-ca-file":     mergeDenied,
	"proxy-client-cert-file":           mergeDenied,
	"proxy-client-key-file":            mergeDenied,
	"encryption-provider-config":       mergeDenied,
	"etcd-cafile":                      mergeDenied,
	"etcd-certfile":                    mergeDenied,
	"etcd-keyfile":                     mergeDenied,
	"kubelet-client-certificate":       mergeDenied,
	"kubelet-client-key":               mergeDenied,
	"service-account-key-file":         mergeDenied,
	"service-account-signing-key-file": mergeDenied,
	"tls-cert-file":                    mergeDenied,
	"tls-private-key-file":             mergeDenied,
	"authorization-config":             mergeDenied,
}

// renderCommand merges extraArgs into the base flags with Talos' argsbuilder rules:
// overwrite by default (a list value gives the flag once per item), additive merge of
// comma lists for a few flags, and refusal of flags Talos manages itself.
func renderCommand(base map[string]string, extra map[string]k8s.ArgValues) ([]string, error) {
	args := make(map[string][]string, len(base)+len(extra))
	for k, v := range base {
		args[k] = []string{v}
	}

	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}

	slices.Sort(keys)

	for _, key := range keys {
		val := extra[key].Values

		switch apiServerMergePolicies[key] {
		case mergeDenied:
			return nil, fmt.Errorf("extra arg %q is not allowed", key)
		case mergeOverwrite:
			args[key] = slices.Clone(val)
		case mergeAdditive:
			seen := map[string]struct{}{}

			var values []string

			for _, v := range strings.Split(strings.Join(args[key], ","), ",") {
				v = strings.TrimSpace(v)
				if _, ok := seen[v]; v != "" && !ok {
					seen[v] = struct{}{}
					values = append(values, v)
				}
			}

			for v := range strings.SplitSeq(strings.Join(val, ","), ",") {
				v = strings.TrimSpace(v)
				if _, ok := seen[v]; v != "" && !ok {
					seen[v] = struct{}{}
					values = append(values, v)
				}
			}

			args[key] = []string{strings.Join(values, ",")}
		}
	}

	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}

	slices.Sort(names)

	cmd := []string{staticpod.Binary}

	for _, k := range names {
		for _, v := range args[k] {
			cmd = append(cmd, fmt.Sprintf("--%s=%s", k, v))
		}
	}

	return cmd, nil
}
