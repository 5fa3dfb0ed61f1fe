package diagnose

import (
	"context"
	"slices"
	"testing"

	"github.com/breakglass-dev/breakglass/talos"
)

// staleStatus is a node just after its kube-apiserver pod was replaced:
// the pod status (refreshed every 15 s) still names the old container,
// whose log ends with its shutdown; the CRI lists the new one running, and
// its log holds kube-apiserver v1.34.4's words (the lab's
// encryption-provider-dropped, recorded).
type staleStatus struct{ crashLooping bool }

const droppedLine = `E1207 20:43:01.215056   15526 cacher.go:482] cacher (secrets): unexpected ListAndWatch error: failed to list *core.Secret: unable to transform key "/registry/secrets/default/drift-00": no matching prefix found; reinitializing...`

func (staleStatus) Nodes() []string                                  { return []string{"10.5.0.2"} }
func (staleStatus) NodeName(context.Context, string) (string, error) { return "cp-1", nil }
func (staleStatus) ReadAPIServerPod(context.Context, string) (talos.APIServerPod, error) {
	return talos.APIServerPod{}, nil
}
func (s staleStatus) ReadAPIServerStatus(context.Context, string, string) (talos.PodStatus, error) {
	if s.crashLooping {
		return talos.PodStatus{Found: true, WaitingReason: "CrashLoopBackOff", ContainerID: "containerd://old"}, nil
	}
	return talos.PodStatus{Found: true, Running: true, ContainerID: "containerd://old"}, nil
}
func (staleStatus) RunningAPIServerContainer(context.Context, string, string) (string, error) {
	return "new", nil
}
func (staleStatus) APIServerLogs(_ context.Context, _, _, containerID string, _ int) ([]string, error) {
	switch containerID {
	case "containerd://old", "old":
		return []string{`I1207 20:42:07.072573   13033 controller.go:176] quota evaluator worker shutdown`}, nil
	case "new":
		return []string{droppedLine}, nil
	}
	return nil, talos.ErrNoContainer
}

// diagnose reads the log of the container running now, not of the one a
// stale pod status names (it read the old one for up to 15 s after a
// machine config was applied, and missed kube-apiserver's words: the lab's
// encryption scenarios were diagnosed without them).
func TestGatherReadsTheRunningContainer(t *testing.T) {
	ne := gatherNode(t.Context(), staleStatus{}, "10.5.0.2", 200)
	if !slices.Contains(ne.Logs, droppedLine) {
		t.Errorf("logs read %q, want the running container's", ne.Logs)
	}
}

// A crash-looping pod's status names the container that died: its log
// says why, and is read even while the next one runs for a moment.
func TestGatherKeepsTheDeadContainer(t *testing.T) {
	ne := gatherNode(t.Context(), staleStatus{crashLooping: true}, "10.5.0.2", 200)
	if slices.Contains(ne.Logs, droppedLine) || len(ne.Logs) != 1 {
		t.Errorf("logs read %q, want the container the status names", ne.Logs)
	}
}
