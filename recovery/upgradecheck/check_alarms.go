package upgradecheck

// etcd-alarms: no NOSPACE or CORRUPT alarm.

import (
	"github.com/breakglass-dev/breakglass/etcd"
)

var alarmsCheck = &checkDef{
	ID:    CheckEtcdAlarms,
	Title: "no etcd alarm",
	Help:  "no NOSPACE or CORRUPT alarm",
	NoGo:  "NOSPACE or CORRUPT",
	Fix:   "NOSPACE: breakglass recover (runbook etcd-nospace); CORRUPT: find the member that diverged before anything else",
	Needs: []need{needTalosAPI, needControlPlane, needQuorum},
	Judge: factsOnly(judgeAlarms),
}

func judgeAlarms(f *facts) Check {
	if f.alarmsErr != nil && f.alarmsFrom == "" {
		return unread("etcd's alarms could not be read", f.alarmsErr)
	}
	var c Check
	if len(f.alarms) == 0 {
		c.Verdict, c.Summary = Go, "no alarm raised"
		c.Evidence = []string{"alarms read from " + f.alarmsFrom}
		return c
	}
	c.Verdict = NoGo
	c.Summary = "etcd has alarms raised: " + etcd.AlarmsText(f.alarms)
	for _, a := range f.alarms {
		c.Evidence = append(c.Evidence, a.String())
		switch a.Type {
		case etcd.AlarmNoSpace:
			c.Fix = appendNew(c.Fix, "NOSPACE: etcd refuses every write, and the upgraded kube-apiserver cannot make its start-up writes: breakglass "+contextFlag(f)+"recover (runbook etcd-nospace: a verified snapshot, compaction, defragmentation one member at a time, the alarm disarmed)")
		case etcd.AlarmCorrupt:
			c.Fix = appendNew(c.Fix, "CORRUPT: the members disagree on their data: never disarm it without finding the member that diverged (etcd's data corruption docs); restore from a snapshot if needed")
		}
	}
	return c
}
