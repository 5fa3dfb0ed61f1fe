package diagnose

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/talos"
)

// Nodes is what diagnose reads from the Talos nodes; *talos.Client is one.
// Every call only reads.
type Nodes interface {
	Nodes() []string
	NodeName(ctx context.Context, node string) (string, error)
	ReadAPIServerPod(ctx context.Context, node string) (talos.APIServerPod, error)
	ReadAPIServerStatus(ctx context.Context, node, nodeName string) (talos.PodStatus, error)
	APIServerLogs(ctx context.Context, node, nodeName, containerID string, tail int) ([]string, error)
	RunningAPIServerContainer(ctx context.Context, node, nodeName string) (string, error)
}

// Objects lists admission objects; *etcd.Client is one.
type Objects interface {
	List(ctx context.Context, resources []kinds.Kind) (*etcd.Listing, error)
	Endpoints() []string
}

// Readyz is one look at a node's /readyz?verbose.
type Readyz struct {
	Node          string   `json:"node"`
	Ready         bool     `json:"ready"`
	FailingChecks []string `json:"failingChecks,omitempty"`
	// Error says why readyz could not be asked (connection refused, ...).
	Error string `json:"error,omitempty"`
}

// Options tune Run. The readyz probe is a function so that this package
// does not import recovery (recovery imports diagnose): callers pass an
// adapter over recovery.CheckHealth.
type Options struct {
	// Tail is how many kube-apiserver log lines to read per node; default 200.
	Tail int
	// Health asks /readyz?verbose on every node; nil: not asked.
	Health func(ctx context.Context) ([]Readyz, error)
	// EtcdError says why etcd is not read when the etcd client is nil
	// (connection failed); nil with a nil client means not asked.
	EtcdError error
	// Resources are the admission resources listed from etcd; nil: all.
	Resources []kinds.Kind
	// MaxLines is how many distinct evidence lines a finding shows;
	// default 3.
	MaxLines int
	// LostAfter is how long an etcd member down with nothing that says it
	// is lost is watched before it counts as lost; 0: diagnose.LostAfter;
	// below 0: not watched (it is only down).
	LostAfter time.Duration
	// Gone are the nodes the operator said are gone for good: their listed
	// members are lost with them.
	Gone []string
	// Progress says what the diagnosis waits for (a member it watches); nil: nothing.
	Progress func(node, msg string)
}

func (o Options) withDefaults() Options {
	if o.Tail <= 0 {
		o.Tail = 200
	}
	if o.MaxLines <= 0 {
		o.MaxLines = 3
	}
	if o.LostAfter == 0 {
		o.LostAfter = LostAfter
	}
	return o
}

// Evidence is everything read, before any conclusion.
type Evidence struct {
	Nodes       []NodeEvidence `json:"nodes"`
	Etcd        EtcdEvidence   `json:"etcd"`
	HealthError string         `json:"healthError,omitempty"` // readyz could not be asked at all
	HealthAsked bool           `json:"healthAsked"`
	// Space is etcd's room (space.go); nil when it could not be asked.
	Space *SpaceEvidence `json:"space,omitempty"`
	// Members are etcd's members, node by node (members.go); nil when the
	// nodes could not be asked.
	Members *MembersEvidence `json:"members,omitempty"`
	// Encryption is encryption at rest (encryption.go); nil when not read
	// (every kube-apiserver ready, or no reader).
	Encryption *EncryptionEvidence `json:"encryption,omitempty"`
}

// NodeEvidence is what one control-plane node showed.
type NodeEvidence struct {
	Node     string `json:"node"`
	NodeName string `json:"nodeName,omitempty"`
	// Pod is kubelet's view of the kube-apiserver static pod; nil when unread.
	Pod *Pod `json:"pod,omitempty"`
	// Image and the admission flags of the rendered static pod.
	Image           string   `json:"image,omitempty"`
	EnabledPlugins  []string `json:"enabledPlugins,omitempty"`
	DisabledPlugins []string `json:"disabledPlugins,omitempty"`
	// FeatureGates and RuntimeConfig are the --feature-gates and
	// --runtime-config items (the MutatingAdmissionPolicy trap).
	FeatureGates  []string `json:"featureGates,omitempty"`
	RuntimeConfig []string `json:"runtimeConfig,omitempty"`
	Readyz        *Readyz  `json:"readyz,omitempty"`
	// Flags are every flag of the rendered static pod (--name=value, by
	// name, every value), checked against what its version accepts.
	Flags            map[string][]string `json:"-"`
	LogLinesRead     int                 `json:"logLinesRead"`
	Errors           []string            `json:"errors,omitempty"` // what could not be read, and why
	Logs             []string            `json:"-"`
	unreachable      bool
	podRead, logRead bool
	// certHints are the ways to a working talosconfig, when apid refused
	// the talosconfig's client certificate (talos.ErrClientCert).
	certHints []string
}

// Pod is the kube-apiserver static pod status.
type Pod struct {
	Found         bool       `json:"found"`
	Ready         bool       `json:"ready"`
	Running       bool       `json:"running"`
	Restarts      int        `json:"restarts"`
	WaitingReason string     `json:"waitingReason,omitempty"`
	StartedAt     *time.Time `json:"startedAt,omitempty"`
}

// EtcdEvidence is the admission objects found in etcd.
type EtcdEvidence struct {
	Asked     bool              `json:"asked"`
	Endpoints []string          `json:"endpoints,omitempty"`
	Error     string            `json:"error,omitempty"`
	Revision  int64             `json:"revision,omitempty"`
	Objects   []AdmissionObject `json:"objects,omitempty"`
}

// AdmissionObject is one admission object in etcd, reduced to what a
// diagnosis needs.
type AdmissionObject struct {
	Kind      string         `json:"kind"`
	Name      string         `json:"name"`
	Key       string         `json:"key"`
	Encoding  string         `json:"encoding"`
	Webhooks  []WebhookBrief `json:"webhooks,omitempty"`
	Policy    string         `json:"policy,omitempty"` // a binding's policy name
	Failure   string         `json:"failurePolicy,omitempty"`
	Undecoded string         `json:"undecoded,omitempty"` // why the value could not be read
	// StartupRisk is the audit's verdict (deadlock, slow-start, none,
	// unknown) for a webhook configuration: whether one of its webhooks can
	// block kube-apiserver's own start-up writes with its backend down.
	StartupRisk string `json:"startupRisk,omitempty"`
}

// WebhookBrief is one webhook of a configuration.
type WebhookBrief struct {
	Name          string `json:"name"`
	FailurePolicy string `json:"failurePolicy"`
	Target        string `json:"target"`
	Rules         int    `json:"rules"`
	Conditions    int    `json:"matchConditions"`
}

// Run collects the evidence and concludes. It changes nothing anywhere.
// ec may be nil (etcd not reachable, or not asked: see Options.EtcdError).
// Node failures become evidence; the error is only for a cancelled context
// or a talosconfig without nodes.
func Run(ctx context.Context, tc *talos.Client, ec *etcd.Client, opts Options) (*Report, error) {
	var objs Objects
	if ec != nil {
		objs = ec
	}
	ev, err := Gather(ctx, tc, objs, opts)
	if err != nil {
		return nil, err
	}
	return Analyze(ev, opts), nil
}

// errNoQuorum ends the listing of the admission objects: no member can answer it.
var errNoQuorum = errors.New("etcd has no quorum to answer a read")

// causeOf is err, or errNoQuorum when that is what ended ctx.
func causeOf(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, errNoQuorum) {
		return cause
	}
	return err
}

// etcdListTimeout bounds the listing of the admission objects in etcd.
const etcdListTimeout = 30 * time.Second

// ErrNoNodes means there is nothing to diagnose.
var ErrNoNodes = errors.New("no target nodes: the talosconfig context names none")

// Gather reads from every node in parallel, then /readyz (when
// opts.Health is set) and etcd (when objs is not nil).
func Gather(ctx context.Context, nodes Nodes, objs Objects, opts Options) (*Evidence, error) {
	opts = opts.withDefaults()
	list := nodes.Nodes()
	if len(list) == 0 {
		return nil, ErrNoNodes
	}
	ev := &Evidence{Nodes: make([]NodeEvidence, len(list))}
	var wg sync.WaitGroup
	for i, n := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev.Nodes[i] = gatherNode(ctx, nodes, n, opts.Tail)
		}()
	}
	var health []Readyz
	if opts.Health != nil {
		ev.HealthAsked = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if health, err = opts.Health(ctx); err != nil {
				ev.HealthError = err.Error()
			}
		}()
	}
	// An etcd without quorum retries a linearizable read for ever: the
	// reads that go through raft (the listing, the alarms) have deadlines
	// of their own, and end as soon as the members say there is no quorum
	// to answer them.
	raftCtx, noQuorum := context.WithCancelCause(ctx)
	defer noQuorum(nil)
	room, _ := objs.(EtcdRoom)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ev.Space = gatherSpace(ctx, raftCtx, nodes, room)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		reads := MemberReads{Gone: opts.Gone}
		ev.Members = GatherMembers(ctx, nodes, room, reads)
		if ev.Members.QuorumLost() {
			noQuorum(errNoQuorum)
		}
		if opts.LostAfter > 0 && ev.Members != nil {
			ev.Members = Watch(ctx, nodes, room, ev.Members, reads, opts.LostAfter, opts.Progress)
			if ev.Members.QuorumLost() {
				noQuorum(errNoQuorum)
			}
		}
	}()
	if objs != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(raftCtx, etcdListTimeout)
			defer cancel()
			ev.Etcd = gatherEtcd(ctx, objs, opts.Resources)
		}()
	} else if opts.EtcdError != nil {
		ev.Etcd = EtcdEvidence{Asked: true, Error: opts.EtcdError.Error()}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The listing may end on etcd's own timeout before the members' answer
	// does: what ended it is the same.
	if ev.Etcd.Error != "" && ev.Members.QuorumLost() && !strings.HasPrefix(ev.Etcd.Error, errNoQuorum.Error()) {
		ev.Etcd.Error = errNoQuorum.Error() + " (" + ev.Etcd.Error + ")"
	}
	for _, h := range health {
		for i := range ev.Nodes {
			if ev.Nodes[i].Node == h.Node {
				h := h
				ev.Nodes[i].Readyz = &h
			}
		}
	}
	// Encryption at rest is read only where some kube-apiserver is not
	// ready: it reads every stored value of the resources concerned.
	if cr, ok := nodes.(ConfigReader); ok && slices.ContainsFunc(ev.Nodes, func(ne NodeEvidence) bool { return ne.state() != stateReady }) {
		var sr StoredReader
		if s, ok := objs.(StoredReader); ok && ev.Etcd.Error == "" {
			sr = s
		}
		ctx, cancel := context.WithTimeout(ctx, etcdListTimeout)
		ev.Encryption = GatherEncryption(ctx, cr, list, sr)
		cancel()
	}
	return ev, nil
}

func gatherNode(ctx context.Context, nodes Nodes, node string, tail int) NodeEvidence {
	ne := NodeEvidence{Node: node}
	fail := func(err error) {
		ne.Errors = append(ne.Errors, err.Error())
		if errors.Is(err, talos.ErrUnreachable) {
			ne.unreachable = true
		}
		if errors.Is(err, talos.ErrClientCert) && ne.certHints == nil {
			ne.certHints = failure.Hints(err)
		}
	}
	name, err := nodes.NodeName(ctx, node)
	if errors.Is(err, talos.ErrUnreachable) && ctx.Err() == nil {
		// Once more: a connection through an endpoint that just went away
		// fails its first call ("error reading from server: EOF"), and the
		// client then picks another endpoint.
		name, err = nodes.NodeName(ctx, node)
	}
	if err != nil {
		fail(err)
		return ne
	}
	ne.NodeName = name
	if pod, err := nodes.ReadAPIServerPod(ctx, node); err != nil {
		fail(err)
	} else {
		ne.Image = pod.Image
		ne.EnabledPlugins = pod.EnabledPlugins()
		ne.DisabledPlugins = pod.DisabledPlugins()
		ne.FeatureGates, ne.RuntimeConfig = pod.FlagList("feature-gates"), pod.FlagList("runtime-config")
		ne.Flags = pod.Flags
	}
	var containerID string
	var statusRunning bool
	if st, err := nodes.ReadAPIServerStatus(ctx, node, name); err != nil {
		fail(err)
	} else {
		containerID, statusRunning = st.ContainerID, st.Running
		p := &Pod{Found: st.Found, Ready: st.Ready, Running: st.Running, Restarts: st.RestartCount, WaitingReason: st.WaitingReason}
		if !st.StartedAt.IsZero() {
			t := st.StartedAt
			p.StartedAt = &t
		}
		ne.Pod, ne.podRead = p, true
	}
	// The logs of the container the pod status names (the running one, or the
	// last that ran): never whichever the CRI happens to list first. Talos
	// refreshes the status every 15 s: for up to that long after the pod
	// was replaced (a machine config applied) it names the old container,
	// whose log ends before the new one's first words; then the one
	// container the CRI lists running is the current one. A status that
	// names a container not running (crash-looping) is kept: its log says
	// why it died, the next one's may not yet.
	if containerID == "" || statusRunning {
		if running, _ := nodes.RunningAPIServerContainer(ctx, node, name); running != "" && !strings.HasSuffix(containerID, running) {
			containerID = running
		}
	}
	if containerID == "" {
		ne.Errors = append(ne.Errors, "kube-apiserver logs not read: neither the pod status nor the container list names its current container")
	} else if lines, err := readLogs(ctx, nodes, node, name, containerID, tail); err != nil {
		fail(err)
		ne.Logs = lines
	} else {
		ne.Logs, ne.logRead = lines, true
	}
	ne.LogLinesRead = len(ne.Logs)
	return ne
}

// readLogs reads the named container's log. Talos refreshes the pod status
// every 15 s while a crash-looping container is replaced and the dead one
// garbage-collected sooner: when the status names a container that is gone
// (talos.ErrNoContainer), the one running now is the current one.
func readLogs(ctx context.Context, nodes Nodes, node, name, containerID string, tail int) ([]string, error) {
	lines, err := nodes.APIServerLogs(ctx, node, name, containerID, tail)
	if !errors.Is(err, talos.ErrNoContainer) {
		return lines, err
	}
	if running, _ := nodes.RunningAPIServerContainer(ctx, node, name); running != "" && !strings.HasSuffix(containerID, running) {
		return nodes.APIServerLogs(ctx, node, name, running, tail)
	}
	return lines, err
}

func gatherEtcd(ctx context.Context, objs Objects, resources []kinds.Kind) EtcdEvidence {
	ee := EtcdEvidence{Asked: true, Endpoints: objs.Endpoints()}
	l, err := objs.List(ctx, resources)
	if err != nil {
		ee.Error = causeOf(ctx, err).Error()
		return ee
	}
	ee.Revision = l.Cluster.Revision
	risks := startupRisks(ctx, l.Objects)
	for _, o := range l.Objects {
		ao := AdmissionObject{Kind: o.Kind, Name: o.Name, Key: o.Key, Encoding: string(o.Encoding), Undecoded: o.DecodeError}
		for _, w := range o.Webhooks {
			ao.Webhooks = append(ao.Webhooks, WebhookBrief{Name: w.Name, FailurePolicy: w.FailurePolicy, Target: w.Target(), Rules: len(w.Rules), Conditions: len(w.MatchConditions)})
		}
		if o.Policy != nil {
			ao.Policy, ao.Failure = o.Policy.PolicyName, o.Policy.FailurePolicy
		}
		ao.StartupRisk = risks[o.Kind+"/"+o.Name]
		ee.Objects = append(ee.Objects, ao)
	}
	return ee
}
