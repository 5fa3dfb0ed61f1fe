package lab

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
)

// rehearseNoSpace recovers the etcd-nospace scenario as `breakglass recover
// --yes` does (its diagnosis switches to runbook etcd-nospace), then
// checks: ready everywhere, no alarm, configs byte-identical, no live key
// lost, the incident's snapshot verified.
func rehearseNoSpace(ctx context.Context, l *Lab, rep *Rehearsal, tl *Timeline, out io.Writer, toolVersion string) error {
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return err
	}
	defer tc.Close()
	ec, err := l.EtcdClient(ctx)
	if err != nil {
		return err
	}
	defer ec.Close()
	before, _, err := EtcdKeys(ctx, ec)
	if err != nil {
		return err
	}
	configs := map[string]string{}
	for _, ip := range l.Nodes() {
		cfg, err := tc.ReadMachineConfig(ctx, ip)
		if err != nil {
			return err
		}
		configs[ip] = cfg.Hash()
	}
	res, check := guidedRecovery(ctx, l, tc, "etcd-nospace", rep, tl, out, toolVersion)
	if res == nil {
		return nil
	}
	check("the diagnosis said etcd-nospace", res.Decision != nil && res.Decision.Verdict == "etcd-nospace", fmt.Sprintf("%+v", res.Decision))
	if err := tl.Step("kube-apiserver "+NewVersion+" ready on every node", func() error { return l.WaitReadyVersion(ctx, NewVersion, 6*time.Minute) }); err != nil {
		check("kube-apiserver "+NewVersion+" ready on every node", false, err.Error())
	}
	alarms, err := ec.Alarms(ctx)
	check("no alarm raised", err == nil && len(alarms) == 0, fmt.Sprint(alarms, err))
	same := true
	for ip, h := range configs {
		cfg, err := tc.ReadMachineConfig(ctx, ip)
		same = same && err == nil && cfg.Hash() == h
	}
	check("machine configs byte-identical", same, "")
	after, _, err := EtcdKeys(ctx, ec)
	d := DiffKeys(before, after)
	var foreign []string
	for _, k := range d.Changed {
		if !APIServerWrites(k) {
			foreign = append(foreign, k)
		}
	}
	check("no live key lost or changed but kube-apiserver's own", err == nil && len(d.Gone) == 0 && len(foreign) == 0, fmt.Sprintf("gone %q, changed %q", d.Gone, foreign))
	snap := filepath.Join(l.Dir, "state", "incidents", res.Incident, "etcd.snapshot")
	_, verr := etcd.VerifySnapshotFile(snap)
	check("the incident's snapshot verified on disk", verr == nil, fmt.Sprint(verr))
	if len(res.Next) > 0 {
		fmt.Fprintf(out, "%s\n", strings.Join(res.Next, "\n"))
	}
	return nil
}
