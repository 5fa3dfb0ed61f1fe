package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// Usage is what the keys in etcd weigh, grouped by resource and namespace,
// read page by page at one revision, with the members' database sizes
// beside it (Space) to tell what compaction and defragmentation can free
// from what only deleting the source frees.
type Usage struct {
	Prefix  string      `json:"prefix"`
	Cluster ClusterInfo `json:"cluster"`
	// Consistent is false when etcd compacted the revision being read while
	// the report read it: the rest was read at a newer one.
	Consistent bool `json:"consistent"`
	// Total is every key under the prefix; Outside every key outside it.
	Total   UsageCount `json:"total"`
	Outside UsageCount `json:"outside"`
	// Resources sums Groups by resource, largest first.
	Resources []ResourceUsage `json:"resources"`
	// Groups are the keys by resource and namespace (a cluster-scoped
	// resource is one group), odd keys by what could be read of them, keys
	// outside the prefix by their first segment; largest first.
	Groups []UsageGroup `json:"groups"`
	// Ungrouped counts the keys of groups past the first MaxGroups: in
	// Total, in no group.
	Ungrouped UsageCount `json:"ungrouped"`
	// Largest are the biggest keys (key + value bytes), largest first.
	Largest []KeyUsage `json:"largest"`
	// MostWritten are the keys written most often since their creation
	// (etcd's version), most first: a controller rewriting a status in a
	// loop shows here, though its history, not its live value, fills etcd.
	MostWritten []KeyUsage `json:"mostWritten"`
	Space       Space      `json:"space"`
	// Elapsed is how long the reading took, in Pages range requests.
	Elapsed time.Duration `json:"elapsedNanoseconds"`
	Pages   int           `json:"pages"`
}

// UsageCount is a number of keys and their bytes (key + value).
type UsageCount struct {
	Keys  int64 `json:"keys"`
	Bytes int64 `json:"bytes"`
}

func (c *UsageCount) add(bytes int64) { c.Keys++; c.Bytes += bytes }

// UsageGroup is the keys of one resource in one namespace (or of a
// cluster-scoped resource, or odd keys, or keys outside the prefix).
type UsageGroup struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Scope     Scope  `json:"scope"`
	UsageCount
	// Share is Bytes over the bytes of every key counted, in percent.
	Share float64 `json:"share"`
	// Examples are a few odd keys, to look at (only for ScopeOdd).
	Examples []string `json:"examples,omitempty"`
}

// String names the group the way a summary quotes it, safely for a
// terminal: "events in namespace flood: 41234 keys, 40.2 MiB".
func (g UsageGroup) String() string {
	return g.Label() + ": " + g.UsageCount.String()
}

// Label names the group alone: "events in namespace flood".
func (g UsageGroup) Label() string {
	r := termsafe.String(g.Resource)
	switch g.Scope {
	case ScopeNamespaced:
		return r + " in namespace " + termsafe.String(g.Namespace)
	case ScopeCluster:
		return r + " (cluster-scoped)"
	case ScopeOdd:
		return "odd keys under " + r
	}
	return "keys outside the prefix under " + r
}

func (c UsageCount) String() string {
	return plural(c.Keys, "key") + ", " + FormatBytes(c.Bytes)
}

// ResourceUsage is every group of one resource summed.
type ResourceUsage struct {
	Resource string `json:"resource"`
	Scope    Scope  `json:"scope"`
	UsageCount
	Namespaces int `json:"namespaces,omitempty"`
}

// KeyUsage is one key: its size and how often it was written.
type KeyUsage struct {
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"`
	// Version is how many times it was written since it was created.
	Version     int64 `json:"version"`
	ModRevision int64 `json:"modRevision"`
}

func (k KeyUsage) String() string {
	written := "written once"
	if k.Version > 1 {
		written = fmt.Sprintf("written %d times", k.Version)
	}
	return termsafe.String(k.Key) + ": " + FormatBytes(k.Bytes) + ", " + written
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Space relates the keys counted to the members' database files.
type Space struct {
	Members []MemberStatus `json:"members"`
	// Fullest is the member whose file is largest (the one a NOSPACE alarm
	// comes from first); DBSize, DBSizeInUse and Quota are its.
	Fullest     string `json:"fullest,omitempty"`
	DBSize      int64  `json:"dbSize"`
	DBSizeInUse int64  `json:"dbSizeInUse"`
	Quota       int64  `json:"quota,omitempty"`
	// Live is the bytes of every key counted (key + value, under the
	// prefix and outside it): what only deleting the source frees.
	Live int64 `json:"liveBytes"`
	// AfterDefrag estimates the file's size once compacted and
	// defragmented: the live keys as bbolt stores them (see
	// defragEstimate; within 2% on the databases measured). Only deleting
	// keys brings it lower.
	AfterDefrag int64 `json:"afterDefragBytes"`
	// History is DBSizeInUse - AfterDefrag (at least 0): older versions
	// of keys, freed inside the file by a compaction.
	History int64 `json:"historyBytes"`
	// Fragmented is DBSize - DBSizeInUse: free pages inside the file,
	// given back by defragmenting the member.
	Fragmented int64 `json:"fragmentedBytes"`
	// Reclaimable is DBSize - AfterDefrag (at least 0): about what
	// compaction then defragmentation of the fullest member free.
	Reclaimable int64 `json:"reclaimableBytes"`
}

// MaxGroups bounds the groups a report keeps, so that no keyspace, however
// strange, makes it hold more than that in memory.
const MaxGroups = 100_000

// UsageOptions tune Usage; the zero value is fine.
type UsageOptions struct {
	// PageBytes is about how many bytes one range request brings back
	// (default 1 MiB). Larger pages do not read faster (etcd spends the
	// time) and cost memory here and on the member.
	PageBytes int
	// Keep is how many keys Largest and MostWritten keep (default 10).
	Keep int
	// Visit, when set, also sees every key and value read (a
	// VersionTally's Add), so that one pass serves both.
	Visit func(key, value []byte)
}

// Usage reads every key (under the prefix, then outside it) page by page
// at one revision, keeps only counts per group and the few largest and
// most written keys, and drops each page's values as soon as they are
// weighed: memory stays a few pages whatever the size of the database
// (about 60 MiB of peak RSS for 1 GB in 640,000 keys).
// It reads only. The members' statuses are asked first; one that does not
// answer is named in Space.Members, not an error.
func (c *Client) Usage(ctx context.Context, opts UsageOptions) (*Usage, error) {
	start := time.Now()
	if opts.PageBytes <= 0 {
		opts.PageBytes = 1 << 20
	}
	if opts.Keep <= 0 {
		opts.Keep = 10
	}
	statuses, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	a := &usageAcc{prefix: c.prefix, groups: map[groupKey]*UsageGroup{}, largest: topKeys{n: opts.Keep}, written: topKeys{n: opts.Keep}}
	s := &scanner{c: c, pageBytes: opts.PageBytes, consistent: true}
	under := underPrefix(c.prefix)
	end := clientv3.GetPrefixRangeEnd(under)
	visit := a.add
	if opts.Visit != nil {
		visit = func(kv *mvccpb.KeyValue) { a.add(kv); opts.Visit(kv.Key, kv.Value) }
	}
	for _, r := range [][2]string{{under, end}, {"\x00", under}, {end, "\x00"}} {
		if err := s.scan(ctx, r[0], r[1], visit); err != nil {
			return nil, err
		}
	}
	u := a.finish()
	u.Cluster, u.Consistent, u.Pages = s.cluster, s.consistent, s.pages
	u.Space = space(statuses, u.Total.Bytes+u.Outside.Bytes, a.defrag.size())
	u.Elapsed = time.Since(start)
	return u, nil
}

// scanner reads ranges page by page at one revision.
type scanner struct {
	c          *Client
	pageBytes  int
	rev        int64 // 0 until the first page fixes it
	cluster    ClusterInfo
	consistent bool
	pages      int
}

// scan calls visit on every key in [from, end) ("\x00" as end: to the
// end of the keyspace), in key order.
//
// etcd counts every key left in a range at each page it serves (the
// response's Count), so paging through one big range costs etcd time
// quadratic in its keys: 150 s for 640,000 keys in 1 MiB pages. Each
// request here asks for a window instead: the keys sharing the start key's
// first level bytes, narrowed when etcd counts many more keys in it than a
// page holds and widened when it counts few, so that what etcd counts
// stays about what it returns.
func (s *scanner) scan(ctx context.Context, from, end string, visit func(*mvccpb.KeyValue)) error {
	limit := int64(minPage) // until pages tell the keys' sizes
	key, level := from, len(from)
	for {
		wend := windowEnd(key, level, end)
		opts := []clientv3.OpOption{clientv3.WithRange(wend), clientv3.WithLimit(limit)}
		if s.rev > 0 {
			opts = append(opts, clientv3.WithRev(s.rev))
		}
		resp, err := s.c.kv.Get(ctx, key, opts...)
		s.pages++
		if s.rev > 0 && errors.Is(err, rpctypes.ErrCompacted) {
			// Compacted under our feet (kube-apiserver does every 5 minutes):
			// go on at the newest revision, and say so.
			s.rev, s.consistent = 0, false
			continue
		}
		if err != nil {
			return s.c.wrap(err)
		}
		if s.rev == 0 {
			s.rev = resp.Header.Revision
			if s.cluster.Revision == 0 {
				s.cluster = clusterInfo(resp.Header)
			}
		}
		var bytes, biggest int64
		for _, kv := range resp.Kvs {
			visit(kv)
			size := int64(len(kv.Key) + len(kv.Value))
			bytes += size
			biggest = max(biggest, size)
		}
		switch n := len(resp.Kvs); {
		case resp.Count > 4*limit && n > 0:
			// Too wide: at least as narrow as the keys this page spanned.
			level = max(level+1, commonPrefixLen(string(resp.Kvs[0].Key), string(resp.Kvs[n-1].Key)))
		case resp.Count < limit/4 && level > 0:
			level--
		}
		if resp.More {
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		} else if wend == end {
			return nil
		} else {
			key = wend
		}
		if len(resp.Kvs) > 0 {
			limit = nextLimit(limit, int64(s.pageBytes), int64(len(resp.Kvs)), bytes, biggest)
		}
	}
}

// Bounds of a page, in keys.
const (
	minPage = 16
	maxPage = 2048
)

// nextLimit is how many keys to ask for next, after a page of n keys and
// bytes bytes, the biggest of them biggest bytes. etcd cannot bound a page
// in bytes, only in keys, so the limit follows the sizes seen: shrunk at
// once (big values make it small, so that a run of them costs a few
// pages' worth), grown at most twice a page (small values ahead of big ones
// inflate a page only so much), between 16 and 2048 keys. A page can still
// exceed pageBytes where values grow from one page to the next; at worst
// 2048 of etcd's largest values (1.5 MiB by default).
func nextLimit(limit, pageBytes, n, bytes, biggest int64) int64 {
	next := min(pageBytes*n/max(bytes, 1), 4*pageBytes/max(biggest, 1), 2*limit)
	return min(max(next, minPage), maxPage)
}

// windowEnd is the end of the range of keys that share key's first level
// bytes, or end if that comes first ("\x00" as end: no end).
func windowEnd(key string, level int, end string) string {
	w := clientv3.GetPrefixRangeEnd(key[:min(level, len(key))])
	if w == "\x00" || end != "\x00" && w > end {
		return end
	}
	return w
}

func commonPrefixLen(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

type groupKey struct {
	resource, namespace string
	scope               Scope
}

// usageAcc accumulates keys into groups.
type usageAcc struct {
	prefix           string
	total, outside   UsageCount
	ungrouped        UsageCount
	groups           map[groupKey]*UsageGroup
	largest, written topKeys
	defrag           defragEstimate
}

// maxExamples is how many odd keys a group names.
const maxExamples = 3

func (a *usageAcc) add(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	size := int64(len(kv.Key) + len(kv.Value))
	a.defrag.add(kv)
	p := ParseKey(a.prefix, key)
	if p.Scope == ScopeOutside {
		a.outside.add(size)
	} else {
		a.total.add(size)
	}
	if g := a.group(groupKey{p.Resource, p.Namespace, p.Scope}); g != nil {
		g.add(size)
		if p.Scope == ScopeOdd && len(g.Examples) < maxExamples {
			g.Examples = append(g.Examples, key)
		}
	} else {
		a.ungrouped.add(size)
	}
	k := KeyUsage{Key: key, Bytes: size, Version: kv.Version, ModRevision: kv.ModRevision}
	a.largest.offer(k, func(x, y KeyUsage) bool { return x.Bytes > y.Bytes || x.Bytes == y.Bytes && x.Key < y.Key })
	if kv.Version > 1 {
		a.written.offer(k, func(x, y KeyUsage) bool { return x.Version > y.Version || x.Version == y.Version && x.Key < y.Key })
	}
}

// group is gk's group, made on first use; nil past MaxGroups groups.
func (a *usageAcc) group(gk groupKey) *UsageGroup {
	g := a.groups[gk]
	if g == nil && len(a.groups) < MaxGroups {
		g = &UsageGroup{Resource: gk.resource, Namespace: gk.namespace, Scope: gk.scope}
		a.groups[gk] = g
	}
	return g
}

func (a *usageAcc) finish() *Usage {
	u := &Usage{Prefix: a.prefix, Total: a.total, Outside: a.outside, Ungrouped: a.ungrouped,
		Groups: make([]UsageGroup, 0, len(a.groups)), Largest: a.largest.keys, MostWritten: a.written.keys}
	if u.Largest == nil {
		u.Largest = []KeyUsage{}
	}
	if u.MostWritten == nil {
		u.MostWritten = []KeyUsage{}
	}
	all := a.total.Bytes + a.outside.Bytes
	type rk struct {
		r string
		s Scope
	}
	byRes := map[rk]*ResourceUsage{}
	for _, g := range a.groups {
		if all > 0 {
			g.Share = float64(g.Bytes) * 100 / float64(all)
		}
		u.Groups = append(u.Groups, *g)
		r := byRes[rk{g.Resource, g.Scope}]
		if r == nil {
			r = &ResourceUsage{Resource: g.Resource, Scope: g.Scope}
			byRes[rk{g.Resource, g.Scope}] = r
		}
		r.Keys += g.Keys
		r.Bytes += g.Bytes
		if g.Scope == ScopeNamespaced {
			r.Namespaces++
		}
	}
	// Largest first; ties in a fixed order, so that reports compare.
	slices.SortFunc(u.Groups, func(x, y UsageGroup) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Resource, y.Resource), cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Scope, y.Scope))
	})
	u.Resources = make([]ResourceUsage, 0, len(byRes))
	for _, r := range byRes {
		u.Resources = append(u.Resources, *r)
	}
	slices.SortFunc(u.Resources, func(x, y ResourceUsage) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Resource, y.Resource), cmp.Compare(x.Scope, y.Scope))
	})
	return u
}

// topKeys keeps the n first keys in the order of less.
type topKeys struct {
	n    int
	keys []KeyUsage
}

func (t *topKeys) offer(k KeyUsage, less func(a, b KeyUsage) bool) {
	if len(t.keys) == t.n && !less(k, t.keys[t.n-1]) {
		return
	}
	i := sort.Search(len(t.keys), func(i int) bool { return less(k, t.keys[i]) })
	if len(t.keys) < t.n {
		t.keys = append(t.keys, KeyUsage{})
	}
	copy(t.keys[i+1:], t.keys[i:])
	t.keys[i] = k
}

// space relates the members' files to the live bytes counted.
func space(members []MemberStatus, live, after int64) Space {
	s := Space{Members: members, Live: live, AfterDefrag: after}
	for _, m := range members {
		if m.Error == "" && (s.Fullest == "" || m.DBSize > s.DBSize) {
			s.Fullest, s.DBSize, s.DBSizeInUse, s.Quota = m.Endpoint, m.DBSize, m.DBSizeInUse, m.Quota
		}
	}
	if s.Fullest == "" {
		return s
	}
	s.Fragmented = max(s.DBSize-s.DBSizeInUse, 0)
	s.History = max(s.DBSizeInUse-after, 0)
	s.Reclaimable = max(s.DBSize-after, 0)
	return s
}

// defragEstimate estimates a member's database file once compacted and
// defragmented: etcd then copies the newest version of every live key into
// a new file, one element per key (its 17-byte revision, then the
// marshalled mvccpb.KeyValue) in leaf pages bbolt fills to 90% (at least
// two elements to a page; a bigger one spills onto the next pages), under
// branch pages. It assumes 4 KiB pages (Linux on amd64 and most arm64).
type defragEstimate struct {
	leafPages, node int64
	elements        int
}

const (
	boltPage        = 4096
	boltFill        = boltPage * 9 / 10
	boltPageHeader  = 16
	boltElement     = 16 // a leaf or branch element's header
	etcdRevisionKey = 17
	// boltFixedPages are the meta, freelist and root pages and etcd's
	// other buckets (members, leases, auth, meta), about; measured on
	// embedded etcd 3.6 with few leases.
	boltFixedPages = 16
)

func (d *defragEstimate) add(kv *mvccpb.KeyValue) {
	el := int64(boltElement + etcdRevisionKey + kv.Size())
	if d.elements >= 2 && d.node+el > boltFill {
		d.closeNode()
	}
	if d.elements == 0 {
		d.node = boltPageHeader
	}
	d.node += el
	d.elements++
}

func (d *defragEstimate) closeNode() {
	if d.elements > 0 {
		d.leafPages += (d.node + boltPage - 1) / boltPage
	}
	d.node, d.elements = 0, 0
}

// size is the file's estimated size in bytes.
func (d *defragEstimate) size() int64 {
	d.closeNode()
	perBranch := int64(boltFill / (boltElement + etcdRevisionKey))
	branchPages := (d.leafPages + perBranch - 1) / perBranch
	return (d.leafPages + branchPages + boltFixedPages) * boltPage
}

// Top is the n largest groups ("events in namespace flood: ..." with String).
func (u *Usage) Top(n int) []UsageGroup {
	return u.Groups[:min(n, len(u.Groups))]
}

// FormatBytes is n in binary units, as etcd and Kubernetes quotas are
// written: 512 B, 1.5 KiB, 40.2 MiB, 2.0 GiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for ; (f >= unit || f <= -unit) && i < 4; i++ {
		f /= unit
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i])
}
