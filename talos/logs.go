package talos

import (
	"bufio"
	"context"
	"errors"
	"io"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// criPrefix is the CRI log line header ("TIMESTAMP STREAM TAG "); the
// message follows it.
var criPrefix = regexp.MustCompile(`^\S+ (stdout|stderr) [FP] `)

// APIServerLogs returns the last tail lines of one kube-apiserver container,
// named by its ID (from the pod status: PodStatus.ContainerID), with the CRI
// headers removed. Without an ID Talos answers with the first container its
// CRI lists, in no particular order: possibly one of a replaced pod, so
// callers always name the one they mean. Readable with os:reader and up.
func (c *Client) APIServerLogs(ctx context.Context, node, nodeName, containerID string, tail int) ([]string, error) {
	id := "kube-system/kube-apiserver-" + nodeName + ":kube-apiserver"
	if cid := strings.TrimPrefix(containerID, "containerd://"); cid != "" {
		id += ":" + cid
	}
	stream, err := c.api.Logs(client.WithNode(ctx, node), "k8s.io", common.ContainerDriver_CRI, id, false, int32(tail))
	if err != nil {
		return nil, c.logsError(ctx, node, err)
	}
	r, err := client.ReadStream(stream)
	if err != nil {
		return nil, c.logsError(ctx, node, err)
	}
	defer r.Close()
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, criPrefix.ReplaceAllString(sc.Text(), ""))
	}
	if err := sc.Err(); err != nil {
		return lines, c.logsError(ctx, node, err)
	}
	return lines, nil
}

// ErrNoContainer is a log read of a container the node does not have
// (any more: a crash-looping one is garbage-collected soon after it is
// replaced).
var ErrNoContainer = errors.New("no such container")

// noContainer is the node's own words for ErrNoContainer.
type noContainer struct{ msg string }

func (e noContainer) Error() string { return e.msg }
func (e noContainer) Unwrap() error { return ErrNoContainer }

// logsError is nodeError for a log read; Talos says a container is gone
// only in words (`container "ID" not found`, gRPC Unknown), so they are
// read here, once, into ErrNoContainer.
func (c *Client) logsError(ctx context.Context, node string, err error) error {
	e := c.nodeError(ctx, node, "read kube-apiserver logs", err)
	var ne *NodeError
	if st := status.Convert(err); st.Code() == codes.Unknown && strings.Contains(st.Message(), "not found") && errors.As(e, &ne) {
		ne.Err = noContainer{st.Message()}
	}
	return e
}

// EtcdSnapshot streams a full etcd snapshot from the node into w. It works
// with os:operator and os:etcd:backup too (an Omni break-glass talosconfig).
func (c *Client) EtcdSnapshot(ctx context.Context, node string, w io.Writer) error {
	r, err := c.api.EtcdSnapshot(client.WithNode(ctx, node), &machine.EtcdSnapshotRequest{})
	if err != nil {
		return c.nodeError(ctx, node, "take etcd snapshot", err)
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		var ne *NodeError
		if errors.As(err, &ne) {
			return err
		}
		return c.nodeError(ctx, node, "take etcd snapshot", err)
	}
	return nil
}

// RunningAPIServerContainer finds the ID of the one running kube-apiserver
// container in the node's CRI list (or, with none running, of the only one
// listed), for when the pod status names none or one already gone (Talos
// reports the pod every 15 s). The list holds exited containers too, in no
// particular order: when it cannot tell, it answers "" rather than guess.
func (c *Client) RunningAPIServerContainer(ctx context.Context, node, nodeName string) (string, error) {
	pods, err := c.ReadAPIServerPods(ctx, node, nodeName)
	if err != nil {
		return "", err
	}
	var running, all []string
	for _, p := range pods {
		for _, ct := range p.Containers {
			all = append(all, ct.ID)
			if ct.Running {
				running = append(running, ct.ID)
			}
		}
	}
	switch {
	case len(running) == 1:
		return running[0], nil
	case len(running) == 0 && len(all) == 1:
		// crash-looping between restarts: the kubelet keeps one dead
		// container per pod, the last that ran
		return all[0], nil
	}
	return "", nil
}

// EtcdLog returns the last tail lines of the node's etcd member's own log,
// as `talosctl logs etcd` shows them (machined's system containers). A
// member that fails at every start says why there ("couldn't find local
// name", "member ... has already been removed").
func (c *Client) EtcdLog(ctx context.Context, node string, tail int) ([]string, error) {
	stream, err := c.api.Logs(client.WithNode(ctx, node), constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, "etcd", false, int32(tail))
	if err != nil {
		return nil, c.nodeError(ctx, node, "read etcd's log", err)
	}
	r, err := client.ReadStream(stream)
	if err != nil {
		return nil, c.nodeError(ctx, node, "read etcd's log", err)
	}
	defer r.Close()
	var lines []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return lines, c.nodeError(ctx, node, "read etcd's log", err)
	}
	return lines, nil
}
