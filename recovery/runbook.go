package recovery

import (
	"github.com/breakglass-dev/breakglass/runbooks"
)

// StepsOf turns a loaded runbook into the steps the engine runs.
func StepsOf(rb *runbooks.Runbook) []Step {
	steps := make([]Step, 0, len(rb.Spec.Steps))
	for _, rs := range rb.Spec.Steps {
		steps = append(steps, Step{Name: rs.Name, Description: rs.Description, Confirm: rs.Confirm, Optional: rs.Optional, Params: rs.Params})
	}
	return steps
}
