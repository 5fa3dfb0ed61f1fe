package etcd

import (
	"strings"
	"testing"
)

// A lock held by an interrupted incident names the resume that takes it
// back: a resume without an ID had picked a newer, declined incident and
// stopped on the lock (seen on a lab: recover -y killed, then n at another
// recover's prompt, then resume).
func TestLockHeldHintNamesTheIncidentsResume(t *testing.T) {
	h := (&LockHeldError{Holder: LockHolder{By: "root@vm", Command: "recover", Incident: "20261207-191341-4d241e"}}).Hints()
	if !strings.Contains(strings.Join(h, "\n"), "breakglass resume 20261207-191341-4d241e") {
		t.Errorf("hints %q", h)
	}
	if h := (&LockHeldError{Holder: LockHolder{By: "root@vm"}}).Hints(); strings.Contains(strings.Join(h, "\n"), "resume") {
		t.Errorf("hints without an incident %q", h)
	}
}
