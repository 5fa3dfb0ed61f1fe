package lab

// The etcd-nospace scenario (issue 23): etcd reaches its space quota, raises
// the NOSPACE alarm and refuses every write. The running kube-apiserver
// limps (ready, its own writes refused); the upgrade restarts it into the
// full etcd, where the writes its new version must make at start are
// refused and it never becomes ready. (A restart of the same version is
// ready again: its bootstrap objects exist.) Nothing in the machine configs
// or in admission is wrong: etcd needs compaction, defragmentation and its
// alarms disarmed.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/talos"
)

const (
	// ScenarioEtcdNoSpace is etcd full, then the upgrade.
	ScenarioEtcdNoSpace = "etcd-nospace"

	// NoSpaceQuota is each etcd member's space quota in the scenario.
	NoSpaceQuota = 6 << 20

	// FloodNamespace holds the event flood.
	FloodNamespace = "flood"
	// StatusConfigMap (in kube-system) is what a controller rewrites in a
	// loop: its history, not its one live value, fills etcd.
	StatusConfigMap = "cluster-autoscaler-status"

	// NoSpaceLogLine is etcd's refusal, as kube-apiserver relays and logs it.
	NoSpaceLogLine = "etcdserver: mvcc: database space exceeded"
	// NoSpaceCheck is the readyz check whose hook gives up, and makes
	// NewVersion exit, on a full etcd: it cannot write the roles 1.34 adds.
	NoSpaceCheck = "poststarthook/rbac/bootstrap-roles"
)

// FillResult says how etcd was filled.
type FillResult struct {
	Events       int           `json:"events"`       // Events created in FloodNamespace
	StatusWrites int           `json:"statusWrites"` // writes of StatusConfigMap
	Refusal      string        `json:"refusal"`      // kube-apiserver's first refusal
	Elapsed      time.Duration `json:"elapsedNanoseconds"`
}

// FillEtcd fills etcd the way clusters fill it, through kube-apiserver: an
// event flood in FloodNamespace (Events of about 1 KiB, several writers) and
// a controller rewriting StatusConfigMap in a loop, until kube-apiserver
// answers a write with etcd's NoSpaceLogLine. Any other refusal is an error.
func FillEtcd(ctx context.Context, l *Lab, timeout time.Duration) (*FillResult, error) {
	kube, err := l.Kube(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ns := corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: FloodNamespace}}
	if err := kube.Do(ctx, "POST", "/api/v1/namespaces", ns, nil); err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", FloodNamespace, err)
	}
	start := time.Now()
	if err := kube.Do(ctx, "POST", "/api/v1/namespaces/kube-system/configmaps", statusConfigMap(start, 0), nil); err != nil {
		return nil, fmt.Errorf("create configmap %s: %w", StatusConfigMap, err)
	}
	res := &FillResult{}
	var (
		events, writes atomic.Int64
		once           sync.Once
		refusal        error
		wg             sync.WaitGroup
	)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	end := func(err error) {
		once.Do(func() { refusal = err; stop() })
	}
	worker := func(write func(i int64) error, n *atomic.Int64) {
		defer wg.Done()
		for fctx.Err() == nil {
			i := n.Add(1)
			err := write(i)
			if err == nil {
				continue
			}
			n.Add(-1)
			if restarting(err) && !strings.Contains(err.Error(), NoSpaceLogLine) {
				// kube-apiserver went away for a moment (on a loaded
				// machine the kubelet restarts it): write on once it is back.
				select {
				case <-fctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			if fctx.Err() == nil {
				end(err)
			}
			return
		}
	}
	const eventWriters = 3
	for w := range eventWriters {
		wg.Add(1)
		go worker(func(i int64) error {
			ev := floodEvent(w, int(i), time.Now())
			return kube.Do(fctx, "POST", "/api/v1/namespaces/"+FloodNamespace+"/events", ev, nil)
		}, &events)
	}
	wg.Add(1)
	go worker(func(i int64) error {
		return kube.Do(fctx, "PUT", "/api/v1/namespaces/kube-system/configmaps/"+StatusConfigMap, statusConfigMap(time.Now(), int(i)), nil)
	}, &writes)
	wg.Wait()
	res.Events, res.StatusWrites, res.Elapsed = int(events.Load()), int(writes.Load())+1, time.Since(start)
	if refusal == nil {
		return res, fmt.Errorf("etcd still takes writes after %s: %w", timeout, ctx.Err())
	}
	res.Refusal = refusal.Error()
	if !strings.Contains(res.Refusal, NoSpaceLogLine) {
		return res, fmt.Errorf("kube-apiserver refused a write, not for space: %w", refusal)
	}
	return res, nil
}

// restarting tells whether a write failed because kube-apiserver was not
// there to answer (stopping, starting), not because it refused it.
func restarting(err error) bool {
	msg := err.Error()
	for _, s := range []string{"connection refused", "apiserver is shutting down", "EOF", "connection reset", "HTTP 503", "TLS handshake timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// floodEvent is one of a crash-looping deployment's Warning events: an exec
// readiness probe whose output (a health report) kubelet quotes, about 1 KiB
// stored.
func floodEvent(writer, i int, now time.Time) corev1.Event {
	pod := fmt.Sprintf("payments-worker-7d9f8c6b5-%c%04d", 'a'+rune(writer), i)
	at := metav1.NewTime(now)
	return corev1.Event{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%016x", pod, now.UnixNano()), Namespace: FloodNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: FloodNamespace, Name: pod, APIVersion: "v1",
			UID: types.UID(fmt.Sprintf("5f0c3a52-8d1e-4b7a-9c61-%012x", i)), FieldPath: "spec.containers{worker}"},
		Reason: "Unhealthy",
		Message: `Readiness probe failed: {"status":"DOWN","components":{"db":{"status":"DOWN","details":{"error":"org.springframework.jdbc.CannotGetJdbcConnectionException: ` +
			`Failed to obtain JDBC Connection; nested exception is org.postgresql.util.PSQLException: Connection to payments-db.payments.svc:5432 refused. ` +
			`Check that the hostname and port are correct and that the postmaster is accepting TCP/IP connections."}},"diskSpace":{"status":"UP","details":` +
			`{"total":21462233088,"free":17263570944,"threshold":10485760,"exists":true}},"kafka":{"status":"DOWN","details":{"error":"org.apache.kafka.common.errors.TimeoutException: ` +
			`Timed out waiting for a node assignment. Call: describeCluster"}},"ping":{"status":"UP"},"redis":{"status":"UP","details":{"version":"7.2.4"}}}}`,
		Source:              corev1.EventSource{Component: "kubelet", Host: "worker-3"},
		FirstTimestamp:      at,
		LastTimestamp:       at,
		Count:               1,
		Type:                corev1.EventTypeWarning,
		ReportingController: "kubelet",
		ReportingInstance:   "worker-3",
	}
}

// statusConfigMap is the status a cluster-autoscaler writes, the n-th time:
// two dozen node groups, each with its probe times (about 7 KiB).
func statusConfigMap(now time.Time, n int) corev1.ConfigMap {
	ts := now.UTC().Format("2006-01-02 15:04:05.999999999 -0700 MST")
	var b strings.Builder
	fmt.Fprintf(&b, "Cluster-autoscaler status at %s:\nCluster-wide:\n", ts)
	fmt.Fprintf(&b, "  Health:      Healthy (ready=96 unready=0 (resourceUnready=0) notStarted=0 longNotStarted=0 registered=96 longUnregistered=0)\n")
	fmt.Fprintf(&b, "               LastProbeTime:      %s\n               LastTransitionTime: 2026-11-30 08:12:44.123456789 +0000 UTC\n", ts)
	fmt.Fprintf(&b, "  ScaleUp:     NoActivity (ready=96 registered=96)\n               LastProbeTime:      %s\n", ts)
	fmt.Fprintf(&b, "  ScaleDown:   NoCandidates (candidates=0)\n               LastProbeTime:      %s\n\nNodeGroups:\n", ts)
	for g := range 24 {
		fmt.Fprintf(&b, "  Name:        pool-%02d-m6i-2xlarge\n", g)
		fmt.Fprintf(&b, "  Health:      Healthy (ready=4 unready=0 notStarted=0 longNotStarted=0 registered=4 longUnregistered=0 cloudProviderTarget=4 (minSize=2, maxSize=12))\n")
		fmt.Fprintf(&b, "               LastProbeTime:      %s\n", ts)
		fmt.Fprintf(&b, "  ScaleDown:   NoCandidates (candidates=0)\n               LastProbeTime:      %s\n\n", ts)
	}
	return corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: StatusConfigMap, Namespace: "kube-system",
			Annotations: map[string]string{"cluster-autoscaler.kubernetes.io/last-updated": ts, "lab.breakglass.dev/write": fmt.Sprint(n)}},
		Data: map[string]string{"status": b.String()},
	}
}

// NoSpaceEvidence is what each node shows of the full etcd, read once:
// its current kube-apiserver's failing readyz checks (none when it answers
// 200 or does not answer), the lines of that container's log (Talos Logs
// API) holding NoSpaceLogLine, and the alarms the node's etcd member lists
// (Talos EtcdAlarmList).
func NoSpaceEvidence(ctx context.Context, l *Lab) ([]Deadlock, error) {
	kube, api, err := l.watchers(ctx)
	if err != nil {
		return nil, err
	}
	defer api.Close()
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	servers, cur := l.APIServers(), l.Current()
	out := make([]Deadlock, len(l.Nodes()))
	var errs []error
	for i, ip := range l.Nodes() {
		d := Deadlock{Node: ip}
		if ready, failing, err := kube.WithServer(servers[i]).Readyz(ctx); err == nil && !ready {
			d.FailingChecks = failing
		}
		if r, ok := cur[ip]; ok {
			// the current container's log: without its ID, Talos may pick an old one
			if logs, err := readContainerLogs(ctx, api, ip, l.Cluster.Nodes[i].Name, r.ID); err == nil {
				d.LogLines, d.LogSample = countLines(logs, NoSpaceLogLine)
			}
		}
		alarms, err := tc.EtcdAlarms(ctx, ip)
		if err != nil {
			errs = append(errs, err)
		}
		for _, a := range alarms {
			d.Alarms = append(d.Alarms, a.Type+" "+talos.MemberIDString(a.MemberID))
		}
		out[i] = d
	}
	return out, errors.Join(errs...)
}

// countLines counts the lines of logs holding s, and returns the last one.
func countLines(logs, s string) (n int, last string) {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			n, last = n+1, strings.TrimRight(line, "\n")
		}
	}
	return n, last
}

// NoSpace tells whether the node's etcd member lists a NOSPACE alarm.
func (d Deadlock) NoSpace() bool {
	return slices.ContainsFunc(d.Alarms, func(a string) bool { return strings.HasPrefix(a, etcd.AlarmNoSpace+" ") })
}

// minHung is how long a kube-apiserver must have run unready before the
// lab calls it stuck: a start on a healthy etcd takes 3 to 8 s here.
const minHung = 15 * time.Second

// ObserveNoSpace waits until, on every node, kube-apiserver NewVersion has
// run for minHung without becoming ready, its readyz failing on
// NoSpaceCheck, its log holding NoSpaceLogLine, and the node's etcd member
// listing NOSPACE; it returns that evidence.
func ObserveNoSpace(ctx context.Context, l *Lab, timeout time.Duration) ([]Deadlock, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]Deadlock, len(l.Nodes()))
	done := make([]bool, len(l.Nodes()))
	for {
		ev, err := NoSpaceEvidence(ctx, l)
		cur := l.Current()
		all := true
		for i, d := range ev {
			r := cur[d.Node]
			stuck := strings.HasSuffix(r.Image, ":"+NewVersion) && r.Ready.IsZero() && r.Exited.IsZero() && time.Since(r.Started) >= minHung
			if !done[i] && stuck && d.NoSpace() && d.LogLines > 0 && slices.Contains(d.FailingChecks, NoSpaceCheck) {
				out[i], done[i] = d, true
			}
			all = all && done[i]
		}
		if all {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return ev, fmt.Errorf("kube-apiserver %s not seen stuck on the full etcd within %s: %+v (%v)", NewVersion, timeout, ev, err)
		case <-time.After(time.Second):
		}
	}
}

// limpWait is how long observeLimping waits for a running kube-apiserver
// to answer ready once NOSPACE is seen.
const limpWait = 15 * time.Second

// observeLimping waits until every node's etcd member lists NOSPACE and
// every running kube-apiserver (OldVersion) has logged a refused write of
// its own, then up to limpWait until each answers /readyz with 200 (reads
// work), saying which way it went.

func observeLimping(ctx context.Context, l *Lab, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kube, err := l.Kube(ctx)
	if err != nil {
		return err
	}
	seen, start := false, time.Now()
	var ev []Deadlock
	for {
		if !seen {
			ev, err = NoSpaceEvidence(ctx, l)
			seen = err == nil
			for _, d := range ev {
				seen = seen && d.NoSpace() && d.LogLines > 0
			}
		}
		var unready []string
		for _, s := range l.APIServers() {
			if ready, failing, err := kube.WithServer(s).Readyz(ctx); err != nil || !ready {
				unready = append(unready, fmt.Sprintf("%s: %v %v", s, failing, err))
			}
		}
		if seen && unready == nil {
			l.logf("kube-apiserver %s limps on the full etcd: ready, its own writes refused", OldVersion)
			return nil
		}
		if seen && time.Since(start) > limpWait {
			// Under load it may have exited meanwhile (the kubelet restarts
			// it into the full etcd): the incident is there all the same.
			l.logf("kube-apiserver %s is not ready on the full etcd (it restarted into it): %s", OldVersion, strings.Join(unready, "; "))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("NOSPACE not seen on every node within %s: %+v (%v)", timeout, ev, err)
		case <-time.After(time.Second):
		}
	}
}

// runNoSpace: OldVersion ready, etcd filled through it until NOSPACE, the
// running kube-apiserver limping, then the upgrade restarts it into the
// full etcd, where NewVersion never becomes ready.
func runNoSpace(ctx context.Context, l *Lab, tl *Timeline) ([]Deadlock, error) {
	if q := l.opts.EtcdQuotaBytes; q <= 0 || q > 64<<20 {
		return nil, fmt.Errorf("scenario %s fills etcd through kube-apiserver: start the lab with a small etcd quota (Options.EtcdQuotaBytes = NoSpaceQuota, %s), not %s",
			ScenarioEtcdNoSpace, etcd.FormatBytes(NoSpaceQuota), etcd.FormatBytes(q))
	}
	if err := startOnOld(ctx, l, tl); err != nil {
		return nil, err
	}
	var fill *FillResult
	if err := tl.Step(fmt.Sprintf("fill etcd (quota %s a member) through kube-apiserver: ~1 KiB Events in namespace %s, configmap kube-system/%s rewritten in a loop",
		etcd.FormatBytes(l.opts.EtcdQuotaBytes), FloodNamespace, StatusConfigMap), func() error {
		var err error
		fill, err = FillEtcd(ctx, l, 2*time.Minute)
		return err
	}); err != nil {
		return nil, err
	}
	l.logf("filled in %s: %d events, %d status writes, then %q", round(fill.Elapsed), fill.Events, fill.StatusWrites, fill.Refusal)
	if err := tl.Step("etcd raised NOSPACE (listed through the Talos API on every node); kube-apiserver "+OldVersion+" limps (ready, its own writes refused) unless it restarted meanwhile", func() error {
		return observeLimping(ctx, l, time.Minute)
	}); err != nil {
		return nil, err
	}
	if err := upgradeStep(ctx, l, tl); err != nil {
		return nil, err
	}
	var ev []Deadlock
	err := tl.Step("kube-apiserver "+NewVersion+" never ready on the full etcd: readyz fails on "+NoSpaceCheck+", log says '"+NoSpaceLogLine+"'", func() error {
		var err error
		ev, err = ObserveNoSpace(ctx, l, 3*time.Minute)
		return err
	})
	return ev, err
}

// noSpaceNext is what the lab prints to try after the etcd-nospace
// scenario: the members' defragmentations in the order to run them, the
// leader (as etcd says now) last.
func noSpaceNext(l *Lab, tc, sd string) []string {
	first := l.Cluster.Nodes[0]
	all := strings.Join(l.Nodes(), ",")
	cmds := []string{
		fmt.Sprintf("breakglass %s %s diagnose", tc, sd),
		fmt.Sprintf("breakglass %s %s recover", tc, sd),
		"or by hand:",
		fmt.Sprintf("talosctl %s -n %s etcd status   # DB SIZE %.1f MB, the quota (%s); ERRORS alarm:NOSPACE", tc, all, float64(l.opts.EtcdQuotaBytes)/1e6, etcd.FormatBytes(l.opts.EtcdQuotaBytes)),
		fmt.Sprintf("talosctl %s -n %s etcd alarm list", tc, first.IP),
		fmt.Sprintf("talosctl %s -n %s logs -k kube-system/kube-apiserver-%s:kube-apiserver --tail 20   # %s", tc, first.IP, first.Name, NoSpaceLogLine),
		fmt.Sprintf("breakglass %s %s etcd snapshot --out %s", tc, sd, filepath.Join(l.Dir, "full-etcd.snapshot")),
		"compact etcd's history first (talosctl has none; breakglass recover does): a defrag alone gives back nothing here, then",
	}
	for _, ip := range l.defragOrder() {
		cmds = append(cmds, fmt.Sprintf("talosctl %s -n %s etcd defrag", tc, ip))
	}
	return append(cmds,
		fmt.Sprintf("talosctl %s -n %s etcd alarm disarm", tc, first.IP),
		fmt.Sprintf("breakglass %s %s apiserver wait", tc, sd))
}

// defragOrder is the nodes with an etcd member, the leader last.
func (l *Lab) defragOrder() []string {
	var rest, leader []string
	for _, ip := range l.Nodes() {
		ep, ok := l.Etcd.byNode[ip]
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := l.kv.Status(ctx, ep)
		cancel()
		if err == nil && st.Header != nil && st.Leader == st.Header.MemberId {
			leader = append(leader, ip)
		} else {
			rest = append(rest, ip)
		}
	}
	return append(rest, leader...)
}
