package recovery

import "time"

// SetFaultHook makes the engine call fn at its named fault points (a crash
// simulated there), until the returned function is called.
func SetFaultHook(fn func(point string)) (restore func()) {
	faultHook = fn
	return func() { faultHook = nil }
}

// Whoami is the operator as breakglass records it in journals and locks:
// user@host.
var Whoami = whoami

// TypeCoversEveryMember tells whether the registered incident type acts
// on every etcd member (and refuses a run naming fewer control planes).
func TypeCoversEveryMember(name string) bool {
	t := typeNamed(name)
	return t != nil && t.Scope == ScopeEveryMember
}

// SetLostAfter shortens how long the diagnosis watches an etcd member down
// before it counts as lost, until the returned function is called.
func SetLostAfter(d time.Duration) (restore func()) {
	old := lostAfter
	lostAfter = d
	return func() { lostAfter = old }
}
