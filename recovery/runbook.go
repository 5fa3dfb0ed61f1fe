package recovery

import (
	"github.com/breakglass-dev/breakglass/runbooks"
)

// StepsOf turns a loaded runbook into the steps the engine runs.
func StepsOf(rb *runbooks.Runbook) []Step {
	steps := make([]Step, 0, len(rb.Spec.Steps))
	for _, rs := range rb.Spec.Steps {
		s := Step{Name: rs.Name, Action: string(rs.Action), Description: rs.Description, Confirm: rs.Confirm, Optional: rs.Optional}
		switch p := rs.Params.(type) {
		case *runbooks.DiagnoseParams:
			s.TailLines = p.TailLines
		case *runbooks.AdmissionDisableParams:
			s.Plugins, s.RevertAfter = p.Plugins, p.RevertAfter.Std()
		case *runbooks.APIServerWaitParams:
			s.Timeout = p.Timeout.Std()
		case *runbooks.WebhookWaitParams:
			s.Timeout = p.Timeout.Std()
		case *runbooks.EtcdDeleteParams:
			s.Kind, s.Names = string(p.Kind), p.Names
		}
		steps = append(steps, s)
	}
	return steps
}
