package talostest

import (
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdclient"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdsvc"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/kubelet"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/machined"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/ports"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// PortReservation holds a TCP address for as long as its owner needs it, so that a
// server can stop listening and listen again without another process taking the port
// in between (see ports.Reservation).
type PortReservation = ports.Reservation

// ReservePort reserves ip:port; port 0 picks a free port.
func ReservePort(ip string, port int) (*PortReservation, error) { return ports.Reserve(ip, port) }

// The kubelet's side (internal/kubelet): the container it runs, what runs it, its
// times and its live view of the pod.
type (
	// ContainerConfig is the rendered kube-apiserver container: what the kubelet runs.
	ContainerConfig = staticpod.ContainerConfig
	// Container is one run of the kube-apiserver container, handed to a PodRunner.
	Container = kubelet.Container
	// PodRunner runs the kube-apiserver container of a node. The lab plugs a real
	// kube-apiserver process in; unit tests use StandIn.
	PodRunner = kubelet.PodRunner
	// KubeletOptions are the kubelet's and Talos's times.
	KubeletOptions = kubelet.Options
	// PodState is the kubelet's own, live view of the kube-apiserver pod.
	PodState = kubelet.PodState
	// StandIn is an in-process kube-apiserver stand-in for unit tests.
	StandIn = kubelet.StandIn
)

// FlagHas reports whether the comma-separated flag --name holds value, for StandIn hooks.
func FlagHas(c ContainerConfig, name, value string) bool { return staticpod.FlagHas(c, name, value) }

// machined's etcd service (internal/etcdsvc).
type (
	// EtcdOptions make every control plane run machined's etcd service with a real member.
	EtcdOptions = etcdsvc.Options
	// EtcdServiceState is the node's etcd service as machined reports it.
	EtcdServiceState = etcdsvc.State
)

// The service states machined reports (internal/app/machined/pkg/system/events).
const (
	ServiceStarting  = etcdsvc.ServiceStarting
	ServiceWaiting   = etcdsvc.ServiceWaiting
	ServicePreparing = etcdsvc.ServicePreparing
	ServiceRunning   = etcdsvc.ServiceRunning
	ServiceStopping  = etcdsvc.ServiceStopping
	ServiceFinished  = etcdsvc.ServiceFinished
	ServiceFailed    = etcdsvc.ServiceFailed
)

// EtcdAccess is how machined's local etcd client reaches the node's own member.
type EtcdAccess = etcdclient.Access

// TalosBaseArgs returns the kube-apiserver flags Talos v1.13 renders before merging
// the user's extraArgs (control_plane_static_pod.go), including its choice of
// authorization flags for the Kubernetes version named by the image tag.
func TalosBaseArgs(_ *Node, spec *k8s.APIServerConfigSpec) map[string]string {
	return machined.TalosBaseArgs(spec)
}
