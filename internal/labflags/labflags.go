// Package labflags defines the flags of breakglass-lab commands once, for
// breakglass-lab itself and for `breakglass lab`, which only names them
// (for help and the docs) and hands the command line over.
package labflags

import (
	"time"

	"github.com/urfave/cli/v2"
)

// ReplayTimeout is replay's default --timeout: kube-apiserver that can
// start does so in seconds; one that cannot exits by itself within about
// a minute (the service-IP repair gives up after one minute).
const ReplayTimeout = 90 * time.Second

// Replay are the flags of `replay`.
func Replay() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "from", Usage: "the Kubernetes version the cluster runs (vX.Y.Z; required)"},
		&cli.StringFlag{Name: "to", Usage: "the Kubernetes version to upgrade to (vX.Y.Z; required)"},
		&cli.StringSliceFlag{Name: "file", Aliases: []string{"f"}, Usage: "the cluster's admission objects (webhook configurations, admission policies and bindings, their params): YAML or JSON, many documents, Lists; - for standard input"},
		&cli.StringFlag{Name: "kubeconfig", Usage: "read the webhook configurations from a running API server with this kubeconfig"},
		&cli.BoolFlag{Name: "from-etcd", Usage: "read the admission objects straight from the cluster's etcd (works while its API server is down); needs --etcd-endpoints and client certificates"},
		&cli.StringSliceFlag{Name: "etcd-endpoints", EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Usage: "with --from-etcd: etcd client URLs; http:// for an etcd without TLS"},
		&cli.StringFlag{Name: "etcd-cacert", EnvVars: []string{"ETCDCTL_CACERT"}, Usage: "with --from-etcd: etcd CA certificate file (etcdctl --cacert)"},
		&cli.StringFlag{Name: "etcd-cert", EnvVars: []string{"ETCDCTL_CERT"}, Usage: "with --from-etcd: etcd client certificate file (etcdctl --cert)"},
		&cli.StringFlag{Name: "etcd-key", EnvVars: []string{"ETCDCTL_KEY"}, Usage: "with --from-etcd: etcd client key file (etcdctl --key)"},
		&cli.StringFlag{Name: "etcd-prefix", Value: "/registry", Usage: "with --from-etcd: kube-apiserver's --etcd-prefix"},
		&cli.StringFlag{Name: "kube-apiserver-dir", DefaultText: "$BREAKGLASS_KUBE_BIN_DIR", Usage: "directory holding vX.Y.Z/kube-apiserver for both versions"},
		&cli.BoolFlag{Name: "fix", Usage: "replay again with the fix `breakglass audit --fix` prints; the fixed run decides the exit code"},
		&cli.StringFlag{Name: "fix-style", Value: "apiserver", Usage: "with --fix: apiserver (exclude the user system:apiserver, recommended) or kinds (the incident's ServiceCIDR/IPAddress exclusions)"},
		&cli.DurationFlag{Name: "timeout", Value: ReplayTimeout, Usage: "how long kube-apiserver --to may take to become ready (10s to 1h)"},
		&cli.StringFlag{Name: "dir", DefaultText: "a temporary directory, removed after", Usage: "scratch directory for the replay's etcd, node and certificates (kept)"},
	}
}
