package audit

import (
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
)

// Sentinels for the kinds of failure a command maps to exit codes.
var (
	// ErrInvalidInput: the input is not a webhook configuration the audit can read.
	ErrInvalidInput = failure.New(failure.BadInput, "invalid webhook configuration input")
	// ErrFixUnsafe: the generated fix would not leave the webhook clean, or
	// would change what it matches for ordinary requests.
	ErrFixUnsafe = failure.New(failure.Refused, "generated fix failed its own audit")
)

// ParseError names the document that could not be read.
type ParseError struct {
	Source   string // file name or "-" when known
	Document int    // 1-based index of the YAML document
	Err      error
	// Syntax: the document is no YAML at all, so what it was meant to be
	// cannot be told; MachineConfig: it is a Talos machine config.
	Syntax, MachineConfig bool
}

func (e *ParseError) Error() string {
	where := fmt.Sprintf("document %d", e.Document)
	if e.Source != "" {
		where = e.Source + ": " + where
	}
	return "audit: " + where + ": " + e.Err.Error()
}

func (e *ParseError) Unwrap() []error { return []error{ErrInvalidInput, e.Err} }

const (
	hintWebhookFile   = "kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations -o yaml > webhooks.yaml, then: breakglass audit -f webhooks.yaml"
	hintMachineConfig = "a Talos machine config: talosctl -n NODE read /system/state/config.yaml > mc.yaml, then: breakglass audit -f mc.yaml (or breakglass audit -n NODE reads it through the Talos API)"
)

// Hints tells what to feed the audit: the kind of input the document is,
// or both kinds when it cannot be told.
func (e *ParseError) Hints() []string {
	switch {
	case e.MachineConfig:
		return []string{
			"each cluster.apiServer.extraArgs value is a string, or a list of strings (Talos 1.13+): fix the machine config's source, and check it with talosctl validate --config FILE --mode metal",
		}
	case e.Syntax:
		return []string{"-f takes webhook configurations and admission policies: " + hintWebhookFile, "or " + hintMachineConfig}
	}
	return []string{hintWebhookFile}
}

// UnsupportedVersionError is a Kubernetes version the start-up model does not cover.
// Reason, when set, says why Version is no version at all (v1.34.x).
type UnsupportedVersionError struct{ Version, Reason string }

func (e *UnsupportedVersionError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("audit: %q is not a Kubernetes version: %s (supported: %s)", e.Version, e.Reason, strings.Join(SupportedVersions, ", "))
	}
	return fmt.Sprintf("audit: kubernetes version %q is not modelled (supported: %s)", e.Version, strings.Join(SupportedVersions, ", "))
}

func (e *UnsupportedVersionError) Unwrap() error { return ErrInvalidInput }

// Hints names the accepted values.
func (e *UnsupportedVersionError) Hints() []string {
	return []string{"use one of: " + strings.Join(SupportedVersions, ", ")}
}

// VersionOrderError: the version upgraded from is newer than the target.
type VersionOrderError struct{ From, To string }

func (e *VersionOrderError) Error() string {
	return fmt.Sprintf("audit: cannot model a start of %s on the data of the newer %s (from must not be newer than to)", e.To, e.From)
}

func (e *VersionOrderError) Unwrap() error { return ErrInvalidInput }

// Hints says how to name the pair.
func (e *VersionOrderError) Hints() []string {
	return []string{"name the running version with --from and the target with --to, e.g. --from 1.33 --to 1.34"}
}

// TooManyConditionsError: adding the fix would exceed Kubernetes' limit of
// 64 matchConditions per webhook.
type TooManyConditionsError struct {
	Configuration, Webhook string
	Existing               int
}

func (e *TooManyConditionsError) Error() string {
	return fmt.Sprintf("audit: webhook %q in %q already has %d matchConditions; adding the fix would exceed the limit of %d",
		e.Webhook, e.Configuration, e.Existing, maxMatchConditions)
}

func (e *TooManyConditionsError) Unwrap() error { return ErrFixUnsafe }

// Hints suggests the manual way.
func (e *TooManyConditionsError) Hints() []string {
	return []string{"merge some of the existing matchConditions, then run the fix again"}
}

// FixVerificationError lists what the audit of a generated fix found.
type FixVerificationError struct{ Problems []string }

func (e *FixVerificationError) Error() string {
	return "audit: generated fix failed its own audit: " + strings.Join(e.Problems, "; ")
}

func (e *FixVerificationError) Unwrap() error { return ErrFixUnsafe }

// Sentinels for what an audit found, so that a command can exit non-zero.
var (
	ErrDeadlockRisk  = failure.New(failure.AuditDeadlock, "webhook can deadlock kube-apiserver start-up")
	ErrUnknownRisk   = failure.New(failure.AuditUnknown, "webhook risk could not be decided")
	ErrSlowStartRisk = failure.New(failure.AuditSlowStart, "webhook can slow kube-apiserver start-up")
)

// RiskError is a report whose worst risk is not none.
type RiskError struct {
	Risk     Risk
	Webhooks []string // Finding.Subject of each finding at that risk
	Flags    []string // ArgFinding.Subject of each extraArgs finding at that risk
}

func (e *RiskError) Error() string {
	var parts []string
	if len(e.Webhooks) > 0 || len(e.Flags) == 0 {
		parts = append(parts, fmt.Sprintf("%d webhook(s) at risk %s: %s", len(e.Webhooks), e.Risk, strings.Join(e.Webhooks, ", ")))
	}
	if len(e.Flags) > 0 {
		parts = append(parts, fmt.Sprintf("%d kube-apiserver flag(s) at risk %s: %s", len(e.Flags), e.Risk, strings.Join(e.Flags, ", ")))
	}
	return "audit: " + strings.Join(parts, "; ")
}

func (e *RiskError) Unwrap() error {
	switch e.Risk {
	case RiskDeadlock:
		return ErrDeadlockRisk
	case RiskUnknown:
		return ErrUnknownRisk
	}
	return ErrSlowStartRisk
}

// Hints names the fix.
func (e *RiskError) Hints() []string {
	var out []string
	if len(e.Webhooks) > 0 {
		out = append(out, "breakglass audit --fix: adds matchConditions "+ExcludeAPIServerExpression+" to the webhooks at risk")
	}
	if len(e.Flags) > 0 {
		out = append(out, "change cluster.apiServer.extraArgs as each fix: line says, in the machine config's source (Omni template, talhelper, Terraform, patch files), before the upgrade")
	}
	return out
}

// Err returns a *RiskError for the worst risk found, or nil when every
// webhook is none.
func (r Report) Err() error {
	if r.Risk == RiskNone || r.Risk == "" {
		return nil
	}
	e := &RiskError{Risk: r.Risk}
	for _, f := range r.Findings {
		if f.Risk == r.Risk {
			e.Webhooks = append(e.Webhooks, f.Subject())
		}
	}
	for _, f := range r.APIServerArgs {
		if f.Risk == r.Risk {
			e.Flags = append(e.Flags, f.Subject())
		}
	}
	return e
}
