package lab

import (
	"context"
	"fmt"
	"io"
	"time"
)

// rehearseEtcdLoss recovers etcd-member-lost or etcd-quorum-lost as
// `breakglass recover --yes` does (its diagnosis switches to runbook
// etcd-member-lost or etcd-quorum-lost), then checks: three healthy
// members, kube-apiserver ready on every node, every key written before the
// loss back byte for byte, and, after a restore, no kube-apiserver that
// started before it (its watch cache would serve what etcd no longer holds).
func rehearseEtcdLoss(ctx context.Context, l *Lab, scenario string, rep *Rehearsal, tl *Timeline, out io.Writer, toolVersion string) error {
	ec, err := l.EtcdClient(ctx)
	if err != nil {
		return err
	}
	before, _, err := EtcdKeys(ctx, ec)
	ec.Close()
	if err != nil {
		return err
	}
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return err
	}
	defer tc.Close()
	start := time.Now()
	res, check := guidedRecovery(ctx, l, tc, scenario, rep, tl, out, toolVersion)
	if res == nil {
		return nil
	}
	check("the diagnosis said "+scenario, res.Decision != nil && res.Decision.Verdict == scenario, fmt.Sprintf("%+v", res.Decision))
	healthy := true
	for _, ip := range l.Nodes() {
		healthy = healthy && EtcdHealthy(l.EtcdState(ip))
	}
	check(fmt.Sprintf("%d healthy etcd members", len(l.Nodes())), healthy, "")
	if err := tl.Step("kube-apiserver ready on every node", func() error { return l.WaitReady(ctx, 3*time.Minute) }); err != nil {
		check("kube-apiserver ready on every node", false, err.Error())
	}
	if scenario == ScenarioEtcdQuorumLost {
		var stale []string
		for ip, r := range l.Current() {
			if r.Started.Before(start) {
				stale = append(stale, ip)
			}
		}
		check("every kube-apiserver started after the restore (no watch cache from before it)", len(stale) == 0, fmt.Sprint(stale))
	}
	ec, err = l.EtcdClient(ctx)
	if err != nil {
		check("every key written before the loss back byte for byte", false, err.Error())
		return nil
	}
	defer ec.Close()
	after, _, err := EtcdKeys(ctx, ec)
	gone, changed := DiffKeys(before, after).Lost()
	check("every key written before the loss back byte for byte", err == nil && len(gone) == 0 && len(changed) == 0,
		fmt.Sprintf("gone %q, changed %q (of %d keys)", gone, changed, len(before)))
	return nil
}
