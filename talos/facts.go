package talos

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// ConfigFacts are the few things breakglass needs to know about a machine
// config besides its extraArgs.
type ConfigFacts struct {
	MachineType    string // controlplane, init or worker
	ClusterName    string
	APIServerImage string
	EtcdCACert     []byte // PEM, from cluster.etcd.ca (admin-readable config only)
	EtcdCAKey      []byte
}

// IsControlPlane tells whether the node runs kube-apiserver.
func (f ConfigFacts) IsControlPlane() bool {
	return f.MachineType == "controlplane" || f.MachineType == "init"
}

// ReadFacts reads ConfigFacts from the v1alpha1 document of a config. It
// decodes loosely on purpose: other documents may be of kinds this
// machinery does not know, and they do not matter here.
func ReadFacts(config []byte) (ConfigFacts, error) {
	dec := yaml.NewDecoder(bytes.NewReader(config))
	for {
		var doc struct {
			Kind    string `yaml:"kind"`
			Machine struct {
				Type string `yaml:"type"`
			} `yaml:"machine"`
			Cluster struct {
				ClusterName string `yaml:"clusterName"`
				APIServer   struct {
					Image string `yaml:"image"`
				} `yaml:"apiServer"`
				Etcd struct {
					CA struct {
						Crt string `yaml:"crt"`
						Key string `yaml:"key"`
					} `yaml:"ca"`
				} `yaml:"etcd"`
			} `yaml:"cluster"`
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return ConfigFacts{}, fmt.Errorf("the machine config has no v1alpha1 document")
		}
		if err != nil {
			// A document we cannot even read as YAML: not ours to judge, but
			// without the v1alpha1 document there is nothing to work on.
			return ConfigFacts{}, fmt.Errorf("read machine config: %w", err)
		}
		if doc.Kind != "" || doc.Machine.Type == "" {
			continue
		}
		return ConfigFacts{
			MachineType:    strings.ToLower(doc.Machine.Type),
			ClusterName:    doc.Cluster.ClusterName,
			APIServerImage: doc.Cluster.APIServer.Image,
			EtcdCACert:     decodePEMField(doc.Cluster.Etcd.CA.Crt),
			EtcdCAKey:      decodePEMField(doc.Cluster.Etcd.CA.Key),
		}, nil
	}
}

// decodePEMField undoes the base64 wrapping Talos uses for PEM in configs.
func decodePEMField(s string) []byte {
	if s == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil
	}
	return b
}
