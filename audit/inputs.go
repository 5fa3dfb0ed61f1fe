package audit

// What an audit reads, gathered in one place for `breakglass audit` and
// for `breakglass-lab replay` (which installs what it reads on a scratch
// node, and audits it too): -f files and standard input, a live API
// server, etcd, the control planes' machine configs. audit reaches no
// cluster itself (it imports nothing that does: DESIGN.md, Layout); the
// command hands in Readers, made by recovery.AuditReaders, and gets back
// what was read, parsed, with the version the cluster runs.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Inputs say what to read.
type Inputs struct {
	Files      []string // -f, in order; "-" is standard input
	Kubeconfig string   // --kubeconfig: the admission objects of a live API server
	FromEtcd   bool     // --from-etcd
	// Nodes: read the machine configs of the nodes Readers.MachineConfigs
	// reaches (-n was given, and names control planes). ContextNodes: a
	// talosconfig is there, and with nothing else to audit its context's
	// nodes are read, as every command that talks to the nodes takes them.
	Nodes, ContextNodes bool
}

// nothingElse: no file, API server or etcd to read.
func (in Inputs) nothingElse() bool {
	return len(in.Files) == 0 && in.Kubeconfig == "" && !in.FromEtcd
}

// Readers fetch what Inputs name. A nil reader is a source the caller
// cannot reach; asking for it is an error.
type Readers struct {
	// File reads a -f argument ("-": standard input).
	File func(ctx context.Context, name string) ([]byte, error)
	// APIServer reads the admission objects of the API server a kubeconfig
	// file names, and the version it runs.
	APIServer func(ctx context.Context, kubeconfig string) (Source, Running, error)
	// Etcd lists the admission objects in etcd; version: also tell the
	// version the cluster runs.
	Etcd func(ctx context.Context, version bool) (*EtcdObjects, error)
	// MachineConfigs reads the control planes' machine configs through the
	// Talos API.
	MachineConfigs func(ctx context.Context) ([]NodeConfig, error)
}

// Source is one input as read: where from, and its bytes.
type Source struct {
	Name string
	Data []byte
}

// Running is the version a live cluster runs, and how that was learned
// (Evidence set and Version empty: it could not be told, and why).
type Running struct{ Version, Evidence string }

// EtcdObjects are the admission objects read from etcd.
type EtcdObjects struct {
	// Source is the readable ones as one manifest (a List), named after
	// the endpoints; Objects the same, decoded.
	Source  Source
	Objects []runtime.Object
	// Unreadable are those that cannot be decoded (encrypted at rest).
	Unreadable []Unreadable
	Running    Running
}

// NodeConfig is a node's machine config, and the kube-apiserver image it
// names ("" when it names none).
type NodeConfig struct {
	Node, Image string
	Data        []byte
}

// Gathered is what an audit read.
type Gathered struct {
	// Sources are the manifests read, in order: the files (a machine config
	// among them), the API server's, etcd's.
	Sources []Source
	// Configurations are the admission objects, parsed.
	Configurations []Configuration
	Unreadable     []Unreadable
	// ExtraArgs are the cluster.apiServer.extraArgs of the machine configs
	// read (files and nodes).
	ExtraArgs []ExtraArgs
	// Running is the version the cluster runs, when a live source says:
	// the API server's /version, else etcd's Nodes, else a node's image.
	Running Running
	// apiServer is the API server's source, among Sources; etcdObjects are
	// etcd's objects, decoded (Gather parses them, not etcd's manifest).
	apiServer   *Source
	etcdObjects []runtime.Object
}

// ReadSources reads what in names, without parsing it (what a replay
// installs): the files, the nodes' machine configs, the API server's and
// etcd's admission objects.
func ReadSources(ctx context.Context, in Inputs, r Readers) (*Gathered, error) {
	return read(ctx, in, r, nil)
}

// read reads what in names, in order, handing each file to file as soon
// as it is read (so that a file in error stops the gathering before any
// cluster is dialled).
func read(ctx context.Context, in Inputs, r Readers, file func(*Gathered, Source) error) (*Gathered, error) {
	g := &Gathered{}
	for _, f := range in.Files {
		if r.File == nil {
			return nil, errors.New("audit: no reader of files")
		}
		data, err := r.File(ctx, f)
		if err != nil {
			return nil, err
		}
		src := Source{Name: f, Data: data}
		g.Sources = append(g.Sources, src)
		if file != nil {
			if err := file(g, src); err != nil {
				return nil, err
			}
		}
	}
	if in.Nodes || in.ContextNodes && in.nothingElse() {
		if err := g.readNodes(ctx, r); err != nil {
			return nil, err
		}
	}
	if in.Kubeconfig != "" {
		if r.APIServer == nil {
			return nil, errors.New("audit: no reader of an API server")
		}
		src, running, err := r.APIServer(ctx, in.Kubeconfig)
		if err != nil {
			return nil, err
		}
		g.Sources = append(g.Sources, src)
		g.Running = running
		g.apiServer = &src
	}
	if in.FromEtcd {
		if r.Etcd == nil {
			return nil, errors.New("audit: no reader of etcd")
		}
		objs, err := r.Etcd(ctx, in.Kubeconfig == "")
		if err != nil {
			return nil, err
		}
		g.Sources = append(g.Sources, objs.Source)
		g.etcdObjects = objs.Objects
		g.Unreadable = append(g.Unreadable, objs.Unreadable...)
		if in.Kubeconfig == "" {
			g.Running = objs.Running
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return g, nil
}

// readNodes reads the nodes' machine configs for their extraArgs; the
// image of the first that names one says the version the cluster runs.
func (g *Gathered) readNodes(ctx context.Context, r Readers) error {
	if r.MachineConfigs == nil {
		return errors.New("audit: no reader of machine configs")
	}
	nodes, err := r.MachineConfigs(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		ea, err := MachineConfigArgs(n.Node, n.Data)
		if err != nil {
			return &nodeError{node: n.Node, err: err}
		}
		g.ExtraArgs = append(g.ExtraArgs, ea)
		if tag := imageTag(n.Image); tag != "" && g.Running.Evidence == "" {
			g.Running = Running{tag, "the kube-apiserver image in node " + n.Node + "'s machine config"}
		}
	}
	return nil
}

// nodeError is a machine config read from a node that cannot be audited,
// named by its node.
type nodeError struct {
	node string
	err  error
}

func (e *nodeError) Error() string {
	return fmt.Sprintf("node %s: read cluster.apiServer.extraArgs: %v", e.node, e.err)
}
func (e *nodeError) Unwrap() error { return e.err }

// Gather reads what in names and parses it: the admission objects, and
// the extraArgs of every machine config. With nothing at all to audit it
// says so, with the ways to give something.
func Gather(ctx context.Context, in Inputs, r Readers) (*Gathered, error) {
	g, err := read(ctx, in, r, (*Gathered).parseFile)
	if err != nil {
		return nil, err
	}
	if g.apiServer != nil {
		parsed, err := ParseNamed(g.apiServer.Name, g.apiServer.Data)
		if err != nil {
			return nil, err
		}
		g.Configurations = append(g.Configurations, parsed...)
	}
	parsed, err := FromObjects(g.etcdObjects...)
	if err != nil {
		return nil, err
	}
	g.Configurations = append(g.Configurations, parsed...)
	if !HasAdmissionObjects(g.Configurations) && !in.FromEtcd && in.Kubeconfig == "" && len(g.ExtraArgs) == 0 {
		return nil, failure.Input("breakglass audit -f webhooks.yaml (or a Talos machine config), --from-etcd, --kubeconfig FILE, "+
			"or -n CP1,CP2,CP3 (default: the talosconfig context's nodes) for the control planes' kube-apiserver flags", "nothing to audit")
	}
	return g, nil
}

// parseFile parses a -f file: its admission objects and, when it is a
// Talos machine config, its kube-apiserver flags.
func (g *Gathered) parseFile(src Source) error {
	parsed, err := ParseNamed(src.Name, src.Data)
	if err != nil {
		return err
	}
	g.Configurations = append(g.Configurations, parsed...)
	switch ea, err := MachineConfigArgs(src.Name, src.Data); {
	case err == nil:
		g.ExtraArgs = append(g.ExtraArgs, ea)
	case !errors.Is(err, ErrNotMachineConfig):
		return err
	}
	return nil
}

// WithRunning fills the upgrade in when the options leave it out: a live
// cluster's running minor to the next one (the restart of the newest
// modelled); files keep the incident's 1.32 -> 1.34. It returns what to
// tell the operator of that choice ("" when there is none to tell).
func (o *Options) WithRunning(running Running) (string, error) {
	if o.FromVersion != "" || running.Evidence == "" {
		return "", nil
	}
	if running.Version == "" {
		return fmt.Sprintf("audit: cannot tell the version the cluster runs (%s); auditing the upgrade 1.32 -> 1.34: pass --from and --to to choose", running.Evidence), nil
	}
	from, err := NormalizeVersion(running.Version)
	if err != nil {
		return "", failure.Hinted(err, "pass the upgrade to audit: --from 1.NN --to 1.NN")
	}
	o.FromVersion = from
	if o.ToVersion == "" && o.KubernetesVersion == "" {
		if o.ToVersion, err = NextVersion(from); err != nil {
			o.ToVersion = from // the newest modelled: its restart
		}
	}
	to := o.ToVersion
	if to == "" {
		to = o.KubernetesVersion
	}
	return fmt.Sprintf("audit: the cluster runs %s (%s); auditing the start of %s on it: pass --from and --to to choose", running.Version, running.Evidence, to), nil
}

// imageTag is the tag of an image reference ("" without one).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}
