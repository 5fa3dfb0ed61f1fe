package kubelet

import (
	"context"
	"io"
	"time"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// Container is one run of the kube-apiserver container, handed to a PodRunner.
type Container struct {
	ContainerConfig

	ID           string // 64 hex digits, new for every run
	Name         string // kube-apiserver
	Pod          string // kube-system/kube-apiserver-<nodename>
	PodUID       string // new for every pod: a changed manifest is a new pod
	RestartCount int    // earlier runs of the container in this pod
	StartedAt    time.Time
	Node         Node // the node it runs on
	// Kill is closed when the kubelet kills the container (SIGKILL): the
	// termination grace after a stop is over, or Node.CrashContainer. Run
	// must then return at once.
	Kill <-chan struct{}
}

// PodRunner runs the kube-apiserver container of a node. The lab plugs a real
// kube-apiserver process in; unit tests use StandIn.
type PodRunner interface {
	// Run runs the container until it exits by itself or is stopped. A
	// cancelled ctx is the kubelet's SIGTERM: stop, and return at the latest
	// when Kill is closed. Output goes to logs. A return while ctx is live is
	// an exit of the container, which the kubelet restarts (restartPolicy
	// Always): a non-nil error is a failure (exit code 1), nil exit code 0.
	Run(ctx context.Context, c Container, logs io.Writer) error
}

// Node is the node a container runs on.
type Node struct {
	Name string // its hostname
	IP   string // its address: the pod's IP (host network)
}

// ContainerConfig is the rendered kube-apiserver container: what the kubelet runs.
type ContainerConfig = staticpod.ContainerConfig
