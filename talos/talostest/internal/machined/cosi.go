package machined

import (
	"context"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	configpb "github.com/siderolabs/talos/pkg/machinery/api/resource/config"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/authz"
)

// newNodeState builds the node's resource store the way machined does: an in-memory
// namespaced COSI state with the namespaces and resource definitions registered in
// the meta namespace (the API access filter looks the sensitivity up there).
func newNodeState(ctx context.Context) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))

	nsReg := registry.NewNamespaceRegistry(st)
	if err := nsReg.RegisterDefault(ctx); err != nil {
		return nil, err
	}

	for _, ns := range []struct {
		name resource.Namespace
		desc string
	}{
		{config.NamespaceName, "Talos node configuration."},
		{k8s.NamespaceName, "Kubernetes all node types resources."},
		{k8s.ControlPlaneNamespaceName, "Kubernetes control plane resources."},
		{secrets.NamespaceName, "Resources with secret material."},
		{v1alpha1.NamespaceName, "Talos v1alpha1 subsystems glue resources."},
		{cluster.NamespaceName, "Cluster configuration and discovery resources."},
		{etcd.NamespaceName, "etcd resources."},
	} {
		if err := nsReg.Register(ctx, ns.name, ns.desc); err != nil {
			return nil, err
		}
	}

	rdReg := registry.NewResourceRegistry(st)
	if err := rdReg.RegisterDefault(ctx); err != nil {
		return nil, err
	}

	for _, r := range []meta.ResourceWithRD{
		&config.MachineConfig{},
		&config.MachineType{},
		&k8s.APIServerConfig{},
		&k8s.StaticPod{},
		&k8s.StaticPodStatus{},
		&k8s.Nodename{},
		&secrets.EtcdRoot{},
		&secrets.Etcd{},
		&v1alpha1.Service{},
		&runtime.MachineStatus{},
		&cluster.Member{},
		&etcd.Member{},
	} {
		if err := rdReg.Register(ctx, r); err != nil {
			return nil, err
		}
	}

	return st, nil
}

// accessPolicy mirrors machined's resource API filter (internal/app/resources/access.go):
// read-only verbs only, unknown types and namespaces refused, sensitive types for os:admin.
func accessPolicy(st state.State) state.FilteringRule {
	return func(ctx context.Context, access state.Access) error {
		if !access.Verb.Readonly() {
			return status.Error(codes.PermissionDenied, "write access is not allowed")
		}

		rd, err := safe.StateGet[*meta.ResourceDefinition](ctx, st, resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, strings.ToLower(access.ResourceType), resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Error(codes.PermissionDenied, fmt.Sprintf("resource type %q is not supported", access.ResourceType))
			}

			return err
		}

		switch rd.TypedSpec().Sensitivity {
		case meta.Sensitive:
			if !authz.Roles(ctx).Includes(role.Admin) {
				return authz.ErrNotAuthorized
			}
		case meta.NonSensitive:
		default:
			return fmt.Errorf("unexpected sensitivity %q", rd.TypedSpec().Sensitivity)
		}

		_, err = safe.StateGet[*meta.Namespace](ctx, st, resource.NewMetadata(meta.NamespaceName, meta.NamespaceType, access.ResourceNamespace, resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Error(codes.PermissionDenied, fmt.Sprintf("namespace %q is not supported", access.ResourceNamespace))
			}

			return err
		}

		return nil
	}
}

// rawMachineConfig is a MachineConfig resource that holds the submitted bytes verbatim.
// Talos serves MachineConfig as the YAML bytes of its config container; storing the
// bytes (instead of a parsed provider) also lets a node keep documents this machinery
// cannot decode, as a newer Talos node would.
type rawMachineConfig struct {
	md   resource.Metadata
	spec rawMachineConfigSpec
}

type rawMachineConfigSpec struct {
	raw []byte
}

func newRawMachineConfig(id resource.ID, raw []byte) *rawMachineConfig {
	r := &rawMachineConfig{
		md:   resource.NewMetadata(config.NamespaceName, config.MachineConfigType, id, resource.VersionUndefined),
		spec: rawMachineConfigSpec{raw: append([]byte(nil), raw...)},
	}
	r.md.Annotations().Set("talos.dev/yaml-spec", "1")

	return r
}

func (r *rawMachineConfig) Metadata() *resource.Metadata { return &r.md }
func (r *rawMachineConfig) Spec() any                    { return &r.spec }

func (r *rawMachineConfig) DeepCopy() resource.Resource { //nolint:ireturn
	return &rawMachineConfig{md: r.md.Copy(), spec: rawMachineConfigSpec{raw: append([]byte(nil), r.spec.raw...)}}
}

// MarshalProto encodes the spec exactly like machinery's MachineConfig does.
func (s *rawMachineConfigSpec) MarshalProto() ([]byte, error) {
	return proto.Marshal(&configpb.MachineConfigSpec{YamlMarshalled: s.raw})
}

// MarshalYAML renders the spec as the YAML string, like machinery's MachineConfig.
func (s *rawMachineConfigSpec) MarshalYAML() (any, error) {
	return string(s.raw), nil
}

var _ yaml.Marshaler = (*rawMachineConfigSpec)(nil)
