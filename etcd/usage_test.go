package etcd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goldenfile "github.com/breakglass-dev/breakglass/internal/golden"

	"github.com/breakglass-dev/breakglass/etcd"
)

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

// sampleUsage is a report as a three-member cluster in an event flood
// gives it, one member not answering, with an odd key meant to recolour
// the terminal.
func sampleUsage() *etcd.Usage {
	mib := int64(1 << 20)
	g := func(res, ns string, sc etcd.Scope, keys, bytes int64, ex ...string) etcd.UsageGroup {
		return etcd.UsageGroup{Resource: res, Namespace: ns, Scope: sc, UsageCount: etcd.UsageCount{Keys: keys, Bytes: bytes}, Share: float64(bytes) * 100 / float64(1460*mib), Examples: ex}
	}
	nsd, cl := etcd.ScopeNamespaced, etcd.ScopeCluster
	return &etcd.Usage{
		Prefix:     "/registry",
		Cluster:    etcd.ClusterInfo{ClusterID: 0x4597d60c7b8fec74, MemberID: 0x6a002de9ee6fee7, Revision: 81234567},
		Consistent: true,
		Total:      etcd.UsageCount{Keys: 1_204_311, Bytes: 1460*mib - 46},
		Outside:    etcd.UsageCount{Keys: 2, Bytes: 46},
		Groups: []etcd.UsageGroup{
			g("events", "ci-runners", nsd, 1_150_002, 1201*mib),
			g("example.com/widgets", "team-a", nsd, 12, 180*mib),
			g("pods", "ci-runners", nsd, 40_000, 60*mib),
			g("configmaps", "kube-system", nsd, 120, 8*mib),
			g("namespaces", "", cl, 14_000, 6*mib),
			g("secrets", "default", nsd, 177, 5*mib-46),
			g("\x1b[31mred", "", etcd.ScopeOdd, 1, 23, "/registry/\x1b[31mred/a/b/c"),
			g("compact_rev_key", "", etcd.ScopeOutside, 1, 23),
			g("/breakglass", "", etcd.ScopeOutside, 1, 23),
		},
		Resources: []etcd.ResourceUsage{
			{Resource: "events", Scope: nsd, UsageCount: etcd.UsageCount{Keys: 1_150_002, Bytes: 1201 * mib}, Namespaces: 1},
		},
		Largest: []etcd.KeyUsage{
			{Key: "/registry/example.com/widgets/team-a/w1", Bytes: 15 * mib, Version: 48_211, ModRevision: 81234560},
			{Key: "/registry/configmaps/kube-system/big", Bytes: 1 * mib, Version: 1, ModRevision: 1200},
		},
		MostWritten: []etcd.KeyUsage{
			{Key: "/registry/example.com/widgets/team-a/w1", Bytes: 15 * mib, Version: 48_211, ModRevision: 81234560},
			{Key: "/registry/leases/kube-system/kube-scheduler", Bytes: 443, Version: 9120, ModRevision: 81234501},
		},
		Space: etcd.Space{
			Members: []etcd.MemberStatus{
				{Endpoint: "https://10.5.0.2:2379", MemberID: 0x6a002de9ee6fee7, Leader: 0x6a002de9ee6fee7, IsLeader: true, Version: "3.6.16", DBSize: 2048 * mib, DBSizeInUse: 1990 * mib, Quota: 2048 * mib, Revision: 81234567, Errors: []string{"memberID:477384715673206503 alarm:NOSPACE "}},
				{Endpoint: "https://10.5.0.3:2379", MemberID: 0x1c2b3a4d5e6f7081, Leader: 0x6a002de9ee6fee7, Version: "3.6.16", DBSize: 2000 * mib, DBSizeInUse: 1985 * mib, Quota: 2048 * mib, Revision: 81234567},
				{Endpoint: "https://10.5.0.4:2379", Error: "etcd unreachable at https://10.5.0.4:2379: connection refused"},
			},
			Fullest: "https://10.5.0.2:2379", DBSize: 2048 * mib, DBSizeInUse: 1990 * mib, Quota: 2048 * mib,
			Live: 1460 * mib, AfterDefrag: 1712 * mib, History: 278 * mib, Fragmented: 58 * mib, Reclaimable: 336 * mib,
		},
		Elapsed: 14*time.Second + 210*time.Millisecond,
	}
}

func TestUsageRenderGolden(t *testing.T) {
	u := sampleUsage()
	var txt bytes.Buffer
	if err := u.WriteText(&txt, 5); err != nil {
		t.Fatal(err)
	}
	golden(t, "usage.txt", txt.Bytes())
	if strings.Contains(txt.String(), "\x1b") {
		t.Error("a key drove the terminal")
	}
	js, err := json.MarshalIndent(u, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "usage.json", append(js, '\n'))

	if got := u.Top(2)[1].String(); got != "example.com/widgets in namespace team-a: 12 keys, 180.0 MiB" {
		t.Errorf("quoted %q", got)
	}
	if got := u.Groups[4].String(); got != "namespaces (cluster-scoped): 14000 keys, 6.0 MiB" {
		t.Errorf("quoted %q", got)
	}
	if got := u.Groups[6].String(); got != `odd keys under \x1b[31mred: 1 key, 23 B` {
		t.Errorf("quoted %q", got)
	}
	if len(u.Top(100)) != len(u.Groups) {
		t.Error("Top past the end")
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 40 << 20: "40.0 MiB", 2 << 30: "2.0 GiB", 3 << 40: "3.0 TiB", -2048: "-2.0 KiB"} {
		if got := etcd.FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// The report counts every key exactly once however the keys fall: bytes
// 0x00 and 0xff in keys, keys that end a window, one subtree far larger
// than a page beside many tiny ones, keys right at the prefix's edges;
// with pages of 16 keys, so that it takes hundreds of windows.
func TestUsageCountsEveryKeyOnce(t *testing.T) {
	f := newFullEtcd(t)
	kvs := map[string]string{
		"/registry": "edge", "/registry0": "edge", "/registry.": "edge", "/registrz": "edge",
		"/registry/": "odd", "/registry/\xff": "odd", "/registry/\xff\xff/a": "odd", "/registry/a\x00/b": "odd",
		"\x01": "first", "\xff\xff\xff": "last", "compact_rev_key": "7",
		"/registry/a/b": "x", "/registry/a/b\x00": "x", "/registry/a/b\xff": "x", "/registry/a/c": "x",
		"/breakglass/lock": "held",
	}
	for i := range 2000 {
		kvs[fmt.Sprintf("/registry/events/flood/crashloop-%06d.17a2b3c4d5e6f708", i)] = strings.Repeat("e", 100+i%7)
	}
	for i := range 300 {
		kvs[fmt.Sprintf("/registry/pods/ns-%03d/p", i)] = "p"
		kvs[fmt.Sprintf("/registry/ns-%03d.example.com/widgets/w", i)] = "w"
	}
	for len(kvs) > 0 {
		batch := map[string]string{}
		for k, v := range kvs {
			batch[k] = v
			delete(kvs, k)
			if len(batch) == 100 {
				break
			}
		}
		if err := f.putAll(batch); err != nil {
			t.Fatal(err)
		}
	}
	u, err := f.c.Usage(ctx, etcd.UsageOptions{PageBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	var under, outside etcd.UsageCount
	groups := map[string]etcd.UsageCount{}
	for k, v := range f.live {
		p := etcd.ParseKey("/registry", k)
		c := &under
		if p.Scope == etcd.ScopeOutside {
			c = &outside
		}
		c.Keys++
		c.Bytes += int64(len(k) + len(v))
		g := groups[p.Resource+"|"+p.Namespace+"|"+string(p.Scope)]
		g.Keys++
		g.Bytes += int64(len(k) + len(v))
		groups[p.Resource+"|"+p.Namespace+"|"+string(p.Scope)] = g
	}
	if u.Total != under || u.Outside != outside {
		t.Errorf("counted %+v under, %+v outside; want %+v, %+v", u.Total, u.Outside, under, outside)
	}
	if len(u.Groups) != len(groups) {
		t.Errorf("%d groups, want %d", len(u.Groups), len(groups))
	}
	for _, g := range u.Groups {
		if want := groups[g.Resource+"|"+g.Namespace+"|"+string(g.Scope)]; g.UsageCount != want {
			t.Errorf("%s, want %s", g, want)
		}
	}
	t.Logf("%d keys in %d pages", u.Total.Keys+u.Outside.Keys, u.Pages)
	if u.Pages < len(f.live)/16 {
		t.Errorf("%d keys in %d pages of at most 16", len(f.live), u.Pages)
	}
	if u.Groups[0].Resource != "events" || u.Groups[0].Keys != 2000 {
		t.Errorf("first group %s", u.Groups[0])
	}
}
