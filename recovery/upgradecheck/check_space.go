package upgradecheck

// etcd-space: room under each member's quota for the upgrade's writes.

import (
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/etcd"
)

// needed room: what the upgrade writes, and etcd's largest request. A
// write is refused once the database plus the write would reach the
// quota (storage/quota.go Available), which is what MemberStatus.Full
// reads as within 2 MiB of it.
const requestMargin = 2 << 20

// modelledUpgradeBytes is what an upgrade not recorded is assumed to
// write: every recorded pair wrote less than 32 KiB.
const modelledUpgradeBytes = 256 << 10

// defaultQuota is etcd's --quota-backend-bytes default, as on Talos.
const defaultQuota = 2 << 30

var spaceCheck = &checkDef{
	ID:    CheckEtcdSpace,
	Title: "etcd room for the upgrade's writes",
	Help: "each member under its quota by the room the upgrade's writes need, with what compaction and " +
		"defragmentation would free",
	NoGo:  "a member has less room under its quota than the upgrade needs (what the target wrote when recorded, per control plane, and etcd's largest request)",
	Warn:  "over 80% after it",
	Fix:   "compact and defragment: breakglass recover (runbook etcd-nospace), or raise the quota (cluster.etcd.extraArgs.quota-backend-bytes)",
	Needs: []need{needTalosAPI, needControlPlane, needQuorum},
	Judge: factsOnly(judgeSpace),
}

func judgeSpace(f *facts) Check {
	var c Check
	cps := controlPlanes(f.nodes)
	writes := int64(modelledUpgradeBytes)
	how := "an assumed " + etcd.FormatBytes(writes) + " (this pair was not recorded)"
	if f.recorded != nil {
		writes = f.recorded.EtcdBytes * int64(max(1, len(cps)))
		how = fmt.Sprintf("%s: %s per kube-apiserver (recorded from %s -> %s) x %d control plane(s)", etcd.FormatBytes(writes), etcd.FormatBytes(f.recorded.EtcdBytes), f.recorded.From, f.recorded.To, max(1, len(cps)))
	}
	needed := writes + requestMargin
	c.Evidence = append(c.Evidence, fmt.Sprintf("the upgrade needs %s of room: its writes, %s, and etcd's largest request (2 MiB)", etcd.FormatBytes(needed), how))
	configQuota := int64(0)
	for _, n := range cps {
		if n.EtcdQuota > 0 {
			configQuota = n.EtcdQuota
		}
	}
	var full, tight []string
	seen := 0
	for _, m := range f.members {
		if m.Status == nil {
			continue
		}
		seen++
		quota, qhow := m.Status.Quota, ""
		switch {
		case quota > 0:
		case configQuota > 0:
			quota, qhow = configQuota, " (cluster.etcd.extraArgs)"
		default:
			quota, qhow = defaultQuota, " (etcd's default; etcd not read directly)"
		}
		room := quota - m.Status.DBSize
		c.Evidence = append(c.Evidence, fmt.Sprintf("%s: database %s of a %s quota%s (%.0f%%), %s in use, %s free pages; room %s",
			memberName(m), etcd.FormatBytes(m.Status.DBSize), etcd.FormatBytes(quota), qhow, 100*float64(m.Status.DBSize)/float64(quota),
			etcd.FormatBytes(m.Status.DBSizeInUse), etcd.FormatBytes(max(0, m.Status.DBSize-m.Status.DBSizeInUse)), etcd.FormatBytes(max(0, room))))
		switch {
		case room < needed:
			full = append(full, memberName(m))
		case float64(m.Status.DBSize+needed) > 0.8*float64(quota):
			tight = append(tight, memberName(m))
		}
	}
	if u := f.usage; u != nil {
		c.Evidence = append(c.Evidence, fmt.Sprintf("live keys %s; once compacted and defragmented the fullest member would be about %s (compaction frees about %s of history inside the file, defragmentation gives back %s of free pages)",
			etcd.FormatBytes(u.Space.Live), etcd.FormatBytes(u.Space.AfterDefrag), etcd.FormatBytes(u.Space.History), etcd.FormatBytes(u.Space.Fragmented)))
		if top := u.Top(1); len(top) > 0 {
			c.Evidence = append(c.Evidence, "the largest group: "+top[0].String())
		}
	}
	reclaim := ""
	if u := f.usage; u != nil && u.Space.Reclaimable > 0 {
		reclaim = fmt.Sprintf(" (frees about %s)", etcd.FormatBytes(u.Space.Reclaimable))
	}
	switch {
	case seen == 0:
		c.Verdict, c.NotChecked, c.Summary = NoGo, true, "no member's size could be read"
	case len(full) > 0:
		c.Verdict = NoGo
		c.Summary = fmt.Sprintf("%s ha%s less room under its quota than the upgrade needs (%s): the new kube-apiserver's start-up writes would be refused", strings.Join(full, ", "), pluralS(len(full)), etcd.FormatBytes(needed))
		c.Fix = []string{"compact and defragment" + reclaim + ": breakglass " + contextFlag(f) + "recover (runbook etcd-nospace: verified snapshot first, leader last), then check again",
			"if the live data alone is too big: raise the quota (cluster.etcd.extraArgs.quota-backend-bytes) or delete what fills it (breakglass etcd usage names it)"}
	case len(tight) > 0:
		c.Verdict = Warn
		c.Summary = fmt.Sprintf("%s will be over 80%% of its quota after the upgrade's writes", strings.Join(tight, ", "))
		c.Fix = []string{"compact and defragment" + reclaim + ", or raise the quota, before etcd raises NOSPACE"}
	default:
		c.Verdict = Go
		c.Summary = fmt.Sprintf("every member has room for the upgrade's writes (it needs %s)", etcd.FormatBytes(needed))
	}
	return c
}

func pluralS(n int) string {
	if n == 1 {
		return "s"
	}
	return "ve"
}
