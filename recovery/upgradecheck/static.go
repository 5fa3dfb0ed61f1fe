package upgradecheck

// Admission objects loaded from files (KEP-5793, kube-apiserver 1.36+,
// behind the ManifestBasedAdmissionControlConfig gate): the admission
// plugins' configuration names a staticManifestsDir, and kube-apiserver
// reads every .yaml, .yml and .json in it at start. They are not in etcd.
// On Talos the configuration is cluster.apiServer.admissionControl, the
// directory reaches the static pod through cluster.apiServer.extraVolumes
// (a host path mounted at a path in the container), and the files are the
// machine config's machine.files: all of it in the machine config, which
// the gate reads. Files placed by other means are not seen: said so.

import (
	"path"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/audit"
)

// staticManifests are the admission objects one control plane loads from
// files, and the directories it names whose files its config does not hold.
type staticManifests struct {
	Node string
	// Files are the manifests found, by host path.
	Files []staticFile
	// Unseen are the staticManifestsDir values no machine.files entry fills.
	Unseen []string
}

type staticFile struct {
	Path    string // the host path (machine.files)
	Content []byte
}

// readStaticManifests reads them from one machine config.
func readStaticManifests(node string, config []byte) staticManifests {
	out := staticManifests{Node: node}
	dec := yaml.NewDecoder(strings.NewReader(string(config)))
	var dirs []string
	var mounts [][2]string // container path -> host path
	var files []staticFile
	for {
		var doc struct {
			Kind    string `yaml:"kind"`
			Machine struct {
				Files []struct {
					Path    string `yaml:"path"`
					Content string `yaml:"content"`
				} `yaml:"files"`
			} `yaml:"machine"`
			Cluster struct {
				APIServer struct {
					AdmissionControl []struct {
						Name          string         `yaml:"name"`
						Configuration map[string]any `yaml:"configuration"`
					} `yaml:"admissionControl"`
					ExtraVolumes []struct {
						HostPath  string `yaml:"hostPath"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"extraVolumes"`
				} `yaml:"apiServer"`
			} `yaml:"cluster"`
		}
		if err := dec.Decode(&doc); err != nil {
			break
		}
		if doc.Kind != "" {
			continue // a typed document
		}
		for _, ac := range doc.Cluster.APIServer.AdmissionControl {
			if d, ok := ac.Configuration["staticManifestsDir"].(string); ok && d != "" {
				dirs = append(dirs, path.Clean(d))
			}
		}
		for _, v := range doc.Cluster.APIServer.ExtraVolumes {
			mounts = append(mounts, [2]string{path.Clean(v.MountPath), path.Clean(v.HostPath)})
		}
		for _, f := range doc.Machine.Files {
			files = append(files, staticFile{Path: path.Clean(f.Path), Content: []byte(f.Content)})
		}
	}
	for _, d := range dirs {
		host := d // without a mount, the same path (a host path the pod already sees)
		for _, m := range mounts {
			if rel, ok := within(d, m[0]); ok {
				host = path.Join(m[1], rel)
			}
		}
		found := false
		for _, f := range files {
			ext := path.Ext(f.Path)
			if path.Dir(f.Path) == host && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				out.Files = append(out.Files, f)
				found = true
			}
		}
		if !found {
			out.Unseen = append(out.Unseen, d)
		}
	}
	sort.Slice(out.Files, func(i, j int) bool { return out.Files[i].Path < out.Files[j].Path })
	return out
}

// within is p's path below dir, if it is dir or below it.
func within(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	rel, ok := strings.CutPrefix(p, dir+"/")
	return rel, ok
}

// staticConfigurations parses the static manifests of every control plane.
// Every control plane loads its own files; the same object on several is
// audited once per node, each named NODE:PATH.
func staticConfigurations(ms []staticManifests) ([]audit.Configuration, []string, error) {
	var cfgs []audit.Configuration
	var unseen []string
	for _, m := range ms {
		for _, f := range m.Files {
			parsed, err := audit.ParseNamed(m.Node+":"+f.Path, f.Content)
			if err != nil {
				return nil, nil, err
			}
			cfgs = append(cfgs, parsed...)
		}
		for _, d := range m.Unseen {
			unseen = append(unseen, "node "+m.Node+": "+d)
		}
	}
	return cfgs, unseen, nil
}

// isStatic tells whether an object was loaded from a file: its name ends
// in .static.k8s.io (kube-apiserver refuses a static manifest named otherwise).
func isStatic(name string) bool { return strings.HasSuffix(name, ".static.k8s.io") }
