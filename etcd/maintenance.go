package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MemberStatus is one endpoint's answer to etcd's Status call: how big its
// database is, how much of it is in use, and where it stands in raft. Each
// member keeps its own database file, so sizes differ between members and a
// defragmentation shrinks only the member it runs on.
type MemberStatus struct {
	Endpoint string `json:"endpoint"`
	MemberID ID     `json:"memberID,omitempty"`
	Leader   ID     `json:"leader,omitempty"`
	IsLeader bool   `json:"isLeader"`
	Learner  bool   `json:"learner,omitempty"`
	Version  string `json:"version,omitempty"`
	// DBSize is the database file's size: what etcd compares with its quota.
	DBSize int64 `json:"dbSize"`
	// DBSizeInUse is the part of the file holding data (live keys and the
	// history not yet compacted); the rest is free pages that only a
	// defragmentation gives back.
	DBSizeInUse int64 `json:"dbSizeInUse"`
	// Quota is --quota-backend-bytes as etcd 3.6 reports it (its default,
	// 2 GiB, when unset); 0 when the member does not say (etcd 3.5).
	Quota            int64  `json:"quota,omitempty"`
	Revision         int64  `json:"revision"`
	RaftIndex        uint64 `json:"raftIndex"`
	RaftAppliedIndex uint64 `json:"raftAppliedIndex"`
	RaftTerm         uint64 `json:"raftTerm"`
	// Errors are the member's own complaints, alarms among them ("alarm:NOSPACE").
	Errors []string `json:"errors,omitempty"`
	// Error says why this endpoint could not be asked; the other fields are then empty.
	Error string `json:"error,omitempty"`
}

// Full reports whether the member's file is at its quota or within
// fullMargin of it: etcd refuses a write when the file plus the write would
// reach the quota, so such a member raises NOSPACE again at the next big
// write, until it is defragmented.
func (m MemberStatus) Full() bool { return FullAt(m.DBSize, m.Quota) }

// FullAt tells whether a database file of size bytes is full under quota
// (0: unknown, never full): too close to it to take a write.
func FullAt(size, quota int64) bool { return quota > 0 && size+fullMargin > quota }

// fullMargin is etcd's default --max-request-bytes (1.5 MiB) and some.
const fullMargin = 2 << 20

// Status asks every configured endpoint for its status, in the order of
// the endpoints. An endpoint that does not answer has its Error set; the
// error returned is an *UnreachableError only when none answered.
func (c *Client) Status(ctx context.Context) ([]MemberStatus, error) {
	out := make([]MemberStatus, len(c.endpoints))
	done := make(chan int, len(c.endpoints))
	for i, ep := range c.endpoints {
		go func() {
			out[i] = c.status(ctx, ep)
			done <- i
		}()
	}
	var errs []error
	for range c.endpoints {
		i := <-done
		if out[i].Error != "" {
			errs = append(errs, fmt.Errorf("%s: %s", out[i].Endpoint, out[i].Error))
		}
	}
	if len(errs) == len(c.endpoints) {
		return out, &UnreachableError{Endpoints: c.Endpoints(), Err: errors.Join(errs...)}
	}
	return out, nil
}

// StatusOf reads the status of the member at endpoint, which need not be
// one of the client's (a member the member list names); Error says why it
// could not be read, at once when nothing listens there.
func (c *Client) StatusOf(ctx context.Context, endpoint string) MemberStatus {
	return c.status(ctx, endpoint)
}

func (c *Client) status(ctx context.Context, ep string) MemberStatus {
	m := MemberStatus{Endpoint: ep}
	// A member that does not listen (its etcd stopped, its node rebooting)
	// is said so at once: the gRPC call would retry until its deadline.
	if err := anyListening(ctx, []string{ep}, c.dialTimeout); err != nil {
		m.Error = (&UnreachableError{Endpoints: []string{ep}, Err: err}).Error()
		return m
	}
	r, err := c.kv.Status(ctx, ep)
	if err != nil {
		m.Error = c.wrap(err).Error()
		return m
	}
	m.Version, m.DBSize, m.DBSizeInUse, m.Quota = r.Version, r.DbSize, r.DbSizeInUse, r.DbSizeQuota
	m.Leader, m.Learner, m.Errors = ID(r.Leader), r.IsLearner, r.Errors
	m.RaftIndex, m.RaftAppliedIndex, m.RaftTerm = r.RaftIndex, r.RaftAppliedIndex, r.RaftTerm
	if r.Header != nil {
		m.MemberID, m.Revision = ID(r.Header.MemberId), r.Header.Revision
	}
	m.IsLeader = m.MemberID != 0 && m.MemberID == m.Leader
	return m
}

// The alarms etcd raises.
const (
	AlarmNoSpace = "NOSPACE" // a member's database reached its quota: writes refused
	AlarmCorrupt = "CORRUPT" // members disagree on their data: never disarm without finding out why
)

// Alarm is one raised alarm: which member, which kind (AlarmNoSpace, AlarmCorrupt).
type Alarm struct {
	MemberID ID     `json:"memberID"`
	Type     string `json:"type"`
}

func (a Alarm) String() string { return a.Type + " on member " + a.MemberID.String() }

// Alarms lists the cluster's raised alarms, sorted by member then type.
func (c *Client) Alarms(ctx context.Context) ([]Alarm, error) {
	resp, err := c.kv.AlarmList(ctx)
	if err != nil {
		return nil, c.wrap(err)
	}
	return alarms(resp.Alarms), nil
}

func alarms(in []*etcdserverpb.AlarmMember) []Alarm {
	out := make([]Alarm, 0, len(in))
	for _, a := range in {
		out = append(out, Alarm{MemberID: ID(a.MemberID), Type: a.Alarm.String()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MemberID != out[j].MemberID {
			return out[i].MemberID < out[j].MemberID
		}
		return out[i].Type < out[j].Type
	})
	return out
}

// CompactResult says what a compaction did, or in a dry run would do.
type CompactResult struct {
	DryRun bool `json:"dryRun"`
	// Revision is the revision compacted to: every older version of every
	// key is dropped from the history, the newest of each live key kept.
	Revision int64 `json:"revision"`
	// AlreadyCompacted is true when etcd's history was already compacted
	// at or past Revision: nothing to do.
	AlreadyCompacted bool `json:"alreadyCompacted,omitempty"`
}

func (r *CompactResult) String() string {
	switch {
	case r.AlreadyCompacted:
		return fmt.Sprintf("history already compacted at or past revision %d: nothing to do", r.Revision)
	case r.DryRun:
		return fmt.Sprintf("would compact etcd's history up to revision %d (older versions of every key dropped, the newest kept)", r.Revision)
	}
	return fmt.Sprintf("compacted etcd's history up to revision %d", r.Revision)
}

// Compact drops etcd's history older than rev (0 or less: the current
// revision, read now), physically: it returns once every member's backend
// has removed it. The space is free inside the database file then, but the
// file shrinks only when each member is defragmented. Watchers behind rev
// (kube-apiserver's) get "compacted" and re-list; kube-apiserver compacts
// this way itself every 5 minutes. History already compacted past rev is
// not an error (AlreadyCompacted). A nil w changes nothing.
func (c *Client) Compact(ctx context.Context, rev int64, w Writer) (*CompactResult, error) {
	if w == nil {
		w = DryRunWriter(c)
	}
	if rev <= 0 {
		info, err := c.Cluster(ctx)
		if err != nil {
			return nil, err
		}
		rev = info.Revision
	}
	res := &CompactResult{DryRun: w.DryRun(), Revision: rev}
	err := w.Compact(ctx, rev)
	if errors.Is(err, rpctypes.ErrCompacted) {
		res.AlreadyCompacted = true
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// DisarmResult says which NOSPACE alarms were (or in a dry run would be)
// disarmed, and which alarms remain.
type DisarmResult struct {
	DryRun   bool    `json:"dryRun"`
	Disarmed []Alarm `json:"disarmed"`
	// Remaining are the alarms still raised after it (a CORRUPT alarm is
	// never disarmed here); in a dry run, those that would remain.
	Remaining []Alarm `json:"remaining"`
	// Unchecked are the members disarmed whose database size could not be
	// checked against their quota (not among the endpoints, or not
	// answering): if still full, they raise the alarm again at the next write.
	Unchecked []ID `json:"unchecked,omitempty"`
}

func (r *DisarmResult) String() string {
	var b strings.Builder
	switch {
	case len(r.Disarmed) == 0:
		b.WriteString("no NOSPACE alarm raised: nothing to disarm")
	case r.DryRun:
		fmt.Fprintf(&b, "would disarm %s", alarmList(r.Disarmed))
	default:
		fmt.Fprintf(&b, "disarmed %s", alarmList(r.Disarmed))
	}
	if len(r.Remaining) > 0 {
		fmt.Fprintf(&b, "; still raised: %s", alarmList(r.Remaining))
	}
	for _, id := range r.Unchecked {
		fmt.Fprintf(&b, "; the size of member %s was not checked (not among the endpoints, or not answering)", id)
	}
	return b.String()
}

func alarmList(as []Alarm) string { return AlarmsText(as) }

// AlarmsText says alarms the short way: "NOSPACE on members A, B".
func AlarmsText(as []Alarm) string {
	var types []string
	members := map[string][]string{}
	for _, a := range as {
		if _, ok := members[a.Type]; !ok {
			types = append(types, a.Type)
		}
		members[a.Type] = append(members[a.Type], a.MemberID.String())
	}
	var out []string
	for _, t := range types {
		word := "member"
		if len(members[t]) > 1 {
			word = "members"
		}
		out = append(out, fmt.Sprintf("%s on %s %s", t, word, strings.Join(members[t], ", ")))
	}
	return strings.Join(out, "; ")
}

// DisarmNoSpace disarms every member's NOSPACE alarm, and only that: a
// CORRUPT alarm stays (Remaining). It refuses, with a *StillFullError and
// nothing disarmed, while a member that reports its quota has a database
// file at it or within 2 MiB (Full): etcd would raise the alarm again at the next write
// (compact, then defragment that member first). A dry run evaluates the
// same guard and disarms nothing. A nil w changes nothing.
func (c *Client) DisarmNoSpace(ctx context.Context, w Writer) (*DisarmResult, error) {
	if w == nil {
		w = DryRunWriter(c)
	}
	raised, err := c.Alarms(ctx)
	if err != nil {
		return nil, err
	}
	res := &DisarmResult{DryRun: w.DryRun(), Disarmed: []Alarm{}, Remaining: []Alarm{}}
	for _, a := range raised {
		if a.Type == AlarmNoSpace {
			res.Disarmed = append(res.Disarmed, a)
		} else {
			res.Remaining = append(res.Remaining, a)
		}
	}
	if len(res.Disarmed) == 0 {
		return res, nil
	}
	statuses, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	var full []MemberStatus
	checked := map[ID]bool{}
	for _, m := range statuses {
		if m.Full() {
			full = append(full, m)
		}
		checked[m.MemberID] = m.Error == "" && m.Quota > 0
	}
	if len(full) > 0 {
		return nil, &StillFullError{Members: full}
	}
	for _, a := range res.Disarmed {
		if !checked[a.MemberID] && !slices.Contains(res.Unchecked, a.MemberID) {
			res.Unchecked = append(res.Unchecked, a.MemberID)
		}
	}
	for i, a := range res.Disarmed {
		if err := w.DisarmAlarm(ctx, a); err != nil {
			res.Disarmed = res.Disarmed[:i]
			return res, err
		}
	}
	return res, nil
}

// probePrefix is where the write probe puts its key: breakglass's own
// part of the keyspace, beside the cluster lock, outside kube-apiserver's.
const probePrefix = "/breakglass/probe/"

// probeTTL bounds how long a probe key can outlive a run that died
// between its put and its delete: the key is on a lease of this TTL.
const probeTTL = 60 * time.Second

// ProbeResult says what the write probe did, or in a dry run would do.
type ProbeResult struct {
	DryRun bool   `json:"dryRun"`
	Key    string `json:"key"`
	// PutRevision is the revision of the put, DeleteRevision of the delete (0 in a dry run).
	PutRevision    int64 `json:"putRevision,omitempty"`
	DeleteRevision int64 `json:"deleteRevision,omitempty"`
}

func (r *ProbeResult) String() string {
	if r.DryRun {
		return fmt.Sprintf("would write %s (only if absent, on a %s lease) and delete it (only if unchanged)", r.Key, probeTTL)
	}
	return fmt.Sprintf("etcd accepts writes: put %s at revision %d, deleted at revision %d", r.Key, r.PutRevision, r.DeleteRevision)
}

// ProbeWrite proves etcd accepts writes: it puts a fresh key under
// /breakglass/probe/ (only if absent), then deletes it (only if still the
// value it put). It touches no other key: the key is made here, never
// taken from input, and both transactions are guarded on it. The key is
// on a 60 s lease, so a run that dies in between leaves nothing for long,
// nor does a put refused with NOSPACE that etcd applied all the same (the
// one that crosses the quota). A NOSPACE refusal is a *NoSpaceError. A dry run checks the put's guard
// and writes nothing; a nil w changes nothing.
func (c *Client) ProbeWrite(ctx context.Context, w Writer) (*ProbeResult, error) {
	if w == nil {
		w = DryRunWriter(c)
	}
	if strings.HasPrefix(probePrefix, c.prefix+"/") {
		return nil, &ConfigError{Reason: "the write probe's keys (" + probePrefix + ") would fall under the etcd prefix " + c.prefix}
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	key := probePrefix + strconv.FormatInt(time.Now().UTC().UnixNano(), 10) + "-" + hex.EncodeToString(nonce[:])
	res := &ProbeResult{DryRun: w.DryRun(), Key: key}
	lease, err := w.GrantLease(ctx, probeTTL)
	if err != nil {
		return res, fmt.Errorf("write probe: %w", err)
	}
	put, err := w.Txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, "breakglass write probe", clientv3.WithLease(lease))}, nil)
	if err != nil {
		return res, fmt.Errorf("write probe: %w", err)
	}
	if !put.Succeeded {
		return res, fmt.Errorf("write probe: %s exists already: nothing written", key)
	}
	if res.DryRun {
		return res, nil
	}
	res.PutRevision = put.Header.Revision
	del, err := w.Txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", res.PutRevision)},
		[]clientv3.Op{clientv3.OpDelete(key)}, nil)
	if err != nil {
		return res, fmt.Errorf("write probe: put %s but could not delete it (its lease removes it within %s): %w", key, probeTTL, err)
	}
	if !del.Succeeded {
		return res, fmt.Errorf("write probe: %s changed after its put: left alone (its lease removes it within %s)", key, probeTTL)
	}
	res.DeleteRevision = del.Header.Revision
	return res, nil
}

// IsNoSpace reports whether err is etcd's refusal of a write for lack of
// space, whether it came from this package, the etcd client, or as text
// relayed by another API (the Talos API, kube-apiserver's log).
func IsNoSpace(err error) bool {
	if err == nil {
		return false
	}
	var ns *NoSpaceError
	return errors.As(err, &ns) || errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) ||
		strings.Contains(err.Error(), noSpaceText)
}

// IsNoQuorum tells whether err is etcd refusing a write it cannot commit:
// no leader, or no answer from a quorum in time (a cluster that lost its
// quorum, or a write that timed out waiting for one).
func IsNoQuorum(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{rpctypes.ErrNoLeader, rpctypes.ErrGRPCNoLeader, rpctypes.ErrTimeout, rpctypes.ErrGRPCTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrGRPCTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrGRPCTimeoutDueToConnectionLost, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return strings.Contains(err.Error(), "etcdserver: no leader") || strings.Contains(err.Error(), "etcdserver: request timed out")
}

// noSpaceText is how etcd words the refusal (rpctypes.ErrNoSpace).
const noSpaceText = "mvcc: database space exceeded"

// ListedMember is a member as etcd lists it.
type ListedMember struct {
	ID         ID
	Name       string
	ClientURLs []string
	Learner    bool
}

// MembersSerializable lists the members as the member reached knows them,
// without asking a leader: it answers without quorum, where machined's
// member list (and a linearizable one) waits for a leader.
func (c *Client) MembersSerializable(ctx context.Context) ([]ListedMember, error) {
	resp, err := c.kv.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return nil, err
	}
	out := make([]ListedMember, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, ListedMember{ID: ID(m.ID), Name: m.Name, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	return out, nil
}
