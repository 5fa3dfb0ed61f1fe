package talos

import (
	"bufio"
	"context"
	"errors"
	"io"
	"regexp"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// criPrefix is the CRI log line header ("TIMESTAMP STREAM TAG "); the
// message follows it.
var criPrefix = regexp.MustCompile(`^\S+ (stdout|stderr) [FP] `)

// APIServerLogs returns the last tail lines of the kube-apiserver container
// (the current one, or the last that ran), with the CRI headers removed.
// Logs are readable with os:reader and up.
func (c *Client) APIServerLogs(ctx context.Context, node, nodeName string, tail int) ([]string, error) {
	id := "kube-system/kube-apiserver-" + nodeName + ":kube-apiserver"
	stream, err := c.api.Logs(client.WithNode(ctx, node), "k8s.io", common.ContainerDriver_CRI, id, false, int32(tail))
	if err != nil {
		return nil, nodeError(node, "read kube-apiserver logs", err, c.role)
	}
	r, err := client.ReadStream(stream)
	if err != nil {
		return nil, nodeError(node, "read kube-apiserver logs", err, c.role)
	}
	defer r.Close()
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, criPrefix.ReplaceAllString(sc.Text(), ""))
	}
	if err := sc.Err(); err != nil {
		return lines, nodeError(node, "read kube-apiserver logs", err, c.role)
	}
	return lines, nil
}

// EtcdSnapshot streams a full etcd snapshot from the node into w. It works
// with os:operator and os:etcd:backup too (an Omni break-glass talosconfig).
func (c *Client) EtcdSnapshot(ctx context.Context, node string, w io.Writer) error {
	r, err := c.api.EtcdSnapshot(client.WithNode(ctx, node), &machine.EtcdSnapshotRequest{})
	if err != nil {
		return nodeError(node, "take etcd snapshot", err, c.role)
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		var ne *NodeError
		if errors.As(err, &ne) {
			return err
		}
		return nodeError(node, "take etcd snapshot", err, c.role)
	}
	return nil
}
