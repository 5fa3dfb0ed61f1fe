package talos

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/client"
)

// RestartKubelet restarts the node's kubelet service through the Talos API
// (machined's ServiceRestart, allowed for the kubelet): it returns once the
// service has stopped; Talos starts it again in the background. The pods'
// containers keep running, and the new kubelet fetches its static pods at
// once instead of at its next poll (every 20 s).
func (c *Client) RestartKubelet(ctx context.Context, node string) error {
	if _, err := c.api.ServiceRestart(client.WithNode(ctx, node), "kubelet"); err != nil {
		return c.nodeError(ctx, node, "restart the kubelet", err)
	}
	return nil
}
