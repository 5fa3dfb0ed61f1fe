package recovery

// OutputChecker is a UI that can tell whether what it writes still reaches
// the operator (issue 29). The loop asks it right before each change is
// applied: a change whose record (the backup's path, the way back) cannot
// be written is not made, and the step fails with the UI's error. A UI
// that does not implement it (the lab's) is taken to be writing fine.
type OutputChecker interface {
	// OutputErr is nil while the output takes writes, or why it does not.
	OutputErr() error
}

// outputFailing is the UI's OutputErr, nil for a UI that cannot tell.
func outputFailing(ui UI) error {
	if c, ok := ui.(OutputChecker); ok {
		return c.OutputErr()
	}
	return nil
}
