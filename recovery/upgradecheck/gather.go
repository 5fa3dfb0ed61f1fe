package upgradecheck

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/audit"
	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/startupwrites"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// facts are what was read of one cluster; the checks judge them (judge.go)
// and nothing else, so that every verdict can be tested on facts alone.
type facts struct {
	cluster string
	// talosErr: the talosconfig context could not be used at all.
	talosErr error
	role     string
	nodes    []*nodeFacts
	from, to int // minors; from 0: not told
	// fromEvidence says where from came from: the control planes'
	// images (imagesFrom, their lowest minor), else --from.
	fromEvidence string
	imagesFrom   int
	// fromGiven is --from's minor (0: not given), as given in fromGivenText.
	fromGiven     int
	fromGivenText string
	recorded      *startupwrites.Recording // the pair's recording, nil when modelled

	etcdErr    error // etcd not reached directly
	members    []*memberFacts
	membersErr error
	alarms     []etcd.Alarm
	alarmsErr  error
	alarmsFrom string
	usage      *etcd.Usage
	usageErr   error
	versions   *etcd.StoredVersions
	kubeNodes  []etcd.NodeInfo

	gathered  *audit.Gathered
	gatherErr error
	// staticFiles are the static admission manifests read from the
	// machine configs (NODE:PATH); staticUnseen the staticManifestsDir
	// values whose files the machine configs do not hold.
	staticFiles, staticUnseen []string
	admission                 *audit.Report
	auditErr                  error
	args                      []audit.ArgFinding
	argsErr                   error

	snapshot *snapshotFacts
	replay   *replayFacts
	// timedOut: Options.Timeout ran out before everything was read.
	timedOut bool
}

// nodeFacts are one node's answers through the Talos API.
type nodeFacts struct {
	Addr     string
	Talos    string // its Talos version, "v1.13.8"
	TalosErr error
	// What its machine config says (os:admin); ConfigErr when it could not be read.
	ConfigErr    error
	ControlPlane bool
	Image        string // cluster.apiServer.image
	Minor        int    // the image's minor, 0 without a tag
	Config       []byte
	EtcdCA       bool  // cluster.etcd.ca present
	EtcdQuota    int64 // cluster.etcd.extraArgs quota-backend-bytes, 0 unset
}

// memberFacts are one etcd member and its status.
type memberFacts struct {
	ID         etcd.ID
	Name       string
	ClientURLs []string
	Learner    bool
	Node       string // the control plane whose Talos API answered for it
	Status     *etcd.MemberStatus
	StatusErr  string
}

// event tells the live line what is being read.
func (o *Options) event(cluster, what string) {
	if o.Events != nil {
		o.Events(Event{Cluster: cluster, Message: what})
	}
}

// conns are the connections gather made, kept for what is read after it
// (the rollback point); closed by Run.
type conns struct {
	talos *talos.Client
	etcd  *etcd.Client
}

func (c *conns) close() {
	if c.etcd != nil {
		c.etcd.Close()
	}
	if c.talos != nil {
		c.talos.Close()
	}
}

// gather reads the cluster: the nodes, etcd, the admission objects and
// flags; it stops early only when nothing else can be read.
func gather(ctx context.Context, o *Options) (*facts, *conns) {
	f := &facts{cluster: o.Talos.Context}
	to, _ := minorNumber(o.To)
	f.to = to
	o.event(f.cluster, "connecting to the Talos API")
	cs := &conns{}
	tc, err := talos.Connect(ctx, o.Talos)
	if err != nil {
		f.talosErr = err
		return f, cs
	}
	cs.talos = tc
	f.role = tc.Role()
	if f.cluster == "" {
		f.cluster = tc.ContextName()
	}
	f.nodes = readNodes(ctx, tc)
	var cps []string
	var configs []audit.NodeConfig
	for _, n := range f.nodes {
		if n.ControlPlane {
			cps = append(cps, n.Addr)
			configs = append(configs, audit.NodeConfig{Node: n.Addr, Image: n.Image, Data: n.Config})
		}
	}
	f.setFrom(o.From)
	if len(cps) == 0 {
		return f, cs
	}
	cpc := tc.WithNodes(cps)

	o.event(f.cluster, "reading etcd")
	ec, err := recovery.ConnectEtcd(ctx, cpc, o.Etcd)
	if err != nil {
		f.etcdErr = err
	} else {
		cs.etcd = ec
	}
	f.readMembers(ctx, cpc, cps, ec)
	f.readAlarms(ctx, cpc, cps, ec)
	if ec != nil {
		o.event(f.cluster, "reading every key of etcd (sizes, stored versions, nodes)")
		tally := etcd.NewVersionTally(ec.Prefix())
		nodesKey := strings.TrimSuffix(ec.Prefix(), "/") + "/" + etcd.NodesResource + "/"
		f.usage, f.usageErr = ec.Usage(ctx, etcd.UsageOptions{Visit: func(k, v []byte) {
			tally.Add(k, v)
			if strings.HasPrefix(string(k), nodesKey) {
				if n, ok := etcd.ReadNode(v); ok {
					f.kubeNodes = append(f.kubeNodes, n)
				}
			}
		}})
		if f.usageErr == nil {
			f.versions = tally.Result()
		}
		o.event(f.cluster, "auditing admission objects and kube-apiserver flags")
		f.readAudit(ctx, ec, configs)
	}
	return f, cs
}

// callTimeout bounds each call to a node or an etcd member: one that
// stalls (a member down behind a node that still answers) is said, and
// costs the check no more than this.
const callTimeout = 15 * time.Second

// readNodes asks every node for its Talos version, then its machine config.
func readNodes(ctx context.Context, tc *talos.Client) []*nodeFacts {
	nodes := tc.Nodes()
	out := make([]*nodeFacts, len(nodes))
	var wg sync.WaitGroup
	for i, addr := range nodes {
		out[i] = &nodeFacts{Addr: addr}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := out[i]
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			if n.Talos, n.TalosErr = tc.Version(cctx, addr); n.TalosErr != nil {
				return
			}
			mc, facts, err := tc.ReadConfigFacts(cctx, addr)
			if err != nil {
				n.ConfigErr = err
				return
			}
			n.Config, n.ControlPlane, n.Image, n.EtcdCA = mc.Bytes, facts.IsControlPlane(), facts.APIServerImage, len(facts.EtcdCACert) > 0
			n.Minor, _ = minorNumber(imageTag(facts.APIServerImage))
			n.EtcdQuota = etcdQuota(mc.Bytes)
		}()
	}
	wg.Wait()
	return out
}

// setFrom decides the version upgraded from: the lowest minor the control
// planes' kube-apiserver images name (as talosctl upgrade-k8s detects
// it), or --from where no image has a tag. --from that contradicts the
// images is judged by the upgrade path.
func (f *facts) setFrom(given string) {
	var imgs []string
	for _, n := range f.nodes {
		if !n.ControlPlane || n.Minor == 0 {
			continue
		}
		if f.imagesFrom == 0 || n.Minor < f.imagesFrom {
			f.imagesFrom = n.Minor
		}
		imgs = append(imgs, n.Addr+" "+imageTag(n.Image))
	}
	if f.imagesFrom != 0 {
		f.fromEvidence = "the lowest kube-apiserver image of the control planes (" + strings.Join(imgs, ", ") + ")"
	}
	f.from = f.imagesFrom
	if given != "" {
		f.fromGiven, _ = minorNumber(given)
		f.fromGivenText = given
		if f.from == 0 {
			f.from, f.fromEvidence = f.fromGiven, "--from "+given
		}
	}
	if f.from != 0 && f.to != 0 {
		f.recorded, _ = startupwrites.For(f.from, f.to)
	}
}

// readMembers lists the members (through the Talos API of a control
// plane, as talosctl etcd members) and reads each one's status: through
// the Talos API of the node it runs on, etcd's own status when etcd is
// reached (quota and revision), and straight at its client URL for a
// member none of the nodes runs.
func (f *facts) readMembers(ctx context.Context, tc *talos.Client, cps []string, ec *etcd.Client) {
	var list []talos.EtcdMember
	var errs []error
	for _, cp := range cps {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		l, err := tc.EtcdMembers(cctx, cp)
		cancel()
		if err == nil {
			list = l
			break
		}
		errs = append(errs, err)
	}
	if list == nil {
		f.membersErr = errors.Join(errs...)
		return
	}
	for _, m := range list {
		f.members = append(f.members, &memberFacts{ID: etcd.ID(m.ID), Name: m.Hostname, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	// Each member's status two ways at once, merged after: through the
	// Talos API of the node it runs on, and from etcd itself (the quota and
	// revision the Talos API does not carry, and the members no node of the
	// talosconfig runs). A member that stalls costs callTimeout, once.
	viaTalos := make(map[etcd.ID]*etcd.MemberStatus)
	talosNode := make(map[etcd.ID]string)
	direct := make(map[etcd.ID]*etcd.MemberStatus)
	directErr := make(map[etcd.ID]string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, cp := range cps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			st, err := tc.EtcdStatus(cctx, cp)
			if err != nil {
				return // said by the member's own status below, or by its absence
			}
			mu.Lock()
			defer mu.Unlock()
			id := etcd.ID(st.MemberID)
			talosNode[id] = cp
			viaTalos[id] = &etcd.MemberStatus{Endpoint: "Talos API of " + cp, MemberID: id, Leader: etcd.ID(st.Leader),
				IsLeader: st.IsLeader(), Learner: st.IsLearner, Version: st.ProtocolVersion, DBSize: st.DBSize, DBSizeInUse: st.DBSizeInUse,
				RaftIndex: st.RaftIndex, RaftAppliedIndex: st.RaftAppliedIndex, RaftTerm: st.RaftTerm, Errors: st.Errors}
		}()
	}
	for _, m := range f.members {
		if ec == nil || len(m.ClientURLs) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			r, err := ec.KV().Status(sctx, m.ClientURLs[0])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				directErr[m.ID] = fmt.Sprintf("%s did not answer: %v", m.ClientURLs[0], err)
				return
			}
			st := &etcd.MemberStatus{Endpoint: m.ClientURLs[0], MemberID: m.ID, Leader: etcd.ID(r.Leader), IsLeader: r.Header != nil && r.Header.MemberId == r.Leader,
				Learner: r.IsLearner, Version: r.Version, DBSize: r.DbSize, DBSizeInUse: r.DbSizeInUse, Errors: r.Errors, Quota: r.DbSizeQuota,
				RaftIndex: r.RaftIndex, RaftAppliedIndex: r.RaftAppliedIndex, RaftTerm: r.RaftTerm}
			if r.Header != nil {
				st.Revision = r.Header.Revision
			}
			direct[m.ID] = st
		}()
	}
	wg.Wait()
	for _, m := range f.members {
		t, d := viaTalos[m.ID], direct[m.ID]
		m.Node = talosNode[m.ID]
		switch {
		case t != nil:
			m.Status = t
			if d != nil {
				m.Status.Quota, m.Status.Revision = d.Quota, d.Revision
			}
		case d != nil:
			m.Status = d
		case ec == nil:
			m.StatusErr = "its node's Talos API did not answer for it, and etcd was not reached directly"
		case len(m.ClientURLs) == 0:
			m.StatusErr = "it has no client URL (a learner still joining?)"
		default:
			m.StatusErr = directErr[m.ID]
		}
	}
}

// readAlarms lists the cluster's alarms: from etcd, else through the
// Talos API of a control plane.
func (f *facts) readAlarms(ctx context.Context, tc *talos.Client, cps []string, ec *etcd.Client) {
	if ec != nil {
		if f.alarms, f.alarmsErr = ec.Alarms(ctx); f.alarmsErr == nil {
			f.alarmsFrom = "etcd"
			return
		}
	}
	for _, cp := range cps {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		as, err := tc.EtcdAlarms(cctx, cp)
		cancel()
		if err != nil {
			f.alarmsErr = err
			continue
		}
		f.alarms, f.alarmsErr, f.alarmsFrom = nil, nil, "the Talos API of "+cp
		for _, a := range as {
			if a.Type != "NONE" {
				f.alarms = append(f.alarms, etcd.Alarm{MemberID: etcd.ID(a.MemberID), Type: a.Type})
			}
		}
		return
	}
}

// readAudit audits the admission objects in etcd against the target's
// start-up writes, and the control planes' extraArgs against its binary.
func (f *facts) readAudit(ctx context.Context, ec *etcd.Client, configs []audit.NodeConfig) {
	g, err := audit.Gather(ctx, audit.Inputs{FromEtcd: true, Nodes: len(configs) > 0}, recovery.AuditReadersOpen(ec, configs))
	if err != nil {
		f.gatherErr = err
		return
	}
	f.gathered = g
	var ms []staticManifests
	for _, c := range configs {
		ms = append(ms, readStaticManifests(c.Node, c.Data))
	}
	static, unseen, err := staticConfigurations(ms)
	if err != nil {
		f.gatherErr = err
		return
	}
	f.staticUnseen = unseen
	for _, m := range ms {
		for _, sf := range m.Files {
			f.staticFiles = append(f.staticFiles, m.Node+":"+sf.Path)
		}
	}
	g.Configurations = append(g.Configurations, static...)
	if f.from == 0 || f.to == 0 {
		return // the upgrade path says why
	}
	from, to := minorString(f.from), minorString(f.to)
	if f.from > f.to {
		return
	}
	rep, err := audit.AuditContext(ctx, g.Configurations, audit.Options{FromVersion: from, ToVersion: to, Unreadable: g.Unreadable})
	if err != nil {
		f.auditErr = err
	} else {
		f.admission = &rep
	}
	if len(g.ExtraArgs) > 0 {
		f.args, f.argsErr = audit.CheckExtraArgs(g.ExtraArgs, from, to)
	} else {
		f.args = []audit.ArgFinding{}
	}
}

// etcdQuota is cluster.etcd.extraArgs quota-backend-bytes, 0 when unset
// or not a number.
func etcdQuota(config []byte) int64 {
	dec := yaml.NewDecoder(strings.NewReader(string(config)))
	for {
		var doc struct {
			Cluster struct {
				Etcd struct {
					ExtraArgs map[string]any `yaml:"extraArgs"`
				} `yaml:"etcd"`
			} `yaml:"cluster"`
		}
		if err := dec.Decode(&doc); err != nil {
			return 0
		}
		if v, ok := doc.Cluster.Etcd.ExtraArgs["quota-backend-bytes"]; ok {
			n, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
			if err == nil && n > 0 {
				return n
			}
		}
	}
}

// minorNumber is 34 of "1.34", "v1.34.4", "1.34.4-rc.1" (any 1.NN: what
// audit does not model is the upgrade path's to say).
func minorNumber(v string) (int, error) {
	m := minorShape.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return 0, fmt.Errorf("%q is not a Kubernetes version 1.NN or 1.NN.P", v)
	}
	return strconv.Atoi(m[1])
}

var minorShape = regexp.MustCompile(`^v?1\.([0-9]{1,3})(?:\.[0-9]+(?:[-+][0-9A-Za-z.+-]*)?)?$`)

func minorString(m int) string { return "1." + strconv.Itoa(m) }

// imageTag is the tag of an image reference ("" without one).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}

// sortedNodes is the nodes' addresses, sorted.
func sortedNodes(ns []*nodeFacts) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.Addr)
	}
	sort.Strings(out)
	return out
}
