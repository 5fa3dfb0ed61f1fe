package lab

// The way out of a full etcd, by hand, with breakglass's etcd package and
// the Talos API: the reference the etcd-nospace runbook is measured against.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/talos"
)

// EtcdClient connects breakglass's etcd package to every member of the
// lab's etcd, with the lab's client certificate from cluster.etcd.ca.
func (l *Lab) EtcdClient(ctx context.Context) (*etcd.Client, error) {
	return etcd.Connect(ctx, etcd.Config{Endpoints: l.Etcd.Endpoints, CACertPEM: l.Etcd.CACertPEM, CertPEM: l.Etcd.CertPEM, KeyPEM: l.Etcd.KeyPEM})
}

// EtcdKeys reads every key in etcd with its value, at one revision, which
// it returns too. The read is serializable: a member that lost its quorum
// answers it with the data a recovery starts from.
func EtcdKeys(ctx context.Context, ec *etcd.Client) (map[string]string, int64, error) {
	resp, err := ec.KV().Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithSerializable())
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out, resp.Header.Revision, nil
}

// KeyDiff is how the keys of etcd changed between two readings.
type KeyDiff struct {
	Gone    []string `json:"gone,omitempty"`    // in the first reading only
	Changed []string `json:"changed,omitempty"` // in both, with another value
	Added   []string `json:"added,omitempty"`   // in the second only
}

// DiffKeys compares two EtcdKeys readings; each list is sorted.
func DiffKeys(before, after map[string]string) KeyDiff {
	var d KeyDiff
	for k, v := range before {
		switch w, ok := after[k]; {
		case !ok:
			d.Gone = append(d.Gone, k)
		case w != v:
			d.Changed = append(d.Changed, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d.Added = append(d.Added, k)
		}
	}
	slices.Sort(d.Gone)
	slices.Sort(d.Changed)
	slices.Sort(d.Added)
	return d
}

// Lost are the keys gone or changed that kube-apiserver does not account
// for: a key it writes may change, and one of its leases may expire (a
// kube-apiserver that went with its node leaves its master lease to lapse).
func (d KeyDiff) Lost() (gone, changed []string) {
	for _, k := range d.Gone {
		if !strings.HasPrefix(k, "/registry/masterleases/") && !strings.HasPrefix(k, "/registry/leases/kube-system/") {
			gone = append(gone, k)
		}
	}
	for _, k := range d.Changed {
		if !APIServerWrites(k) {
			changed = append(changed, k)
		}
	}
	return gone, changed
}

// apiServerKeys are the keys (or prefixes, ending in /) kube-apiserver
// itself writes when it starts or runs, measured on v1.32.13 and v1.34.4:
// its identity and endpoint leases, the kubernetes Service's endpoints, the
// bootstrap objects NewVersion adds or updates (RBAC, priority and fairness
// with their status, aggregated API registrations, the default ServiceCIDR
// and its IPAddress), and the compaction mark.
var apiServerKeys = []string{
	"compact_rev_key",
	"/registry/leases/kube-system/",
	"/registry/masterleases/",
	"/registry/services/endpoints/default/kubernetes",
	"/registry/endpointslices/default/kubernetes",
	"/registry/clusterroles/",
	"/registry/clusterrolebindings/",
	"/registry/roles/",
	"/registry/rolebindings/",
	"/registry/flowschemas/",
	"/registry/prioritylevelconfigurations/",
	"/registry/apiregistration.k8s.io/apiservices/",
	"/registry/servicecidrs/kubernetes",
	"/registry/ipaddresses/",
	"/registry/events/default/",
	// The service IP range's allocation, rewritten by the repair loop of a
	// kube-apiserver that starts on an etcd restored from a copy (seen
	// after the etcd-quorum-lost recovery).
	"/registry/ranges/serviceips",
}

// APIServerWrites tells whether kube-apiserver itself writes key as it
// starts or runs: the churn a comparison of etcd before and after a
// recovery must allow, and nothing else.
func APIServerWrites(key string) bool {
	return slices.ContainsFunc(apiServerKeys, func(p string) bool {
		return key == p || strings.HasSuffix(p, "/") && strings.HasPrefix(key, p)
	})
}

// DefragStep is one member's defragmentation through its node's Talos API,
// with its database size (what the quota counts) at each stage.
type DefragStep struct {
	Node     string `json:"node"`
	MemberID string `json:"memberID"`
	Leader   bool   `json:"leader"`
	// Full is the size found, Compacted after the compaction (it grows: the
	// compaction writes, and the quota does not hold it back), Defragmented
	// after this member's defragmentation.
	Full         int64         `json:"dbSizeFull"`
	Compacted    int64         `json:"dbSizeCompacted"`
	Defragmented int64         `json:"dbSizeDefragmented"`
	Took         time.Duration `json:"tookNanoseconds"`
}

// WayOut is what ClearNoSpaceByHand did, step by step.
type WayOut struct {
	Compaction *etcd.CompactResult `json:"compaction"`
	Defrag     []DefragStep        `json:"defrag"` // in the order run: the leader last
	Disarm     *etcd.DisarmResult  `json:"disarm"`
	Probe      *etcd.ProbeResult   `json:"probe"`
	Elapsed    time.Duration       `json:"elapsedNanoseconds"`
}

// ClearNoSpaceByHand is the way out of a full etcd with nothing deleted and
// no configuration changed: etcd's history compacted (the etcd package),
// then each member defragmented through its node's Talos API (talosctl etcd
// defrag), one at a time, the leader last, then the NOSPACE alarms disarmed
// and a write probed (the etcd package). The live keys stay as they were;
// kube-apiserver comes back by itself once etcd takes writes.
func ClearNoSpaceByHand(ctx context.Context, l *Lab) (*WayOut, error) {
	start := time.Now()
	ec, err := l.EtcdClient(ctx)
	if err != nil {
		return nil, err
	}
	defer ec.Close()
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	var order []DefragStep
	for _, ip := range l.Nodes() {
		st, err := tc.EtcdStatus(ctx, ip)
		if err != nil {
			return nil, err
		}
		order = append(order, DefragStep{Node: ip, MemberID: talos.MemberIDString(st.MemberID), Full: st.DBSize})
	}
	w := &WayOut{}
	if w.Compaction, err = ec.Compact(ctx, 0, etcd.RealWriter(ec)); err != nil {
		return w, fmt.Errorf("compact: %w", err)
	}
	for i, s := range order {
		st, err := tc.EtcdStatus(ctx, s.Node)
		if err != nil {
			return w, err
		}
		order[i].Compacted, order[i].Leader = st.DBSize, st.IsLeader()
	}
	slices.SortStableFunc(order, func(a, b DefragStep) int { return boolInt(a.Leader) - boolInt(b.Leader) })
	for _, s := range order {
		t0 := time.Now()
		if err := tc.EtcdDefragment(ctx, s.Node); err != nil {
			return w, err
		}
		s.Took = time.Since(t0)
		st, err := tc.EtcdStatus(ctx, s.Node)
		if err != nil {
			return w, err
		}
		s.Defragmented = st.DBSize
		w.Defrag = append(w.Defrag, s)
	}
	if w.Disarm, err = ec.DisarmNoSpace(ctx, etcd.RealWriter(ec)); err != nil {
		return w, fmt.Errorf("disarm: %w", err)
	}
	if w.Probe, err = ec.ProbeWrite(ctx, etcd.RealWriter(ec)); err != nil {
		return w, err
	}
	w.Elapsed = time.Since(start)
	return w, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
