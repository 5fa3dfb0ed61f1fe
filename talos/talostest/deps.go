package talostest

import (
	_ "github.com/cosi-project/runtime/pkg/state"
	_ "github.com/cosi-project/runtime/pkg/state/impl/inmem"
	_ "github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	_ "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	_ "github.com/cosi-project/runtime/api/v1alpha1"
	_ "github.com/siderolabs/talos/pkg/machinery/client"
	_ "github.com/siderolabs/talos/pkg/machinery/client/config"
	_ "github.com/siderolabs/talos/pkg/machinery/config/generate"
	_ "github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	_ "github.com/siderolabs/talos/pkg/machinery/config/configloader"
	_ "github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	_ "github.com/siderolabs/talos/pkg/machinery/resources/config"
	_ "github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	_ "github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	_ "github.com/siderolabs/talos/pkg/machinery/api/machine"
	_ "github.com/siderolabs/talos/pkg/machinery/role"
)
