package talos

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// SupportsListArgs tells whether a Talos version accepts a list of strings
// as an extraArgs value (1.13 and later). Unknown versions are treated as old:
// a comma-joined string works everywhere.
func SupportsListArgs(version string) bool {
	v := strings.TrimPrefix(version, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 1 || (major == 1 && minor >= 13)
}

// RuntimePod is one kube-apiserver pod as the node's container runtime has
// it, read live through the Talos API (the CRI list), unlike the
// StaticPodStatus Talos refreshes from the kubelet every 15 s.
type RuntimePod struct {
	// UID is the pod's UID. The kubelet derives a static pod's UID from its
	// manifest, so a re-rendered manifest makes a pod with a new UID, while a
	// restart of the container keeps it. Empty on Talos before 1.9.
	UID        string
	SandboxID  string
	Containers []RuntimeContainer // its kube-apiserver containers, running or exited
}

// RuntimeContainer is one kube-apiserver container of a RuntimePod.
type RuntimeContainer struct {
	ID      string // the full container ID (the pod status says containerd://ID)
	Running bool
}

// Key names the pod: its UID, or where the node reports none its sandbox
// ID (which the kubelet renews only if the sandbox itself dies).
func (p RuntimePod) Key() string {
	if p.UID != "" {
		return p.UID
	}
	return p.SandboxID
}

// Running is the pod's running kube-apiserver container, if one runs.
func (p RuntimePod) Running() (RuntimeContainer, bool) {
	for _, c := range p.Containers {
		if c.Running {
			return c, true
		}
	}
	return RuntimeContainer{}, false
}

// ReadAPIServerPods lists the node's kube-apiserver pods whose sandbox is
// ready, with their containers, as the runtime has them now. machined
// lists every ready pod sandbox followed by that pod's containers (running
// and exited), pods in no particular order; a replaced pod is gone from the
// list once the kubelet has stopped its sandbox. All the static pods of
// one name share a pod name, so a container belongs to the sandbox listed
// before it. Any role may list.
func (c *Client) ReadAPIServerPods(ctx context.Context, node, nodeName string) ([]RuntimePod, error) {
	resp, err := c.api.Containers(client.WithNode(ctx, node), "k8s.io", common.ContainerDriver_CRI)
	if err != nil {
		return nil, c.nodeError(ctx, node, "list containers", err)
	}
	var pods []RuntimePod
	for _, m := range resp.GetMessages() {
		pods = append(pods, apiServerPods(m.GetContainers(), nodeName)...)
	}
	return pods, nil
}

// apiServerPods reads the kube-apiserver pods from one node's CRI list.
func apiServerPods(list []*machine.ContainerInfo, nodeName string) []RuntimePod {
	podName := "kube-system/kube-apiserver-" + nodeName
	var pods []RuntimePod
	in := false // the entries follow a kube-apiserver sandbox
	for _, ct := range list {
		switch {
		case ct.GetPodId() != podName:
			in = false
		case ct.GetId() == podName: // the sandbox (as talosctl tells it: its ID is the pod's)
			pods = append(pods, RuntimePod{UID: ct.GetUid(), SandboxID: ct.GetInternalId()})
			in = true
		case in && ct.GetName() == "kube-apiserver":
			p := &pods[len(pods)-1]
			p.Containers = append(p.Containers, RuntimeContainer{ID: ct.GetInternalId(), Running: ct.GetStatus() == "CONTAINER_RUNNING"})
		}
	}
	return pods
}

// PodObservation is one look at the kube-apiserver static pod of a node:
// the manifest as the node rendered it, and the pods its runtime has.
type PodObservation struct {
	Pod  APIServerPod
	Pods []RuntimePod
}

// WatchAPIServer polls the node's rendered kube-apiserver pod and the
// runtime's kube-apiserver pods every interval and calls observe with each
// look until observe returns true or ctx ends. Both are read live: a new
// pod is seen within one interval of the runtime starting it.
func (c *Client) WatchAPIServer(ctx context.Context, node, nodeName string, interval time.Duration, observe func(PodObservation) bool) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pod, err := c.ReadAPIServerPod(ctx, node)
		if err == nil {
			var pods []RuntimePod
			pods, err = c.ReadAPIServerPods(ctx, node, nodeName)
			if err == nil && observe(PodObservation{Pod: pod, Pods: pods}) {
				return nil
			}
		}
		if err != nil && !errors.Is(err, ErrUnreachable) {
			return err // a refusal will not go away by asking again
		}
		if ctx.Err() != nil {
			if err != nil {
				return err
			}
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
