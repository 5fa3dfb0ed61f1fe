package machined

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/authz"
)

// ApplyConfiguration follows machined's handler (v1alpha1_server.go) step by step.
func (s *machineService) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	m := s.m

	if !m.applyMu.TryLock() {
		return nil, status.Error(codes.FailedPrecondition, "another apply configuration is already in progress")
	}
	defer m.applyMu.Unlock()

	if m.rebooting.Load() {
		return nil, status.Error(codes.FailedPrecondition, "configuration was already applied and node is rebooting, cannot apply more configuration changes until next reboot")
	}

	if !authz.Roles(ctx).Includes(role.Admin) {
		return nil, authz.ErrNotAuthorized
	}

	if hook := m.opts.ApplyHook; hook != nil {
		hook()
	}

	mode := in.Mode.String()
	modeDetails := "Applied configuration with a reboot"
	modeErr := ""

	// machined cancels a pending try-mode rollback before it even looks at the new
	// config: any non-TRY request, dry run or invalid included, cancels it
	if in.Mode != machine.ApplyConfigurationRequest_TRY {
		m.cancelRollback()
	}

	cfg, err := m.parseConfig(in.GetData())
	if err != nil {
		return nil, err
	}

	warnings := configWarnings(cfg)

	switch in.Mode { //nolint:exhaustive
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err := m.canApplyImmediate(cfg); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}

		modeDetails = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_STAGED:
		modeDetails = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_AUTO:
		if err := m.canApplyImmediate(cfg); err != nil {
			in.Mode = machine.ApplyConfigurationRequest_REBOOT
			modeDetails = "Applied configuration with a reboot"
			modeErr = ": " + err.Error()
		} else {
			in.Mode = machine.ApplyConfigurationRequest_NO_REBOOT
			modeDetails = "Applied configuration without a reboot"
		}

		mode = fmt.Sprintf("%s(%s)", mode, in.Mode)
	}

	if in.DryRun {
		diff, err := configdiff.DiffConfigs(m.currentConfig().prov, cfg.prov)
		if err != nil {
			return nil, fmt.Errorf("failed to generate diff: %w", err)
		}

		if diff == "" {
			diff = "No changes."
		}

		return &machine.ApplyConfigurationResponse{
			Messages: []*machine.ApplyConfiguration{{
				Mode:        in.Mode,
				ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\nConfig diff:\n\n%s", modeDetails, diff),
			}},
		}, nil
	}

	m.logf("apply config request: mode %s", strings.ToLower(mode))

	switch in.Mode { //nolint:exhaustive
	case machine.ApplyConfigurationRequest_TRY:
		timeout := constants.ConfigTryTimeout
		if in.TryModeTimeout != nil {
			timeout = in.TryModeTimeout.AsDuration()
		}

		modeDetails += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout.String())

		m.cfgMu.Lock()
		m.rollbackAfterLocked(m.host.Scaled(timeout))
		m.setRunningLocked(cfg)
		m.cfgMu.Unlock()
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		m.cfgMu.Lock()
		m.setPersistentLocked(cfg)
		m.setRunningLocked(cfg)
		m.cfgMu.Unlock()
	case machine.ApplyConfigurationRequest_STAGED:
		m.cfgMu.Lock()
		m.setPersistentLocked(cfg)
		m.cfgMu.Unlock()
	case machine.ApplyConfigurationRequest_REBOOT:
		m.cfgMu.Lock()
		m.setPersistentLocked(cfg)
		m.cfgMu.Unlock()

		m.rebooting.Store(true)

		go m.reboot()
	default:
		return nil, fmt.Errorf("incorrect mode '%s' specified for the apply config call", in.Mode.String())
	}

	return &machine.ApplyConfigurationResponse{
		Messages: []*machine.ApplyConfiguration{{
			Mode:        in.Mode,
			Warnings:    warnings,
			ModeDetails: modeDetails + modeErr,
		}},
	}, nil
}

// configWarnings are the warnings machined returns with an apply (not with a dry run,
// whose reply it builds before): those of the config's Validate, then those of its
// RuntimeValidate that do not depend on the machine (it also looks for sd-boot, and
// refuses Kubernetes images this Talos does not support, which the emulator does not).
func configWarnings(cfg *nodeConfig) []string {
	warnings, _ := cfg.prov.Validate(validationMode{}) //nolint:errcheck // parseConfig refused the errors

	if raw := cfg.prov.RawV1Alpha1(); raw != nil && raw.MachineConfig != nil && len(raw.MachineConfig.Install().Extensions()) > 0 {
		warnings = append(warnings, ".machine.install.extensions is deprecated, please see https://docs.siderolabs.com/talos/latest/platform-specific-installations/boot-assets")
	}

	return warnings
}

// canApplyImmediate is machined's Runtime.CanApplyImmediate: the v1alpha1 documents
// must be equal once the sections Talos applies live are copied over from the
// running config (.debug, .cluster and a list of .machine keys).
func (m *Machined) canApplyImmediate(cfg *nodeConfig) error {
	currentConfig := m.currentConfig().prov.RawV1Alpha1()
	if currentConfig == nil {
		return errors.New("current config is not v1alpha1")
	}

	newConfig := cfg.prov.RawV1Alpha1()
	if newConfig == nil {
		return errors.New("new config is not v1alpha1")
	}

	newConfig = newConfig.DeepCopy()

	newConfig.ConfigDebug = currentConfig.ConfigDebug
	newConfig.ClusterConfig = currentConfig.ClusterConfig

	if newConfig.MachineConfig != nil && currentConfig.MachineConfig != nil {
		nm, cm := newConfig.MachineConfig, currentConfig.MachineConfig
		nm.MachineCA = cm.MachineCA
		nm.MachineAcceptedCAs = cm.MachineAcceptedCAs
		nm.MachineTime = cm.MachineTime //nolint:staticcheck
		nm.MachineCertSANs = cm.MachineCertSANs
		nm.MachineInstall = cm.MachineInstall
		nm.MachineNetwork = cm.MachineNetwork //nolint:staticcheck
		nm.MachineSysfs = cm.MachineSysfs
		nm.MachineSysctls = cm.MachineSysctls
		nm.MachineLogging = cm.MachineLogging
		nm.MachineControlPlane = cm.MachineControlPlane
		nm.MachineKubelet = cm.MachineKubelet
		nm.MachineKernel = cm.MachineKernel
		nm.MachineRegistries = cm.MachineRegistries //nolint:staticcheck
		nm.MachinePods = cm.MachinePods
		nm.MachineSeccompProfiles = cm.MachineSeccompProfiles
		nm.MachineNodeAnnotations = cm.MachineNodeAnnotations
		nm.MachineNodeLabels = cm.MachineNodeLabels
		nm.MachineNodeTaints = cm.MachineNodeTaints

		if nm.MachineFeatures != nil && cm.MachineFeatures != nil {
			nm.MachineFeatures.KubernetesTalosAPIAccessConfig = cm.MachineFeatures.KubernetesTalosAPIAccessConfig
			nm.MachineFeatures.KubePrismSupport = cm.MachineFeatures.KubePrismSupport
			nm.MachineFeatures.HostDNSSupport = cm.MachineFeatures.HostDNSSupport
			nm.MachineFeatures.ImageCacheSupport = cm.MachineFeatures.ImageCacheSupport
			nm.MachineFeatures.FeatureNodeAddressSortAlgorithm = cm.MachineFeatures.FeatureNodeAddressSortAlgorithm
		}
	}

	if !reflect.DeepEqual(currentConfig, newConfig) {
		diff, err := configdiff.DiffConfigs(container.NewV1Alpha1(currentConfig), container.NewV1Alpha1(newConfig))
		if err != nil {
			return fmt.Errorf("error calculating diff: %w", err)
		}

		return fmt.Errorf("this config change can't be applied in immediate mode\ndiff:\n%s", diff)
	}

	return nil
}

// rollbackAfterLocked arms the try-mode rollback to the config running now, replacing
// any pending one (as machined does: two TRYs in a row lose the first original).
func (m *Machined) rollbackAfterLocked(timeout time.Duration) {
	orig := m.running

	if m.rollbackTimer != nil {
		m.rollbackTimer.Stop()
	}

	var t *time.Timer

	t = time.AfterFunc(timeout, func() {
		m.cfgMu.Lock()
		defer m.cfgMu.Unlock()

		if m.rollbackTimer != t {
			return // cancelled or replaced meanwhile
		}

		m.rollbackTimer = nil
		m.rollbackDeadline = time.Time{}

		m.logf("rolling back the configuration")
		m.setRunningLocked(orig)
	})

	m.rollbackTimer = t
	m.rollbackDeadline = time.Now().Add(timeout)
}

func (m *Machined) cancelRollback() {
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()

	if m.rollbackTimer != nil {
		m.rollbackTimer.Stop()
		m.rollbackTimer = nil
		m.rollbackDeadline = time.Time{}
	}
}

// reboot emulates the reboot after a REBOOT apply: the Talos API goes away for
// ClusterOptions.RebootDuration, then the node comes back running its persistent config.
func (m *Machined) reboot() {
	// the reboot sequence starts after the reply is on its way, as on a node
	select {
	case <-m.ctx.Done():
		return
	case <-time.After(100 * time.Millisecond):
	}

	m.logf("rebooting")

	wasUp := m.api.Up()
	m.api.Stop()

	select {
	case <-m.ctx.Done():
		return
	case <-time.After(m.rebootDuration()):
	}

	m.cancelRollback()

	m.cfgMu.Lock()
	m.setRunningLocked(m.persistent)
	m.cfgMu.Unlock()

	m.rebooting.Store(false)

	if wasUp {
		if err := m.api.Start(); err != nil {
			m.logf("restarting API after reboot: %v", err)
		}
	}
}

func (m *Machined) rebootDuration() time.Duration {
	if m.opts.RebootDuration <= 0 {
		return time.Second
	}

	return m.opts.RebootDuration
}

// RollbackPending reports whether a TRY apply is waiting to be rolled back, and when.
// Talos keeps this timer in machined's memory only; there is no resource for it.
func (m *Machined) RollbackPending() (bool, time.Time) {
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()

	return m.rollbackTimer != nil, m.rollbackDeadline
}

// ExpireRollback makes a pending TRY rollback happen now, as if its timeout
// had passed: tests play the node's clock forward instead of sleeping on it,
// so a slow machine cannot make a timeout pass early or late. It reports
// whether a rollback was pending.
func (m *Machined) ExpireRollback() bool {
	m.cfgMu.Lock()
	t := m.rollbackTimer
	m.cfgMu.Unlock()

	if t == nil || !t.Reset(0) {
		return false
	}

	for pending, _ := m.RollbackPending(); pending; pending, _ = m.RollbackPending() {
		time.Sleep(time.Millisecond)
	}

	return true
}
