package recovery

// SetFaultHook makes the engine call fn at its named fault points (a crash
// simulated there), until the returned function is called.
func SetFaultHook(fn func(point string)) (restore func()) {
	faultHook = fn
	return func() { faultHook = nil }
}

// Whoami is the operator as breakglass records it in journals and locks:
// user@host.
var Whoami = whoami
