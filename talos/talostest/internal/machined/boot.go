package machined

// A node's boots, its files, and its reset (sources: siderolabs/talos v1.13.8,
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Reset,
// internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go Reset and
// stopAllPhaselist, v1alpha1_sequencer_tasks.go, v1alpha1_controller.go run).
//
// Files: the node's EPHEMERAL partition, mounted at /var, is the directory var/ of the
// node's directory (Node.HostPath); etcd's data is /var/lib/etcd there. /system
// holds the secrets the etcd member reads.
//
// Boot: a Talos VM's timeline from its kernel's start, the one the node's service list
// and kernel log show (services.go: apid runs 11 s after the kernel starts, cri 14 s,
// etcd 17 s with its data, the kubelet 20 s; the node was up 35 s after it). A reset
// that keeps the BOOT partition reboots through kexec (v1alpha1_sequencer.go: "Use
// kexec if we don't wipe the boot partition"): no firmware, straight into that
// timeline.
//
// Reset: the phases of machined's reset sequence, each published as events (the
// sequence, its phases and their tasks, with the request's actor ID; talosctl reset
// waits for the task stopAllServices, then for a new boot ID), doing on the emulated
// node what they do on a real one: stopAllPods kills the kube-apiserver pod and stops
// the kubelet, stopServicesForUpgrade stops etcd (gracefully: a leader hands its
// leadership over), stopAllServices takes the API away, resetSystemDiskSpec wipes
// EPHEMERAL, reboot boots again. A graceful reset leaves etcd first (leaveEtcd), as
// EtcdLeaveCluster; its cordon and drain fail and are logged (the emulator registers
// no Kubernetes Node), as machined logs and skips them.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	sidero "github.com/siderolabs/crypto/x509"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
)

// kernelToUp is how long after its kernel started the node shows itself up (Dmesg's
// boot lines begin that long before the node's start).
const kernelToUp = 35 * time.Second

// etcdRecoverySnapshotPath is where EtcdRecover puts the snapshot (constants.EtcdRecoverySnapshotPath).
const etcdRecoverySnapshotPath = constants.EtcdRecoverySnapshotPath

// bootOffset is when, after the kernel starts, the service runs.
func bootOffset(id string) time.Duration {
	for _, d := range nodeServices {
		if d.id == id {
			return kernelToUp - d.ago
		}
	}

	return kernelToUp
}

// etcdRoot is the etcd CA the node holds (EtcdRootSecrets).
func (m *Machined) etcdRoot() *sidero.PEMEncodedCertificateAndKey {
	r, err := m.st.Get(m.ctx, secrets.NewEtcdRoot(secrets.EtcdRootID).Metadata())
	if err != nil {
		return nil
	}

	return r.(*secrets.EtcdRoot).TypedSpec().EtcdCA
}

// BootID is the current boot's ID, as the node's boot_id file says it.
func (m *Machined) BootID() string {
	_, id := m.boot()
	return id
}

// boot returns when the current boot started and its boot ID.
func (m *Machined) boot() (time.Time, string) {
	m.bootMu.Lock()
	defer m.bootMu.Unlock()

	return m.bootAt, m.bootID
}

// booted tells whether the service runs already in the current boot.
func (m *Machined) booted(id string) bool {
	at, _ := m.boot()

	return time.Since(at) >= m.host.Scaled(bootOffset(id))
}

// WaitBooted waits until the service runs in the current boot.
func (m *Machined) WaitBooted(ctx context.Context, id string) error {
	return m.waitUntil(ctx, func() bool { return m.booted(id) })
}

// startKubelet starts the kubelet service.
func (m *Machined) startKubelet() {
	if m.kubelet != nil {
		m.kubelet.Start()
	}
}

// resetTask is one task of the reset sequence.
type resetTask struct {
	name string
	run  func(ctx context.Context) error
}

type resetPhase struct {
	name  string
	tasks []resetTask
}

// resetPhases is machined's Sequencer.Reset for a metal node whose request wipes
// EPHEMERAL and reboots.
func (m *Machined) resetPhases(graceful bool) []resetPhase {
	noop := func(context.Context) error { return nil }
	phase := func(name, task string, run func(context.Context) error) resetPhase {
		return resetPhase{name: name, tasks: []resetTask{{task, run}}}
	}

	var phases []resetPhase

	if graceful {
		phases = append(phases,
			phase("drain", "cordonAndDrainNode", func(context.Context) error {
				m.logf("task cordonAndDrainNode (1/1): failed: failed to cordon node %s: nodes %q not found (the emulator registers no Kubernetes Node)", m.host.Name, m.host.Name)

				return nil // machined logs this task's errors and goes on
			}),
			phase("cleanup", "removeAllPods", m.stopAllPods))
	} else {
		phases = append(phases, phase("cleanup", "stopAllPods", m.stopAllPods))
	}

	phases = append(phases, phase("dbus", "stopDBus", noop))

	if graceful {
		phases = append(phases, phase("leave", "leaveEtcd", m.leaveEtcd))
	}

	return append(phases,
		phase("preReset", "sendResetSignal", noop),
		phase("stopServices", "stopServicesForUpgrade", m.stopEtcdService),
		phase("umount", "unmountPodMounts", noop),
		phase("unmountBind", "unmountSystemDiskBindMounts", noop),
		phase("unmountSystem", "unmountEphemeralPartition", noop),
		phase("volumeFinalize", "teardownLifecycle", noop),
		phase("kexec", "kexecPrepare", noop),
		phase("stopEverything", "stopAllServices", func(context.Context) error {
			// apid stops: let the events already published reach their streams
			// first, then end the streams so that the graceful stop lets them
			// out (talosctl reset waits for this task's event; a talosctl that
			// missed it, its stream cut by a hard stop on a loaded machine,
			// waited for ever). On a node, seconds pass between the request and
			// this task.
			m.host.Events.Drain(15 * time.Second)
			m.host.Events.EndStreams()
			m.api.StopGracefully()

			return nil
		}),
		phase("forceCleanup", "forceCleanup", noop),
		phase("resetSpec", "resetSystemDiskSpec", m.wipeEphemeral),
		phase("reboot", "reboot", noop),
	)
}

// podsStopTime is how long stopAllPods takes at real pace. On a node, stopping the
// kubelet service and every pod sandbox takes seconds (a figure chosen, not measured),
// and only then does the API go away: a talosctl reset, which opens its events stream
// beside the request, has it open by then. With no pause, a loaded CI machine let the
// API go before a real talosctl's stream was open, and that talosctl waited for ever
// for the stopAllServices event a new boot no longer has.
const podsStopTime = 2 * time.Second

// stopAllPods is the task of that name: the kubelet service stops and the CRI stops
// every pod sandbox at once.
func (m *Machined) stopAllPods(ctx context.Context) error {
	if m.kubelet != nil {
		m.kubelet.Stop()
		m.kubelet.StopAllPods()
	}

	select {
	case <-ctx.Done():
	case <-time.After(m.host.Scaled(podsStopTime)):
	}

	return nil
}

// stopEtcdService stops the etcd service (and, on a node, everything else on
// EPHEMERAL).
func (m *Machined) stopEtcdService(ctx context.Context) error {
	if m.etcd == nil {
		return nil
	}

	return m.etcd.Stop(ctx)
}

// wipeEphemeral is resetSystemDiskSpec for EPHEMERAL: everything under /var is gone.
func (m *Machined) wipeEphemeral(context.Context) error {
	if err := os.RemoveAll(m.host.Path("/var")); err != nil {
		return fmt.Errorf("failed wiping partition EPHEMERAL: %w", err)
	}

	m.logf("task resetSystemDiskSpec (1/1): successfully reset system disk by the spec")

	return nil
}

// runReset runs the reset sequence for the actor, then boots again.
func (m *Machined) runReset(actorID string, graceful bool) {
	publish := func(ev proto.Message) { m.host.Events.Publish(actorID, ev) }
	ctx := m.ctx
	phases := m.resetPhases(graceful)
	start := time.Now()

	publish(&machine.SequenceEvent{Sequence: "reset", Action: machine.SequenceEvent_START})
	m.logf("reset sequence: %d phase(s)", len(phases))

	for i, p := range phases {
		progress := fmt.Sprintf("%d/%d", i+1, len(phases))

		publish(&machine.PhaseEvent{Phase: p.name, Action: machine.PhaseEvent_START})
		m.logf("phase %s (%s): %d tasks(s)", p.name, progress, len(p.tasks))

		for _, t := range p.tasks {
			if ctx.Err() != nil {
				return // the emulated node goes away
			}

			publish(&machine.TaskEvent{Task: t.name, Action: machine.TaskEvent_START})
			m.logf("task %s (1/1): starting", t.name)

			err := t.run(ctx)

			publish(&machine.TaskEvent{Task: t.name, Action: machine.TaskEvent_STOP})

			if err != nil {
				m.logf("task %s (1/1): failed: %v", t.name, err)
				m.logf("phase %s (%s): failed", p.name, progress)
				publish(&machine.SequenceEvent{Sequence: "reset", Action: machine.SequenceEvent_STOP, Error: &common.Error{Message: err.Error()}})
				m.logf("reset failed: error running phase %d in reset sequence: task 1/1: failed, %v", i+1, err)
				m.rebooting.Store(false)

				return
			}
		}

		publish(&machine.PhaseEvent{Phase: p.name, Action: machine.PhaseEvent_STOP})
	}

	publish(&machine.RestartEvent{Cmd: int64(unix.LINUX_REBOOT_CMD_KEXEC)})
	m.logf("reset sequence: rebooting after %s", time.Since(start).Round(time.Millisecond))

	m.bootAgain()
}

// bootAgain is the kexec boot after a reset: machined's memory (events) is gone, a new
// boot ID, the API after apid's start, etcd's service from cri's, the kubelet at its
// own; EPHEMERAL, wiped, is formatted and mounted again (etcd's data directory made).
func (m *Machined) bootAgain() {
	if m.ctx.Err() != nil {
		return
	}

	m.host.Events.Forget()

	if m.etcd != nil {
		m.etcd.Forget()
	}

	m.bootMu.Lock()
	m.bootAt, m.bootID = time.Now(), uuid.NewString()
	m.bootMu.Unlock()

	if err := os.MkdirAll(m.host.Path(constants.EtcdDataPath), 0o700); err != nil {
		m.logf("mounting EPHEMERAL: %v", err)
	}

	for _, step := range []struct {
		service string
		do      func()
	}{
		{"apid", func() {
			m.rebooting.Store(false)

			if err := m.api.Start(); err != nil {
				m.logf("starting the API after the reboot: %v", err)
			}
		}},
		{"cri", func() {
			if m.etcd != nil {
				m.etcd.Start()
			}
		}},
		{"kubelet", func() {
			m.startKubelet()
		}},
	} {
		if err := m.WaitBooted(m.ctx, step.service); err != nil {
			return
		}

		step.do()
	}
}

// Reset implements machine.MachineServiceServer: machined's checks of the request,
// then the reset sequence in the background; the reply carries its actor ID.
func (s *machineService) Reset(_ context.Context, in *machine.ResetRequest) (*machine.ResetResponse, error) {
	m := s.m

	m.logf("reset request received")

	if len(in.GetUserDisksToWipe()) > 0 {
		if in.Mode == machine.ResetRequest_SYSTEM_DISK {
			return nil, errors.New("reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
		}

		return nil, fmt.Errorf("reset user disk failed: device %s wasn't found", in.GetUserDisksToWipe()[0])
	}

	wipeEphemeral := false

	if len(in.GetSystemPartitionsToWipe()) > 0 {
		if in.Mode == machine.ResetRequest_USER_DISKS {
			return nil, errors.New("reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter")
		}

		for _, spec := range in.GetSystemPartitionsToWipe() {
			switch spec.Label {
			case constants.EphemeralPartitionLabel:
				wipeEphemeral = wipeEphemeral || spec.Wipe
			case constants.StatePartitionLabel, constants.MetaPartitionLabel, constants.BootPartitionLabel, constants.EFIPartitionLabel:
				return nil, status.Errorf(codes.Unimplemented, "wiping %s is not emulated (only EPHEMERAL is)", spec.Label)
			default:
				return nil, fmt.Errorf("failed to get volume status with label %q: resource VolumeStatuses.block.talos.dev(runtime/%s@undefined) doesn't exist", spec.Label, spec.Label)
			}
		}
	}

	switch {
	case in.Mode != machine.ResetRequest_USER_DISKS && len(in.GetSystemPartitionsToWipe()) == 0:
		return nil, status.Error(codes.Unimplemented, "a reset of the whole system disk is not emulated (wipe EPHEMERAL with --system-labels-to-wipe)")
	case !in.Reboot:
		return nil, status.Error(codes.Unimplemented, "a reset that shuts the node down is not emulated (reset with --reboot)")
	case !wipeEphemeral:
		return nil, status.Error(codes.Unimplemented, "a reset that wipes nothing is not emulated")
	}

	actorID := uuid.NewString()

	if m.rebooting.CompareAndSwap(false, true) {
		m.background.Add(1)

		go func() {
			defer m.background.Done()

			m.runReset(actorID, in.Graceful)
		}()
	} else {
		// machined's controller is busy with another sequence: the reply is the same,
		// and the reset fails in the background
		m.logf("reset failed: locked")
	}

	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actorID}}}, nil
}
