package recovery

// Decision is what the diagnosis fixes for the rest of a guided recovery,
// before its first change. It is journaled with the diagnose step, and a
// resumed run follows it: a diagnosis made after the change would say
// healthy and decide nothing. It holds what every incident type decides;
// what one type decides (the plugins to turn off, the flags to take out,
// the lost members) is that type's own value, Of, which fills the
// parameters of the steps the run follows after diagnose: no step reads
// the decision.
type Decision struct {
	Verdict string `json:"verdict"`
	// Type is the incident type (IncidentType.Name).
	Type     string   `json:"type,omitempty"`
	Reasons  []string `json:"reasons,omitempty"`  // why the plan is what it is
	Runbook  string   `json:"runbook,omitempty"`  // the built-in runbook the diagnosis names
	Warnings []string `json:"warnings,omitempty"` // where the operator's flags go against the diagnosis
	// Steps replace the run's steps after diagnose when the run's runbook
	// is not the type's: the loop follows them.
	Steps []Step `json:"steps,omitempty"`
	// Of is what the type decided (*AdmissionDecision, *FlagsDecision,
	// *EtcdMembersDecision, ...). Its fields are the decision's own in the
	// JSON, beside those above, as they were before types owned them.
	Of Decided `json:"-"`
}

// Decided is an incident type's own decision.
type Decided interface {
	// Fill gives the steps the run follows after diagnose with the
	// parameters this decision fixes, and worded as this run follows them.
	// It changes copies: the steps given, and their Params, stay as they were.
	Fill(steps []Step) []Step
}
