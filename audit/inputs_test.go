package audit

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// fakeReaders are Readers that serve fixed data and count what was read.
type fakeReaders struct {
	files map[string]string
	nodes []NodeConfig
	read  []string
}

func (f *fakeReaders) readers() Readers {
	return Readers{
		File: func(_ context.Context, name string) ([]byte, error) {
			f.read = append(f.read, "file "+name)
			data, ok := f.files[name]
			if !ok {
				return nil, failure.Input("", "%s: no such file", name)
			}
			return []byte(data), nil
		},
		APIServer: func(context.Context, string) (Source, Running, error) {
			f.read = append(f.read, "apiserver")
			return Source{Name: "kc", Data: []byte(f.files["incident.yaml"])}, Running{"v1.33.4", "the API server's /version"}, nil
		},
		Etcd: func(_ context.Context, version bool) (*EtcdObjects, error) {
			f.read = append(f.read, "etcd")
			objs := &EtcdObjects{Source: Source{Name: "etcd https://127.0.0.1:2379"}, Unreadable: []Unreadable{{Kind: "ValidatingWebhookConfiguration", Name: "sealed", Reason: "encrypted value", Stored: "encrypted"}}}
			if version {
				objs.Running = Running{"v1.32.13", "the newest kubelet version of the Node objects in etcd"}
			}
			return objs, nil
		},
		MachineConfigs: func(context.Context) ([]NodeConfig, error) {
			f.read = append(f.read, "nodes")
			return f.nodes, nil
		},
	}
}

// The input gathering of breakglass audit (and of the lab's replay): what
// is read for which flags, the version the cluster runs and where that
// was learned, in one place.
func TestGather(t *testing.T) {
	incident, err := os.ReadFile("testdata/incident-kyverno-like.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mc, err := os.ReadFile("testdata/machineconfig/refused-flags-list.yaml")
	if err != nil {
		t.Fatal(err)
	}
	node := NodeConfig{Node: "10.5.0.2", Image: "registry.k8s.io/kube-apiserver:v1.33.13", Data: mc}
	for _, c := range []struct {
		name       string
		in         Inputs
		read       string
		configs    int
		extraArgs  int
		unreadable int
		running    Running
		err        string
	}{
		{"files", Inputs{Files: []string{"incident.yaml", "mc.yaml"}}, "file incident.yaml, file mc.yaml", 1, 1, 0, Running{}, ""},
		{"-n", Inputs{Nodes: true}, "nodes", 0, 1, 0, Running{"v1.33.13", "the kube-apiserver image in node 10.5.0.2's machine config"}, ""},
		{"the context's nodes, with nothing else", Inputs{ContextNodes: true}, "nodes", 0, 1, 0, Running{"v1.33.13", "the kube-apiserver image in node 10.5.0.2's machine config"}, ""},
		{"not the context's nodes beside a file", Inputs{Files: []string{"incident.yaml"}, ContextNodes: true}, "file incident.yaml", 1, 0, 0, Running{}, ""},
		{"etcd: its version", Inputs{FromEtcd: true}, "etcd", 0, 0, 1, Running{"v1.32.13", "the newest kubelet version of the Node objects in etcd"}, ""},
		{"the API server's version first", Inputs{Nodes: true, Kubeconfig: "kc", FromEtcd: true}, "nodes, apiserver, etcd", 1, 1, 1, Running{"v1.33.4", "the API server's /version"}, ""},
		{"nothing", Inputs{}, "", 0, 0, 0, Running{}, "nothing to audit"},
		{"a file in error, before any cluster is dialled", Inputs{Files: []string{"broken.yaml"}, Nodes: true, FromEtcd: true}, "file broken.yaml", 0, 0, 0, Running{}, "document 1"},
	} {
		f := &fakeReaders{files: map[string]string{"incident.yaml": string(incident), "mc.yaml": string(mc), "broken.yaml": "a: [b\n"}, nodes: []NodeConfig{node}}
		g, err := Gather(context.Background(), c.in, f.readers())
		if strings.Join(f.read, ", ") != c.read {
			t.Errorf("%s: read %q, want %q", c.name, strings.Join(f.read, ", "), c.read)
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || failure.Code(err) != int(failure.BadInput) {
				t.Errorf("%s: %v, want exit 2 saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(g.Configurations) != c.configs || len(g.ExtraArgs) != c.extraArgs || len(g.Unreadable) != c.unreadable || g.Running != c.running {
			t.Errorf("%s: %d configurations, %d extraArgs, %d unreadable, running %+v; want %d, %d, %d, %+v",
				c.name, len(g.Configurations), len(g.ExtraArgs), len(g.Unreadable), g.Running, c.configs, c.extraArgs, c.unreadable, c.running)
		}
	}
}

// A node's machine config that cannot be read for its extraArgs is named.
func TestGatherNamesTheNode(t *testing.T) {
	f := &fakeReaders{nodes: []NodeConfig{{Node: "10.5.0.3", Data: []byte("version: v1alpha1\ncluster:\n  apiServer:\n    extraArgs:\n      a: {b: c}\n")}}}
	_, err := Gather(context.Background(), Inputs{Nodes: true}, f.readers())
	if err == nil || !strings.HasPrefix(err.Error(), "node 10.5.0.3: read cluster.apiServer.extraArgs: ") || !errors.Is(err, ErrInvalidInput) {
		t.Errorf("%v", err)
	}
}

// The upgrade audited when the flags leave it out, and what is said of it.
func TestWithRunning(t *testing.T) {
	for _, c := range []struct {
		opts     Options
		running  Running
		from, to string
		note     string
	}{
		{Options{}, Running{}, "", "", ""},
		{Options{}, Running{"v1.33.4", "the API server's /version"}, "1.33", "1.34", "audit: the cluster runs v1.33.4 (the API server's /version); auditing the start of 1.34 on it"},
		{Options{}, Running{"v1.37.2", "x"}, "1.37", "1.37", "auditing the start of 1.37 on it"},
		{Options{}, Running{"", "no Node readable in etcd and no default ServiceCIDR"}, "", "", "cannot tell the version the cluster runs (no Node readable"},
		{Options{FromVersion: "1.32"}, Running{"v1.33.4", "x"}, "1.32", "", ""},
	} {
		o := c.opts
		note, err := o.WithRunning(c.running)
		if err != nil || o.FromVersion != c.from || o.ToVersion != c.to || !strings.Contains(note, c.note) || (c.note == "") != (note == "") {
			t.Errorf("%+v with %+v: from %q to %q, note %q, %v; want %q %q %q", c.opts, c.running, o.FromVersion, o.ToVersion, note, err, c.from, c.to, c.note)
		}
	}
}
