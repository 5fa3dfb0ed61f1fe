package recovery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/runbooks"
)

func init() { register((*run).breakLock) }

// LockBreakParams: lock.break removes the cluster lock (lock break).
type LockBreakParams struct{}

func (*LockBreakParams) Action() runbooks.Action { return ActionLockBreak }

// LockBreakResult is who held the lock that was broken (or would be).
type LockBreakResult struct {
	said
	Holder *etcd.LockHolder `json:"holder,omitempty"`
	// Unreadable is a value breakglass could not read, shown safely.
	Unreadable string `json:"unreadable,omitempty"`
	Broken     bool   `json:"broken"`
}

// breakLock removes the cluster lock whoever holds it: for a holder that
// is gone. Its own change is the lock, so it takes none.
func (r *run) breakLock(ctx context.Context, _ Step, _ *LockBreakParams) (*Plan, error) {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	h, err := ec.ReadLock(ctx)
	var unreadable *etcd.UnreadableLockError
	res := &LockBreakResult{Holder: h}
	plan := &Plan{Result: res}
	switch {
	case errors.As(err, &unreadable):
		res.Unreadable = unreadable.Shown()
		plan.View = Text(fmt.Sprintf("The lock holds a value breakglass cannot read (another tool, or another version of breakglass?): %s\n", unreadable.Shown()))
	case err != nil:
		return nil, err
	case h == nil:
		res.said = "the cluster lock is free: nothing to break"
		return plan, nil
	default:
		plan.View = Text(fmt.Sprintf("The lock is held by %s.\n", HolderText(h)))
	}
	plan.Change, plan.DryRun = true, "the lock was not broken"
	plan.Undo = nothingToUndo("break the cluster lock", "the next run takes it again")
	plan.Ask = []Question{{Text: "Break it? Only if that run is really gone."}}
	plan.Apply = func(ctx context.Context) (Result, error) {
		if _, err := ec.BreakLock(ctx); err != nil {
			return res, err
		}
		res.Broken, res.said = true, "lock broken"
		return res, nil
	}
	return plan, nil
}

// HolderText names a lock holder; its words come from etcd, made safe.
func HolderText(h *etcd.LockHolder) string {
	return fmt.Sprintf("%s (%s, incident %s) since %s", termsafe.String(h.By), termsafe.String(h.Command), termsafe.String(h.Incident), h.Since.Local().Format(time.RFC3339))
}
