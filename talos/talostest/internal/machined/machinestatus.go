package machined

// The node's runtime MachineStatus and the cluster's discovery Members (sources: siderolabs/talos
// v1.13.8, internal/app/machined/pkg/controllers/runtime/machine_status.go and
// controllers/cluster/local_affiliate.go, member.go):
//
//   - MachineStatus (talosctl get machinestatus): stage "running" (the emulated node has
//     booted), ready when machined's readiness checks hold: time and network (met: the
//     emulator has neither a time sync nor a network stack to fail; its node answers on
//     its address), services (every Service resource running and, with a health check,
//     healthy: etcd follows Node.SetEtcdHealthy), staticPods (every StaticPodStatus running
//     and Ready, or succeeded), nodeReady (the Kubernetes Node's readiness: the emulator
//     registers no Node in Kubernetes, so this check is never met, in machined's words for a
//     node whose status has not come: `node "NAME" status is not available yet`). Rewritten
//     whenever a service or the static pod status changes, as the controller reacts to them.
//   - Members (talosctl get members): one per node of the cluster, ID the node name, as
//     discovery merges the affiliates: node ID, addresses (the node IP), hostname, machine
//     type, "Talos (VERSION)", and for control planes the kube-apiserver port of the cluster
//     endpoint. Every node lists every member, up or not (discovery keeps an affiliate for
//     its TTL).

import (
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	corev1 "k8s.io/api/core/v1"

	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// publishMachineStatus writes the MachineStatus resource from the node's current state.
func (m *Machined) publishMachineStatus() {
	m.statusMu.Lock()
	defer m.statusMu.Unlock()

	var unmet []runtime.UnmetCondition

	for _, check := range []struct {
		name string
		f    func() string
	}{
		{"time", func() string { return "" }},
		{"network", func() string { return "" }},
		{"services", m.servicesProblems},
		{"staticPods", m.staticPodsProblems},
		{"nodeReady", func() string { return fmt.Sprintf("node %q status is not available yet", m.host.Name) }},
	} {
		if reason := check.f(); reason != "" {
			unmet = append(unmet, runtime.UnmetCondition{Name: check.name, Reason: reason})
		}
	}

	if err := safe.StateModify(m.ctx, m.st, runtime.NewMachineStatus(), func(ms *runtime.MachineStatus) error {
		ms.TypedSpec().Stage = runtime.MachineStageRunning
		ms.TypedSpec().Status.Ready = len(unmet) == 0
		ms.TypedSpec().Status.UnmetConditions = unmet

		return nil
	}); err != nil && m.ctx.Err() == nil {
		m.logf("writing MachineStatus: %v", err)
	}
}

// servicesProblems is machined's servicesCheck over the node's Service resources.
func (m *Machined) servicesProblems() string {
	list, err := safe.StateListAll[*v1alpha1.Service](m.ctx, m.st)
	if err != nil {
		return err.Error()
	}

	var problems []string

	running := map[string]bool{}

	for svc := range list.All() {
		spec := svc.TypedSpec()
		if !spec.Running {
			problems = append(problems, svc.Metadata().ID()+" not running")

			continue
		}

		running[svc.Metadata().ID()] = true

		if !spec.Unknown && !spec.Healthy {
			problems = append(problems, svc.Metadata().ID()+" not healthy")
		}
	}

	required := []string{"apid", "machined", "kubelet"}
	if m.typ == machinetype.TypeControlPlane {
		required = append(required, "etcd", "trustd")
	}

	for _, id := range required {
		if !running[id] {
			problems = append(problems, id+" not running")
		}
	}

	return strings.Join(problems, ", ")
}

// staticPodsProblems is machined's staticPodsCheck over the StaticPodStatus resources.
func (m *Machined) staticPodsProblems() string {
	list, err := safe.StateListAll[*k8s.StaticPodStatus](m.ctx, m.st)
	if err != nil {
		return err.Error()
	}

	var problems []string

	for sp := range list.All() {
		ps := sp.TypedSpec().PodStatus
		phase, _ := ps["phase"].(string)

		switch corev1.PodPhase(phase) {
		case corev1.PodPending, corev1.PodFailed, corev1.PodUnknown:
			problems = append(problems, sp.Metadata().ID()+" "+strings.ToLower(phase))
		case corev1.PodRunning:
			if !parseReady(ps) {
				problems = append(problems, sp.Metadata().ID()+" not ready")
			}
		}
	}

	return strings.Join(problems, ", ")
}

func parseReady(ps map[string]any) bool {
	conds, _ := ps["conditions"].([]any)
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == string(corev1.PodReady) {
			return m["status"] == string(corev1.ConditionTrue)
		}
	}

	return false
}
