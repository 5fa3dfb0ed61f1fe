package talos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	cosiprotobuf "github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	configpb "github.com/siderolabs/talos/pkg/machinery/api/resource/config"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/jsonpath"
)

// Version returns the Talos version tag the node runs, e.g. "v1.13.8".
func (c *Client) Version(ctx context.Context, node string) (string, error) {
	resp, err := c.api.Version(client.WithNode(ctx, node))
	if err != nil {
		return "", c.nodeError(ctx, node, "read version", err)
	}
	for _, m := range resp.GetMessages() {
		if v := m.GetVersion(); v != nil {
			return v.GetTag(), nil
		}
	}
	return "", &NodeError{Node: node, Op: "read version", Err: fmt.Errorf("empty answer")}
}

// MachineConfig is a node's running config as the node stores it.
type MachineConfig struct {
	Bytes   []byte // exactly as submitted to the node
	Version resource.Version
}

// Hash is the sha256 of the config bytes, recorded instead of the config
// itself (which holds CA keys).
func (m MachineConfig) Hash() string { return HashConfig(m.Bytes) }

// HashConfig is the hash breakglass records for a config.
func HashConfig(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ReadMachineConfig reads the running ("v1alpha1") machine config's raw
// bytes. It skips the typed decoding on purpose: a config written for a
// newer Talos may hold document kinds this machinery does not know.
func (c *Client) ReadMachineConfig(ctx context.Context, node string) (MachineConfig, error) {
	return c.readMachineConfig(ctx, node, config.ActiveID)
}

// ReadConfigFacts reads the running machine config and the facts
// breakglass needs from it; a config it cannot read is the node's error.
func (c *Client) ReadConfigFacts(ctx context.Context, node string) (MachineConfig, ConfigFacts, error) {
	mc, err := c.ReadMachineConfig(ctx, node)
	if err != nil {
		return mc, ConfigFacts{}, err
	}
	facts, err := ReadFacts(mc.Bytes)
	if err != nil {
		return mc, facts, &NodeError{Node: node, Op: "read machine config", Err: err}
	}
	return mc, facts, nil
}

// ReadPersistentConfig reads the config on the node's disk ("persistent").
// It differs from the running one while someone's TRY change is pending
// (running changed, disk not) or a STAGED change waits for a reboot (disk
// changed, running not).
func (c *Client) ReadPersistentConfig(ctx context.Context, node string) (MachineConfig, error) {
	return c.readMachineConfig(ctx, node, config.PersistentID)
}

func (c *Client) readMachineConfig(ctx context.Context, node, id string) (MachineConfig, error) {
	md := resource.NewMetadata(config.NamespaceName, config.MachineConfigType, id, resource.VersionUndefined)
	r, err := c.api.COSI.Get(client.WithNode(ctx, node), md, state.WithGetUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
	if err != nil {
		return MachineConfig{}, c.nodeError(ctx, node, "read machine config", err)
	}
	raw, ok := r.(*cosiprotobuf.Resource)
	if !ok {
		return MachineConfig{}, &NodeError{Node: node, Op: "read machine config", Err: fmt.Errorf("unexpected resource type %T", r)}
	}
	msg, err := raw.Marshal()
	if err != nil {
		return MachineConfig{}, &NodeError{Node: node, Op: "read machine config", Err: err}
	}
	var spec configpb.MachineConfigSpec
	if err := proto.Unmarshal(msg.GetSpec().GetProtoSpec(), &spec); err != nil {
		return MachineConfig{}, &NodeError{Node: node, Op: "read machine config", Err: fmt.Errorf("decode: %w", err)}
	}
	return MachineConfig{Bytes: spec.GetYamlMarshalled(), Version: r.Metadata().Version()}, nil
}

// ApplyMode is how a config is applied: live, or live with automatic rollback.
type ApplyMode int

const (
	NoReboot ApplyMode = iota // apply now, no reboot, permanent
	Try                       // apply now, the node rolls back after TryTimeout
)

// ApplyRequest is one config to apply to one node.
type ApplyRequest struct {
	Config     []byte
	Mode       ApplyMode
	TryTimeout time.Duration // with Try: when the node rolls back by itself
	DryRun     bool          // the node validates and returns a diff; nothing changes
}

// ApplyResult is what the node said.
type ApplyResult struct {
	Mode     string   // the mode the node used, e.g. NO_REBOOT
	Details  string   // summary and diff, as the node wrote them
	Warnings []string // validation warnings
}

// Apply sends a config to the node. The mode is always set: the API's
// default is REBOOT, which must never happen by accident here.
func (c *Client) Apply(ctx context.Context, node string, req ApplyRequest) (ApplyResult, error) {
	pb := &machine.ApplyConfigurationRequest{Data: req.Config, DryRun: req.DryRun, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}
	if req.Mode == Try {
		pb.Mode = machine.ApplyConfigurationRequest_TRY
		pb.TryModeTimeout = durationpb.New(req.TryTimeout)
	}
	op := "apply config"
	if req.DryRun {
		op = "dry-run apply config"
	}
	resp, err := c.api.ApplyConfiguration(client.WithNode(ctx, node), pb)
	if err != nil {
		return ApplyResult{}, c.nodeError(ctx, node, op, err)
	}
	var out ApplyResult
	for _, m := range resp.GetMessages() {
		out.Mode = m.GetMode().String()
		out.Details = m.GetModeDetails()
		out.Warnings = append(out.Warnings, m.GetWarnings()...)
	}
	return out, nil
}

// APIServerPod is the kube-apiserver static pod as the node rendered it.
type APIServerPod struct {
	Args []string // the container's command line after the binary
	// Flags holds every value of each --name=value flag in Args, in order.
	// Talos 1.13 renders a list value in extraArgs as the flag repeated once
	// per item (--disable-admission-plugins=A --disable-admission-plugins=B).
	Flags   map[string][]string
	Image   string
	Version resource.Version // changes whenever the node re-renders the pod
}

// Flag is the value kube-apiserver uses for a single-valued flag: the last one given.
func (p APIServerPod) Flag(name string) (string, bool) {
	v := p.Flags[name]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// FlagList is a list flag (comma-separated, possibly repeated) read as
// kube-apiserver reads it: every occurrence, every item.
func (p APIServerPod) FlagList(name string) []string {
	return flaglist.Split(p.Flags[name]...)
}

// DisabledPlugins lists --disable-admission-plugins of the running pod.
func (p APIServerPod) DisabledPlugins() []string { return p.FlagList("disable-admission-plugins") }

// EnabledPlugins lists --enable-admission-plugins of the running pod.
func (p APIServerPod) EnabledPlugins() []string { return p.FlagList("enable-admission-plugins") }

// ReadAPIServerPod reads the rendered kube-apiserver static pod. It is not a
// sensitive resource: any role may read it, and on every Talos version it
// shows the flags that really run.
func (c *Client) ReadAPIServerPod(ctx context.Context, node string) (APIServerPod, error) {
	md := resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodType, "kube-apiserver", resource.VersionUndefined)
	sp, err := safe.StateGet[*k8s.StaticPod](client.WithNode(ctx, node), c.api.COSI, md)
	if err != nil {
		return APIServerPod{}, c.nodeError(ctx, node, "read kube-apiserver static pod", err)
	}
	out := APIServerPod{Flags: map[string][]string{}, Version: sp.Metadata().Version()}
	containers, _ := jsonpath.Get(sp.TypedSpec().Pod, "spec", "containers").([]any)
	for _, ct := range containers {
		m, _ := ct.(map[string]any)
		if m["name"] != "kube-apiserver" {
			continue
		}
		out.Image, _ = m["image"].(string)
		for _, key := range []string{"command", "args"} {
			list, _ := m[key].([]any)
			for _, a := range list {
				s, _ := a.(string)
				out.Args = append(out.Args, s)
			}
		}
	}
	for _, a := range out.Args {
		if name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok && strings.HasPrefix(a, "--") {
			out.Flags[name] = append(out.Flags[name], value)
		}
	}
	return out, nil
}

// PodStatus is what kubelet reports of the kube-apiserver static pod. Talos
// refreshes it from the kubelet every 15 s, so it lags what runs.
type PodStatus struct {
	Found         bool // false until kubelet reports the pod
	Ready         bool
	Running       bool
	StartedAt     time.Time
	RestartCount  int
	WaitingReason string // e.g. CrashLoopBackOff
	ContainerID   string
}

// EtcdHealth is what the node says of its etcd service.
type EtcdHealth int

const (
	EtcdHealthUnknown EtcdHealth = iota // the node does not say (no such resource on this version)
	EtcdHealthy
	EtcdUnhealthy
)

// ReadEtcdHealth reads the node's etcd service health (COSI runtime
// Services "etcd", any role). Talos renders the control-plane static pods
// only while it is healthy: elsewhere a new flag never reaches kube-apiserver.
func (c *Client) ReadEtcdHealth(ctx context.Context, node string) (EtcdHealth, error) {
	md := resource.NewMetadata(v1alpha1.NamespaceName, v1alpha1.ServiceType, "etcd", resource.VersionUndefined)
	svc, err := safe.StateGet[*v1alpha1.Service](client.WithNode(ctx, node), c.api.COSI, md)
	switch {
	case state.IsNotFoundError(err):
		return EtcdUnhealthy, nil // a control plane without an etcd service: Talos tears the pods down
	case err != nil:
		if errors.Is(nodeError(node, "", err, c.role), ErrUnreachable) { // a transport failure, not an unserved resource
			return EtcdHealthUnknown, c.nodeError(ctx, node, "read etcd service", err)
		}
		return EtcdHealthUnknown, nil // not served (older Talos, emulators): say nothing
	case svc.TypedSpec().Running && svc.TypedSpec().Healthy:
		return EtcdHealthy, nil
	case svc.TypedSpec().Unknown:
		return EtcdHealthUnknown, nil
	}
	return EtcdUnhealthy, nil
}

// NodeName is the Kubernetes node name of a Talos node.
func (c *Client) NodeName(ctx context.Context, node string) (string, error) {
	md := resource.NewMetadata(k8s.NamespaceName, k8s.NodenameType, k8s.NodenameID, resource.VersionUndefined)
	nn, err := safe.StateGet[*k8s.Nodename](client.WithNode(ctx, node), c.api.COSI, md)
	if err != nil {
		return "", c.nodeError(ctx, node, "read node name", err)
	}
	return nn.TypedSpec().Nodename, nil
}

// ReadAPIServerStatus reads the kube-apiserver static pod's status.
func (c *Client) ReadAPIServerStatus(ctx context.Context, node, nodeName string) (PodStatus, error) {
	md := resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodStatusType, "kube-system/kube-apiserver-"+nodeName, resource.VersionUndefined)
	st, err := safe.StateGet[*k8s.StaticPodStatus](client.WithNode(ctx, node), c.api.COSI, md)
	if state.IsNotFoundError(err) {
		return PodStatus{}, nil
	}
	if err != nil {
		return PodStatus{}, c.nodeError(ctx, node, "read kube-apiserver status", err)
	}
	return parsePodStatus(st.TypedSpec().PodStatus), nil
}

func parsePodStatus(ps map[string]any) PodStatus {
	out := PodStatus{Found: true}
	conds, _ := ps["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			out.Ready = true
		}
	}
	statuses, _ := ps["containerStatuses"].([]any)
	for _, s := range statuses {
		m, _ := s.(map[string]any)
		if n, ok := m["name"].(string); ok && n != "kube-apiserver" {
			continue
		}
		out.RestartCount = toInt(m["restartCount"])
		out.ContainerID, _ = m["containerID"].(string)
		if running, ok := jsonpath.Get(m, "state", "running").(map[string]any); ok {
			out.Running = true
			if t, ok := running["startedAt"].(string); ok {
				out.StartedAt, _ = time.Parse(time.RFC3339, t)
			}
		}
		if reason, ok := jsonpath.Get(m, "state", "waiting", "reason").(string); ok {
			out.WaitingReason = reason
		}
	}
	return out
}

func toInt(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case int:
		return n
	case int64:
		return int(n)
	case uint64:
		return int(n)
	}
	return 0
}

// SplitList splits a comma-separated flag value, dropping blanks.
func SplitList(s string) []string { return flaglist.Split(s) }

// AdminKubeconfig fetches an admin kubeconfig for the cluster from the node
// (os:admin). The node mints it from the cluster CA, so it works while
// kube-apiserver is down.
func (c *Client) AdminKubeconfig(ctx context.Context, node string) ([]byte, error) {
	b, err := c.api.Kubeconfig(client.WithNode(ctx, node))
	if isNotControlPlane(err) {
		// A worker: the node's refusal, said as preflight says it.
		return nil, NewNodeError(node, "fetch admin kubeconfig", fmt.Errorf("%w: kube-apiserver does not run there", ErrNotControlPlane),
			"target only the control-plane nodes: -n CP1,CP2,CP3")
	}
	if err != nil {
		return nil, c.nodeError(ctx, node, "fetch admin kubeconfig", err)
	}
	return b, nil
}
