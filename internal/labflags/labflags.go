// Package labflags defines the flags of breakglass-lab commands once, for
// breakglass-lab itself and for `breakglass lab`, which only names them
// (for help and the docs) and hands the command line over.
package labflags

import (
	"fmt"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"
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
		&cli.StringSliceFlag{Name: "file", Aliases: []string{"f"}, Usage: "the cluster's admission objects (webhook configurations, admission policies and bindings, their params): YAML or JSON, many documents, Lists; or a control plane's Talos machine config, whose cluster.apiServer.extraArgs are replayed; - for standard input"},
		&cli.StringFlag{Name: "kubeconfig", Usage: "read the webhook configurations from a running API server with this kubeconfig"},
		&cli.BoolFlag{Name: "from-etcd", Usage: "read the admission objects straight from the cluster's etcd (works while its API server is down); needs --etcd-endpoints and client certificates"},
		&cli.StringSliceFlag{Name: "etcd-endpoints", EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Usage: "with --from-etcd: etcd client URLs; http:// for an etcd without TLS"},
		&cli.StringFlag{Name: "etcd-cacert", EnvVars: []string{"ETCDCTL_CACERT"}, Usage: "with --from-etcd: etcd CA certificate file (etcdctl --cacert)"},
		&cli.StringFlag{Name: "etcd-cert", EnvVars: []string{"ETCDCTL_CERT"}, Usage: "with --from-etcd: etcd client certificate file (etcdctl --cert)"},
		&cli.StringFlag{Name: "etcd-key", EnvVars: []string{"ETCDCTL_KEY"}, Usage: "with --from-etcd: etcd client key file (etcdctl --key)"},
		&cli.StringFlag{Name: "etcd-prefix", Value: "/registry", Usage: "with --from-etcd: kube-apiserver's --etcd-prefix"},
		&cli.GenericFlag{Name: "apiserver-arg", Value: &ArgList{}, Usage: "one of the cluster's own cluster.apiServer.extraArgs, KEY=VALUE (any key a machine config carries, but none naming an address, port, file, certificate, key or etcd: the lab owns those), for both versions as in the real upgrade; repeat for more; a value's commas are kept"},
		&cli.StringFlag{Name: "kube-apiserver-dir", DefaultText: "$BREAKGLASS_KUBE_BIN_DIR", Usage: "directory holding vX.Y.Z/kube-apiserver for both versions"},
		&cli.BoolFlag{Name: "fix", Usage: "replay again with the fix `breakglass audit --fix` prints; the fixed run decides the exit code"},
		&cli.StringFlag{Name: "fix-style", Value: "apiserver", Usage: "with --fix: apiserver (exclude the user system:apiserver, recommended) or kinds (the incident's ServiceCIDR/IPAddress exclusions)"},
		&cli.DurationFlag{Name: "timeout", Value: ReplayTimeout, Usage: "how long kube-apiserver --to may take to become ready (10s to 1h)"},
		&cli.StringFlag{Name: "dir", DefaultText: "a temporary directory, removed after", Usage: "scratch directory for the replay's etcd, node and certificates (kept)"},
	}
}

// ArgList is a repeatable KEY=VALUE flag whose values are kept whole (a
// --runtime-config value holds commas, which a string slice would split).
type ArgList map[string]string

// Set takes one KEY=VALUE; a key given twice is refused, not overwritten.
func (a *ArgList) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	k = strings.TrimPrefix(k, "--")
	switch {
	case !ok || k == "":
		return fmt.Errorf("want KEY=VALUE, e.g. feature-gates=MutatingAdmissionPolicy=true")
	}
	if _, twice := (*a)[k]; twice {
		return fmt.Errorf("%s given twice: give one value (comma-separated where kube-apiserver takes a list)", k)
	}
	if *a == nil {
		*a = ArgList{}
	}
	(*a)[k] = val
	return nil
}

func (a *ArgList) String() string {
	if a == nil {
		return ""
	}
	var out []string
	for k, v := range *a {
		out = append(out, k+"="+v)
	}
	return strings.Join(out, " ")
}

// UpScenarios are the scenarios `up --scenario` plays (lab.Scenarios; a
// lab test holds the two equal), RehearseScenarios those `rehearse` takes.
var (
	UpScenarios       = []string{"kyverno-servicecidr", "kyverno-servicecidr-excluded", "mutating-policy-servicecidr", "flags-multicidr", "flags-cloud-provider", "etcd-nospace", "etcd-member-lost", "etcd-quorum-lost", "encryption-key-renamed", "encryption-secret-regenerated", "encryption-provider-dropped"}
	RehearseScenarios = []string{"kyverno-servicecidr", "flags-multicidr", "flags-cloud-provider", "etcd-nospace", "etcd-member-lost", "etcd-quorum-lost"}
)

// UpScenario is `up`'s --scenario.
func UpScenario() cli.Flag {
	return &cli.StringFlag{Name: "scenario", Usage: "scenario to play: " + strings.Join(UpScenarios, ", ")}
}

// RehearseScenario is `rehearse`'s --scenario.
func RehearseScenario() cli.Flag {
	return &cli.StringFlag{Name: "scenario", Value: RehearseScenarios[0],
		Usage: "the incident to rehearse: " + strings.Join(RehearseScenarios, ", ") + " (the flags-* ones: kube-apiserver killed by its own flags, recovered as breakglass recover --yes runs it)"}
}

// UpBeforeUpgrade is `up`'s --before-upgrade.
func UpBeforeUpgrade() cli.Flag {
	return &cli.BoolFlag{Name: "before-upgrade", Usage: "stop before the scenario's upgrade, on the minor before the one its cause breaks (v1.33.13, or v1.32.13 for the causes 1.33 already refuses), for breakglass upgrade-check"}
}
