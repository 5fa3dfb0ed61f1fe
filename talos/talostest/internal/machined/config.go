package machined

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"

	"github.com/breakglass-dev/breakglass/internal/encryption"
)

// nodeConfig is a machine config as the node holds it: the exact bytes, and the
// machinery view of the documents this machinery knows.
type nodeConfig struct {
	raw  []byte
	prov talosconfig.Provider
}

func (m *Machined) logf(format string, args ...any) {
	m.host.Logf(format, args...)
}

// RunningConfig returns the bytes of the running config (COSI MachineConfig v1alpha1).
func (m *Machined) RunningConfig() []byte {
	return bytes.Clone(m.currentConfig().raw)
}

// PersistentConfig returns the bytes of the config on disk (COSI MachineConfig persistent).
func (m *Machined) PersistentConfig() []byte {
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()

	return bytes.Clone(m.persistent.raw)
}

func (m *Machined) currentConfig() *nodeConfig {
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()

	return m.running
}

// parseTalosVersion reads "v1.12.3" as (1, 12).
func parseTalosVersion(v string) (int, int, error) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("bad Talos version %q", v)
	}

	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])

	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad Talos version %q", v)
	}

	return major, minor, nil
}

// stringOnlyArgs is true for Talos before v1.13, whose extraArgs are map[string]string.
func (m *Machined) stringOnlyArgs() bool {
	major, minor, _ := parseTalosVersion(m.talosVersion)

	return major < 1 || (major == 1 && minor < 13)
}

// validationMode is the runtime mode configs are validated for: an installed metal node.
type validationMode struct{}

func (validationMode) String() string        { return "metal" }
func (validationMode) RequiresInstall() bool { return false }
func (validationMode) InContainer() bool     { return false }

// parseConfig loads and validates config bytes as the node's machined would; errors are
// gRPC InvalidArgument statuses with the loader's message.
func (m *Machined) parseConfig(raw []byte) (*nodeConfig, error) {
	kinds := m.opts.KnownKinds
	if major, minor, _ := parseTalosVersion(m.talosVersion); major > 1 || (major == 1 && minor >= 14) {
		// Talos 1.14 knows the KubeEtcdEncryptionConfig document; this
		// machinery does not: it is checked as machined checks it.
		kinds = append(slices.Clone(kinds), encryption.DocumentKind)
		if _, _, err := encryption.FromMachineConfig(raw); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}

	known, err := stripKinds(raw, kinds)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if m.stringOnlyArgs() {
		if err := checkStringArgs(known); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}

	prov, err := configloader.NewFromBytes(known)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if prov.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}

	if _, err := prov.Validate(validationMode{}); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	return &nodeConfig{raw: bytes.Clone(raw), prov: prov}, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*\r?\n`)

// stripKinds drops the documents whose kind is in kinds (documents a newer Talos knows
// and this machinery does not), keeping every other byte.
func stripKinds(raw []byte, kinds []string) ([]byte, error) {
	if len(kinds) == 0 {
		return raw, nil
	}

	parts := docSeparator.Split(string(raw), -1)
	kept := make([]string, 0, len(parts))
	dropped := false

	for _, p := range parts {
		var doc struct {
			Kind string `yaml:"kind"`
		}

		if err := yaml.Unmarshal([]byte(p), &doc); err == nil && doc.Kind != "" && slices.Contains(kinds, doc.Kind) {
			dropped = true

			continue
		}

		if strings.TrimSpace(p) != "" {
			kept = append(kept, p)
		}
	}

	if !dropped {
		return raw, nil
	}

	return []byte(strings.Join(kept, "---\n")), nil
}

// DocumentKinds lists the kinds of the YAML documents in text.
func DocumentKinds(text string) []string {
	var kinds []string

	for _, p := range docSeparator.Split(text, -1) {
		var doc struct {
			Kind string `yaml:"kind"`
		}

		if yaml.Unmarshal([]byte(p), &doc) == nil && doc.Kind != "" {
			kinds = append(kinds, doc.Kind)
		}
	}

	return kinds
}

// checkStringArgs refuses list values in extraArgs, which a Talos 1.11/1.12 loader
// cannot decode (its extraArgs are map[string]string).
func checkStringArgs(raw []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))

	for {
		var doc yaml.Node

		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return err
		}

		if len(doc.Content) == 0 {
			continue
		}

		root := doc.Content[0]

		for _, path := range [][]string{
			{"cluster", "apiServer", "extraArgs"},
			{"cluster", "controllerManager", "extraArgs"},
			{"cluster", "scheduler", "extraArgs"},
			{"cluster", "proxy", "extraArgs"},
			{"cluster", "etcd", "extraArgs"},
			{"machine", "kubelet", "extraArgs"},
		} {
			m := lookupYAML(root, path...)
			if m == nil || m.Kind != yaml.MappingNode {
				continue
			}

			for i := 1; i < len(m.Content); i += 2 {
				if v := m.Content[i]; v.Kind != yaml.ScalarNode {
					return fmt.Errorf("yaml: unmarshal errors:\n  line %d: cannot unmarshal %s into string", v.Line, v.ShortTag())
				}
			}
		}
	}
}

func lookupYAML(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}

		var next *yaml.Node

		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}

		n = next
	}

	return n
}

func (m *Machined) setPersistentLocked(cfg *nodeConfig) {
	m.persistent = cfg

	if err := m.st.Modify(m.ctx, newRawMachineConfig(config.PersistentID, nil), func(r resource.Resource) error {
		r.(*rawMachineConfig).spec.raw = bytes.Clone(cfg.raw)

		return nil
	}); err != nil {
		m.logf("writing persistent config: %v", err)
	}
}

// setRunningLocked makes cfg the running config (the MachineConfig resource) and lets
// the controllers that follow it catch up, in machined's order: on a control plane the
// APIServerConfig, then the static pods the kubelet fetches.
func (m *Machined) setRunningLocked(cfg *nodeConfig) {
	m.running = cfg

	if err := m.st.Modify(m.ctx, newRawMachineConfig(config.ActiveID, nil), func(r resource.Resource) error {
		r.(*rawMachineConfig).spec.raw = bytes.Clone(cfg.raw)

		return nil
	}); err != nil {
		m.logf("writing running config: %v", err)
	}

	if m.typ != machinetype.TypeControlPlane {
		return
	}

	m.writeAPIServerConfig(cfg)
	m.renderPodLocked()
}

// CertSANs are the extra names and addresses of the running config's machine
// certificate (machine.certSANs), which apid's certificate carries.
func (m *Machined) CertSANs() []string {
	return m.currentConfig().prov.Machine().Security().CertSANs()
}
