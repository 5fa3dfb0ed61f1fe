package recovery

import (
	"context"
	"io"
	"strings"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/talos"
)

// AuditReaders are how an audit (audit.Gather) or a replay
// (audit.ReadSources) reads a cluster: files and standard input, a live
// API server through a kubeconfig, etcd, and the control planes' machine
// configs through the Talos API. Without a Talos API (t nil: the lab),
// etcd is reached with the certificates given, and no machine config is
// read.
func AuditReaders(stdin io.Reader, eo EtcdOptions, t *talos.Options) audit.Readers {
	r := audit.Readers{
		File: func(ctx context.Context, name string) ([]byte, error) {
			return command.ReadInput(ctx, name, stdin, "pass the manifests with -f FILE, or - for standard input")
		},
		APIServer: readAPIServer,
		Etcd: func(ctx context.Context, version bool) (*audit.EtcdObjects, error) {
			ec, err := auditEtcd(ctx, eo, t)
			if err != nil {
				return nil, err
			}
			defer ec.Close()
			return readEtcdObjects(ctx, ec, version)
		},
	}
	if t != nil {
		r.MachineConfigs = func(ctx context.Context) ([]audit.NodeConfig, error) { return readMachineConfigs(ctx, *t) }
	}
	return r
}

// readAPIServer reads the admission objects of the API server a
// kubeconfig names, and the version it runs (its /version; when that
// cannot be read, why).
func readAPIServer(ctx context.Context, path string) (audit.Source, audit.Running, error) {
	kc, err := command.ReadFile(ctx, path, "pass a kubeconfig file: --kubeconfig FILE (talosctl kubeconfig writes one)")
	if err != nil {
		return audit.Source{}, audit.Running{}, err
	}
	data, err := FetchWebhookConfigurations(ctx, kc)
	if err != nil {
		return audit.Source{}, audit.Running{}, err
	}
	running := audit.Running{Evidence: "unknown"}
	if v, err := ServerVersion(ctx, kc); err == nil {
		running = audit.Running{Version: v, Evidence: "the API server's /version"}
	} else {
		running.Evidence = err.Error()
	}
	return audit.Source{Name: path, Data: data}, running, nil
}

// auditEtcd connects to etcd: through the Talos API when it must (a
// client certificate minted from the etcd CA), or, without one, with the
// certificates given only.
func auditEtcd(ctx context.Context, eo EtcdOptions, t *talos.Options) (*etcd.Client, error) {
	if t != nil {
		return DialEtcd(ctx, eo, *t)
	}
	if len(eo.Endpoints) == 0 {
		return nil, failure.Input("pass --etcd-endpoints URL with --etcd-cacert, --etcd-cert and --etcd-key (or ETCDCTL_*)", "--from-etcd needs the cluster's etcd endpoints")
	}
	return ConnectEtcd(ctx, nil, eo)
}

// readEtcdObjects lists every admission object in etcd: those it can
// decode as a manifest and as objects, the others by name.
func readEtcdObjects(ctx context.Context, ec *etcd.Client, version bool) (*audit.EtcdObjects, error) {
	l, err := ec.List(ctx, kinds.All)
	if err != nil {
		return nil, err
	}
	data, unreadable, err := l.Manifest()
	if err != nil {
		return nil, err
	}
	out := &audit.EtcdObjects{Source: audit.Source{Name: "etcd " + strings.Join(ec.Endpoints(), ","), Data: data}}
	for _, o := range l.Objects {
		if o.Decoded != nil {
			out.Objects = append(out.Objects, o.Decoded)
		}
	}
	for _, o := range unreadable {
		reason := string(o.Encoding) + " value"
		if o.DecodeError != "" {
			reason += " (" + o.DecodeError + ")"
		}
		out.Unreadable = append(out.Unreadable, audit.Unreadable{Kind: o.Kind, Name: o.Name, Reason: reason, Stored: string(o.Encoding)})
	}
	if version {
		v, evidence, err := EtcdClusterVersion(ctx, ec)
		if err != nil {
			return nil, err
		}
		out.Running = audit.Running{Version: v, Evidence: evidence}
	}
	return out, nil
}

// readMachineConfigs reads each node's machine config through the Talos
// API (os:admin), with the kube-apiserver image it names.
func readMachineConfigs(ctx context.Context, t talos.Options) ([]audit.NodeConfig, error) {
	tc, err := talos.Connect(ctx, t)
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	var out []audit.NodeConfig
	for _, node := range tc.Nodes() {
		mc, err := tc.ReadMachineConfig(ctx, node)
		if err != nil {
			return nil, err
		}
		nc := audit.NodeConfig{Node: node, Data: mc.Bytes}
		if facts, err := talos.ReadFacts(mc.Bytes); err == nil {
			nc.Image = facts.APIServerImage
		}
		out = append(out, nc)
	}
	return out, nil
}
