package kubelet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
)

// imageID is a digest reference for the image, as the runtime reports it.
func imageID(image string) string {
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}

	sum := sha256.Sum256([]byte(image))

	return repo + "@sha256:" + hex.EncodeToString(sum[:])
}

// pauseImage is the pod sandbox image of Talos 1.13's containerd.
const pauseImage = "registry.k8s.io/pause:3.10"

// criContainers lists the containers the runtime still has (every pod's, until
// garbage collection) in random order, as containerd lists them from a map.
func (k *Kubelet) criContainers() []*containerRecord {
	k.mu.Lock()
	defer k.mu.Unlock()

	var out []*containerRecord

	for _, p := range k.pods {
		out = append(out, p.containers...)
	}

	mrand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })

	return out
}

// Containers is machined's Containers list for the CRI: each ready pod
// sandbox followed by its containers, running or exited. A replaced pod's
// sandbox is stopped, so its containers are not listed (Logs still finds them).
// Pods and containers come in random order, as from containerd's maps.
func (k *Kubelet) Containers(namespace string) []*machine.ContainerInfo {
	k.mu.Lock()
	defer k.mu.Unlock()

	podName := k.podName()
	pods := slices.Clone(k.pods)
	mrand.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })

	var out []*machine.ContainerInfo

	for _, p := range pods {
		if !p.sandboxReady {
			continue
		}

		out = append(out, &machine.ContainerInfo{
			Namespace: namespace, Id: podName, Name: podName, PodId: podName,
			InternalId: p.sandboxID, Uid: p.uid, Image: pauseImage, Status: "SANDBOX_READY",
		})

		ctrs := slices.Clone(p.containers)
		mrand.Shuffle(len(ctrs), func(i, j int) { ctrs[i], ctrs[j] = ctrs[j], ctrs[i] })

		for _, c := range ctrs {
			st := "CONTAINER_EXITED"
			if c.running {
				st = "CONTAINER_RUNNING"
			}

			out = append(out, &machine.ContainerInfo{
				Namespace:  namespace,
				Id:         podName + ":kube-apiserver:" + c.ID[:12],
				InternalId: c.ID,
				PodId:      podName,
				Name:       "kube-apiserver",
				Image:      c.Image,
				Status:     st,
			})
		}
	}

	return out
}

// ContainerLog finds a container's log by its CRI display id "namespace/pod:name[:id]" as Talos's CRI
// inspector does (internal/pkg/containers/cri): without an id the first container
// the runtime lists, which may be an exited or an old pod's one; with one, the
// first whose full ID contains it. The errors are plain ones (gRPC Unknown), as
// machined returns them.
func (k *Kubelet) ContainerLog(id string) (*host.Log, error) {
	notFound := fmt.Errorf("container %q not found", id)

	podNS, rest, ok := strings.Cut(id, "/")
	if !ok {
		return nil, notFound
	}

	pod, rest, _ := strings.Cut(rest, ":")
	name, cid, _ := strings.Cut(rest, ":")

	if podNS != "kube-system" || pod != "kube-apiserver-"+k.host.Name || name != "kube-apiserver" {
		return nil, notFound
	}

	for _, c := range k.criContainers() {
		if strings.Contains(c.ID, cid) {
			return c.logs, nil
		}
	}

	return nil, notFound
}

// criLog writes a container's output into log as CRI log lines, as the kubelet's
// runtime writes its log file: "<RFC3339Nano> stderr F <line>".
func criLog(log *host.Log) *host.LineWriter {
	return &host.LineWriter{Emit: func(line []byte) {
		out := make([]byte, 0, len(line)+48)
		out = time.Now().UTC().AppendFormat(out, time.RFC3339Nano)
		out = append(out, " stderr F "...)
		out = append(out, line...)
		out = append(out, '\n')
		log.Append(out)
	}}
}
