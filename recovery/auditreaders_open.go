package recovery

import (
	"context"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/etcd"
)

// AuditReadersOpen are audit readers over what a caller has open already
// (the upgrade gate: one etcd client, the machine configs it read): etcd's
// admission objects through ec, and those configs.
func AuditReadersOpen(ec *etcd.Client, configs []audit.NodeConfig) audit.Readers {
	return audit.Readers{
		Etcd: func(ctx context.Context, version bool) (*audit.EtcdObjects, error) {
			return readEtcdObjects(ctx, ec, version)
		},
		MachineConfigs: func(context.Context) ([]audit.NodeConfig, error) { return configs, nil },
	}
}
