package upgradecheck

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
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
	// nodes are every node read: those the talosconfig context names, and
	// every control plane the membership names (membership.go).
	nodes    []*nodeFacts
	from, to Minor // from 0: not told
	// fromEvidence says where from came from: the control planes'
	// images (imagesFrom, their lowest minor), else --from (fromGiven).
	fromEvidence string
	imagesFrom   Minor
	fromGiven    Minor
	recorded     *startupwrites.Recording // the pair's recording, nil when modelled

	membership

	etcdErr error // etcd not reached directly
	// etcdReached is the etcd reached directly: its cluster ID and member.
	etcdReached *etcd.ClusterInfo
	etcdMembers []etcd.ListedMember // the members it lists
	alarms      []etcd.Alarm
	alarmsErr   error
	alarmsFrom  string
	usage       *etcd.Usage
	usageErr    error
	versions    *etcd.StoredVersions
	// stored is what etcd holds per resource, by encryption (encryption).
	stored *storedTally
	// talosAccess are the talosconfig's findings (talos-access);
	// talosAccessErr why it could not be read.
	talosAccess    []talos.AccessFinding
	talosAccessErr error
	kubeNodes      []etcd.NodeInfo

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
	Addr string
	// Found says how the gate came to read it: the talosconfig context
	// named it, or the membership ("etcd member cp-2", "discovery").
	Found    string
	Talos    string // its Talos version, "v1.13.8"
	TalosErr error
	// Name is its node name (hostname), as Talos tells it.
	Name string
	// What its machine config says (os:admin); ConfigErr when it could not be read.
	ConfigErr error
	// ControlPlane: its machine config says so, or (unread) the membership.
	ControlPlane bool
	Image        string // cluster.apiServer.image
	Minor        Minor  // the image's minor, 0 without a tag
	Config       []byte
	EtcdCA       bool  // cluster.etcd.ca present
	EtcdQuota    int64 // cluster.etcd.extraArgs quota-backend-bytes, 0 unset
	// Etcd is its own member's status through its Talos API (control
	// planes), EtcdErr why it could not be read; Member the member matched
	// to it (membership.go).
	Etcd    *talos.EtcdMemberStatus
	EtcdErr error
	Member  *memberFacts
}

// foundByContext is how a node the talosconfig context (or -n) names was found.
const foundByContext = "the talosconfig context"

// memberFacts are one etcd member and its status.
type memberFacts struct {
	ID         etcd.ID
	Name       string
	PeerURLs   []string
	ClientURLs []string
	Learner    bool
	Node       string // the control plane it runs on (membership.go), "" if none read
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

// gather reads the cluster: the nodes the context names, then every
// control plane its membership names, etcd, the admission objects and
// flags. Without etcd's quorum only what a member answers alone is read;
// the rest is said not read. It stops early only when nothing else can be
// read.
func gather(ctx context.Context, o *Options) (*facts, *conns) {
	f := &facts{cluster: o.Talos.Context, to: o.To}
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
	f.nodes = readNodes(ctx, tc, tc.Nodes(), foundByContext)

	o.event(f.cluster, "reading the cluster's membership (etcd's members, Talos discovery)")
	f.readMembership(ctx, tc)
	if len(controlPlanes(f.nodes)) == 0 {
		f.setFrom(o.From)
		return f, cs
	}

	o.event(f.cluster, "reading etcd")
	cs.etcd = f.connectEtcd(ctx, tc, o.Etcd)
	if f.members == nil && cs.etcd != nil {
		f.listMembersFromEtcd() // no leader: machined cannot list them, a member still can
		f.readNewControlPlanes(ctx, tc)
	}
	f.matchMembers()
	f.setFrom(o.From)
	f.readMemberStatus(ctx, cs.etcd)
	f.judgeQuorum()
	if f.quorumLost {
		// Without quorum etcd answers no read of its keys: what needs them
		// is said not read. The flags are in the machine configs.
		f.readAudit(ctx, nil, f.nodeConfigs())
		return f, cs
	}
	ec := cs.etcd
	f.readAlarms(ctx, tc, ec)
	if ec == nil {
		f.readAudit(ctx, nil, f.nodeConfigs())
		return f, cs
	}
	o.event(f.cluster, "reading every key of etcd (sizes, stored versions, nodes)")
	tally := etcd.NewVersionTally(ec.Prefix())
	stored := newStoredTally(ec.Prefix(), readersOf(f, o))
	nodesKey := strings.TrimSuffix(ec.Prefix(), "/") + "/" + etcd.NodesResource + "/"
	f.usage, f.usageErr = ec.Usage(ctx, etcd.UsageOptions{Visit: func(k, v []byte) {
		tally.Add(k, v)
		stored.add(k, v)
		if strings.HasPrefix(string(k), nodesKey) {
			if n, ok := etcd.ReadNode(v); ok {
				f.kubeNodes = append(f.kubeNodes, n)
			}
		}
	}})
	if f.usageErr == nil {
		f.versions = tally.Result()
		f.stored = stored
	}
	o.event(f.cluster, "auditing admission objects and kube-apiserver flags")
	f.readAudit(ctx, ec, f.nodeConfigs())
	return f, cs
}

// nodeConfigs are the control planes' machine configs read.
func (f *facts) nodeConfigs() []audit.NodeConfig {
	var configs []audit.NodeConfig
	for _, n := range controlPlanes(f.nodes) {
		if n.Config != nil {
			configs = append(configs, audit.NodeConfig{Node: n.Addr, Image: n.Image, Data: n.Config})
		}
	}
	return configs
}

// callTimeout bounds each node's reads (its version and machine config):
// one that stalls is said, and costs the check no more than this.
const callTimeout = 10 * time.Second

// readNodes asks every node for its Talos version, then its machine
// config; a control plane also for its name and its etcd member's status.
func readNodes(ctx context.Context, tc *talos.Client, addrs []string, found string) []*nodeFacts {
	out, _ := talos.EachNode(addrs, func(addr string) (*nodeFacts, error) {
		n := &nodeFacts{Addr: addr, Found: found}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if n.Talos, n.TalosErr = tc.Version(cctx, addr); n.TalosErr != nil {
			return n, nil
		}
		mc, facts, err := tc.ReadConfigFacts(cctx, addr)
		if err != nil {
			n.ConfigErr = err
			return n, nil
		}
		n.Config, n.ControlPlane, n.Image, n.EtcdCA = mc.Bytes, facts.IsControlPlane(), facts.APIServerImage, len(facts.EtcdCACert) > 0
		n.Minor, _ = minorOf(imageTag(facts.APIServerImage))
		n.EtcdQuota = etcdQuota(mc.Bytes)
		if n.ControlPlane {
			n.Name, _ = tc.NodeName(cctx, addr)
			ectx, cancel := context.WithTimeout(ctx, memberReadTimeout)
			defer cancel()
			st, err := tc.EtcdStatus(ectx, addr)
			if err != nil {
				n.EtcdErr = err
			} else {
				n.Etcd = &st
			}
		}
		return n, nil
	})
	return out
}

// setFrom decides the version upgraded from: the lowest minor the control
// planes' kube-apiserver images name (as talosctl upgrade-k8s detects
// it), or --from where no image has a tag. --from that contradicts the
// images is judged by the upgrade path.
func (f *facts) setFrom(given Minor) {
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
	f.from, f.fromGiven = f.imagesFrom, given
	if f.from == 0 && given != 0 {
		f.from, f.fromEvidence = given, "--from "+given.String()
	}
	if f.from != 0 && f.to != 0 {
		f.recorded, _ = startupwrites.For(int(f.from), int(f.to))
	}
}

// readAlarms lists the cluster's alarms: from etcd, else through the
// Talos API of a control plane.
func (f *facts) readAlarms(ctx context.Context, tc *talos.Client, ec *etcd.Client) {
	if ec != nil {
		if f.alarms, f.alarmsErr = ec.Alarms(ctx); f.alarmsErr == nil {
			f.alarmsFrom = "etcd"
			return
		}
	}
	for _, cp := range controlPlaneAddrs(f.nodes) {
		cctx, cancel := context.WithTimeout(ctx, memberReadTimeout)
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
	g, err := audit.Gather(ctx, audit.Inputs{FromEtcd: ec != nil, Nodes: len(configs) > 0}, recovery.AuditReadersOpen(ec, configs))
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
	from, to := f.from.String(), f.to.String()
	if f.from > f.to {
		return
	}
	if ec != nil { // without etcd's objects, the admission check says not read
		rep, err := audit.AuditContext(ctx, g.Configurations, audit.Options{FromVersion: from, ToVersion: to, Unreadable: g.Unreadable})
		if err != nil {
			f.auditErr = err
		} else {
			f.admission = &rep
		}
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
