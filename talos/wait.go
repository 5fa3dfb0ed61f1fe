package talos

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SupportsListArgs tells whether a Talos version accepts a list of strings
// as an extraArgs value (1.13 and later). Unknown versions are treated as old:
// a comma-joined string works everywhere.
func SupportsListArgs(version string) bool {
	v := strings.TrimPrefix(version, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 1 || (major == 1 && minor >= 13)
}

// PodObservation is one look at the kube-apiserver static pod of a node.
type PodObservation struct {
	Pod    APIServerPod
	Status PodStatus
}

// WatchAPIServer polls the node's rendered kube-apiserver pod and its status
// every interval and calls observe with each look until observe returns true
// or ctx ends. Polling the two small resources is cheap and notices a change
// within one interval, on every Talos version.
func (c *Client) WatchAPIServer(ctx context.Context, node, nodeName string, interval time.Duration, observe func(PodObservation) bool) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pod, err := c.ReadAPIServerPod(ctx, node)
		if err == nil {
			var st PodStatus
			st, err = c.ReadAPIServerStatus(ctx, node, nodeName)
			if err == nil && observe(PodObservation{Pod: pod, Status: st}) {
				return nil
			}
		}
		if err != nil && !errors.Is(err, ErrUnreachable) {
			return err // a refusal will not go away by asking again
		}
		if ctx.Err() != nil {
			if err != nil {
				return err
			}
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
