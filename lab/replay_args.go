package lab

// Which of a cluster's cluster.apiServer.extraArgs a replay sets on its
// scratch node: every key a Talos machine config can carry, except those
// that would make the lab's kube-apiserver dial, read or write what the
// cluster's flags name, and those the lab itself owns.

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

var flagName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,99}$`)

// replayOwnedArgs are set by the lab for its own node: where it listens,
// its etcd, and its service CIDR.
var replayOwnedArgs = []string{"bind-address", "advertise-address", "secure-port", "permit-port-sharing", "permit-address-sharing",
	"endpoint-reconciler-type", "service-cluster-ip-range", "kubelet-port", "kubelet-read-only-port", "peer-advertise-ip", "peer-advertise-port",
	"help", "version"}

// replayHarmlessServiceAccount are the service-account flags that name no
// key, file or address.
var replayHarmlessServiceAccount = []string{"service-account-lookup", "service-account-extend-token-expiration", "service-account-max-token-expiration"}

// pathOrAddress matches flags whose value is a file, directory, socket,
// certificate, key, URL or configuration file: what the lab must never
// read, write or dial on this machine.
var pathOrAddress = regexp.MustCompile(`-file$|-dir$|-path$|cert|-key$|certificate|-ca-|socket|url$|uri$|endpoint|kubeconfig|manifest$|(?:^|-)config$|-config-`)

// ReplayArgRefusal says why a replay will not set an extraArgs key, or ""
// when it will.
func ReplayArgRefusal(key string) string {
	switch {
	case !flagName.MatchString(key):
		return "not a kube-apiserver flag name (lower-case letters, digits and '-')"
	case slices.Contains(replayOwnedArgs, key):
		return "the lab sets it for its own node (where it listens and what it serves)"
	case strings.HasPrefix(key, "etcd-"):
		return "the lab owns etcd"
	case strings.HasPrefix(key, "oidc-"):
		return "OIDC names an issuer the API server would dial"
	case strings.HasPrefix(key, "service-account-") && !slices.Contains(replayHarmlessServiceAccount, key):
		return "the lab owns the service-account keys and issuer"
	case key == "runtime-config" || key == "runtime-config-emulation-forward-compatible":
		return ""
	case pathOrAddress.MatchString(key):
		return "its value is a file, certificate, key or address on the cluster's nodes: the lab never reads, writes or dials what a cluster's flags name"
	}
	return ""
}

// checkReplayArgs refuses the keys a replay does not set, naming each.
func checkReplayArgs(args map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(args)) {
		if why := ReplayArgRefusal(k); why != "" {
			return failure.Input("leave it out: the replay takes every other cluster.apiServer.extraArgs key (feature-gates, runtime-config, admission plugins, removed or deprecated flags, ...)",
				"--apiserver-arg %s is not one the replay sets: %s", termsafe.String(k), why)
		}
	}
	return nil
}

// MachineConfigReplayArgs are the extraArgs of a machine config as a replay
// takes them: list values comma-joined (kube-apiserver reads a repeated
// list flag as one list), keys the replay does not set left out and named,
// quoted so that an empty one or one that would drive the terminal is
// seen. A key the config holds twice (its YAML repeats it, or two
// documents set it) is refused: Talos refuses such a config, and which
// value a cluster runs cannot be told.
func MachineConfigReplayArgs(ea audit.ExtraArgs) (map[string]string, []string, error) {
	args := map[string]string{}
	seen := map[string]bool{}
	var left []string
	for _, a := range ea.Args {
		if seen[a.Key] {
			return nil, nil, failure.Input("give each key once in cluster.apiServer.extraArgs (talosctl validate --config FILE --mode metal finds such a config)",
				"%s: cluster.apiServer.extraArgs %q is given twice", termsafe.String(ea.Source), a.Key)
		}
		seen[a.Key] = true
		if why := ReplayArgRefusal(a.Key); why != "" {
			left = append(left, fmt.Sprintf("%q (%s)", a.Key, why))
			continue
		}
		args[a.Key] = strings.Join(a.Values, ",")
	}
	return args, left, nil
}

// replayExtraArgs are the replay's args for the audit.
func replayExtraArgs(args map[string]string) []audit.ExtraArgs {
	if len(args) == 0 {
		return nil
	}
	ea := audit.ExtraArgs{Source: "the replayed extraArgs"}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		ea.Args = append(ea.Args, audit.ExtraArg{Key: k, Values: []string{args[k]}})
	}
	return []audit.ExtraArgs{ea}
}

// takeMachineConfigs moves the Talos machine configs among the sources
// into APIServerArgs (a key given both ways is refused) and returns the
// keys left out.
func (o *ReplayOptions) takeMachineConfigs() ([]string, error) {
	var kept []ReplaySource
	var left []string
	for _, src := range o.Sources {
		ea, err := audit.MachineConfigArgs(src.Name, src.Data)
		if errors.Is(err, audit.ErrNotMachineConfig) {
			kept = append(kept, src)
			continue
		}
		if err != nil {
			return nil, failure.Input("pass a Talos machine config (talosctl get machineconfig -o yaml, or the file you apply)", "%v", err)
		}
		args, l, err := MachineConfigReplayArgs(ea)
		if err != nil {
			return nil, err
		}
		for _, s := range l {
			left = append(left, termsafe.String(src.Name)+": "+s)
		}
		for k, v := range args {
			if prev, ok := o.APIServerArgs[k]; ok && prev != v {
				return nil, failure.Input("give each key once: in the machine config or with --apiserver-arg",
					"%s: extraArgs %s is %q, and %q elsewhere", termsafe.String(src.Name), termsafe.String(k), termsafe.Text(v), termsafe.Text(prev))
			}
			if o.APIServerArgs == nil {
				o.APIServerArgs = map[string]string{}
			}
			o.APIServerArgs[k] = v
		}
	}
	o.Sources = kept
	return left, nil
}
